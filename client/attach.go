package client

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync"

	"layerfs.dev/layerfs/wire"
	"layerfs.dev/layerfs/wire/errclass"
)

// AttachOptions are an attached exec's: those of an exec (its Stdin
// excepted: an attached exec's input is what Attached.Write sends) and a
// terminal.
type AttachOptions struct {
	ExecOptions
	// TTY, when set, runs the command on a terminal of this size ({} for
	// 24 rows, 80 columns): its output all comes to Stdout, and the end of
	// its input (CloseStdin, Close) hangs it up.
	TTY *wire.TerminalSize
}

// Attached is an exec attached over one connection to its daemon: Write
// sends its input as it comes, Resize a terminal's new size, and Wait
// returns its result once it has ended. Its output goes to the options'
// Stdout and Stderr as it comes (or, for those left nil, into the
// result). It is safe for concurrent use.
type Attached struct {
	conn io.ReadWriteCloser
	wmu  sync.Mutex
	stop func() bool
	done chan struct{}
	res  *ExecResult
	err  error
}

// Attach starts argv in a fresh sandbox on the workspace, attached: see
// Attached. A request the daemon refuses fails here.
func (ws *Workspace) Attach(ctx context.Context, argv []string, opts AttachOptions) (*Attached, error) {
	if opts.Stdin != nil {
		return nil, fmt.Errorf("%w: an attached exec's input is written to it, not given in its options", errclass.Invalid)
	}
	req := opts.request(wire.ExecRequest{Argv: argv})
	req.TTY = opts.TTY
	b, err := json.Marshal(req)
	if err != nil {
		return nil, err
	}
	resp, err := ws.send(ctx, call{method: http.MethodPost, path: ws.path("/attach"), data: b,
		ctype: "application/json", upgrade: wire.AttachProtocol})
	if err != nil {
		return nil, err
	}
	conn, ok := resp.Body.(io.ReadWriteCloser)
	if resp.StatusCode != http.StatusSwitchingProtocols || !ok {
		resp.Body.Close()
		return nil, fmt.Errorf("attach: the daemon answered %s, not 101 Switching Protocols", resp.Status)
	}
	a := &Attached{conn: conn, done: make(chan struct{})}
	a.stop = context.AfterFunc(ctx, func() { conn.Close() })
	go a.read(ctx, opts.Stdout, opts.Stderr)
	return a, nil
}

// Terminal starts argv (nil for bash) on a terminal of the given size,
// its output written to out as it comes: an interactive shell when argv
// is nil. Write what the user types; Close when the user leaves.
func (ws *Workspace) Terminal(ctx context.Context, argv []string, size wire.TerminalSize, out io.Writer) (*Attached, error) {
	if argv == nil {
		argv = []string{"bash"}
	}
	return ws.Attach(ctx, argv, AttachOptions{ExecOptions: ExecOptions{Stdout: out}, TTY: &size})
}

// read receives the daemon's frames until the last.
func (a *Attached) read(ctx context.Context, stdout, stderr io.Writer) {
	defer close(a.done)
	defer a.stop()
	defer a.conn.Close()
	var out, errb bytes.Buffer
	if stdout == nil {
		stdout = &out
	}
	if stderr == nil {
		stderr = &errb
	}
	for {
		typ, p, err := wire.ReadFrame(a.conn)
		if err != nil {
			a.err = fmt.Errorf("read attached exec: %w", lostOr(ctx, err))
			return
		}
		switch typ {
		case wire.FrameStdout:
			_, err = stdout.Write(p)
		case wire.FrameStderr:
			_, err = stderr.Write(p)
		case wire.FrameEnd:
			var ev wire.ExecEvent
			switch err := json.Unmarshal(p, &ev); {
			case err != nil:
				a.err = fmt.Errorf("read attached exec: %w", err)
			case ev.Error != nil:
				a.err = ev.Error
			case ev.Result != nil:
				a.res = ev.Result
				a.res.Stdout, a.res.Stderr = out.Bytes(), errb.Bytes()
			default:
				a.err = errors.New("read attached exec: its last frame has neither result nor error")
			}
			return
		}
		if err != nil {
			a.err = fmt.Errorf("attached exec: write output: %w", err)
			return
		}
	}
}

// Write sends p as the command's input.
func (a *Attached) Write(p []byte) (int, error) {
	for rest := p; len(rest) > 0; {
		n := min(len(rest), wire.MaxFramePayload)
		if err := a.frame(wire.FrameStdin, rest[:n]); err != nil {
			return len(p) - len(rest), err
		}
		rest = rest[n:]
	}
	return len(p), nil
}

// CloseStdin ends the command's input; on a terminal it hangs it up. After
// the exec has ended it does nothing.
func (a *Attached) CloseStdin() error { return a.frame(wire.FrameStdinEnd, nil) }

// Resize gives a terminal a new size.
func (a *Attached) Resize(rows, cols int) error {
	b, err := json.Marshal(wire.TerminalSize{Rows: rows, Cols: cols})
	if err != nil {
		return err
	}
	return a.frame(wire.FrameResize, b)
}

// frame sends one frame. Once the exec has ended, the end of its input
// and a resize are moot (nil), and input is an error.
func (a *Attached) frame(typ byte, p []byte) error {
	a.wmu.Lock()
	defer a.wmu.Unlock()
	err := wire.WriteFrame(a.conn, typ, p)
	if err != nil {
		// The connection is ending (the exec's end closes it, as may its
		// peer): the reader ends too, and tells whether the exec ended.
		<-a.done
	}
	select {
	case <-a.done:
		if typ != wire.FrameStdin {
			return nil
		}
		if err == nil {
			err = errors.New("it has ended")
		}
	default:
	}
	if err != nil {
		return fmt.Errorf("attached exec: %w", err)
	}
	return nil
}

// Wait waits for the exec to end and returns its result; with Stdout or
// Stderr left nil in the options, the result holds that output.
func (a *Attached) Wait() (*ExecResult, error) {
	<-a.done
	return a.res, a.err
}

// Close drops the connection: the command's input ends (a terminal is hung
// up), and a command still running some seconds later is killed. Wait
// then reports the connection's end unless the result came first.
func (a *Attached) Close() error {
	err := a.conn.Close()
	<-a.done
	return err
}
