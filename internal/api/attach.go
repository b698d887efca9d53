package api

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"layerfs.dev/layerfs/wire"
)

// hangupGrace is how long an attached exec whose client vanished may run
// on after its input ended (a terminal hung up), before it is killed.
const hangupGrace = 5 * time.Second

// attach runs an exec over one upgraded connection (wire.AttachProtocol):
// its input as the client sends it, its output as it comes, a terminal's
// resizes. The 101 goes out when the command first reads its input or
// writes output (or ends), so an exec refused before it starts gets an
// ordinary JSON error.
func (s *Server) attach(w http.ResponseWriter, r *http.Request) error {
	id, err := idParam(r)
	if err != nil {
		return err
	}
	if !upgradeAsked(r) {
		return invalid("attach needs the headers Connection: Upgrade and Upgrade: %s", wire.AttachProtocol)
	}
	var req wire.ExecRequest
	if err := decode(w, r, &req); err != nil {
		return err
	}
	// The request's context ends when its connection does, which after
	// the upgrade is the client's leaving: that hangs the exec up first
	// (readFrames), so the exec's context ends only with the daemon's
	// (Abort), the grace after a hang-up, or a client gone before the
	// upgrade.
	ctx, cancel := context.WithCancel(context.WithoutCancel(ctxOf(r)))
	defer cancel()
	defer context.AfterFunc(s.abortCtx, cancel)()
	a := newAttachment(w, cancel)
	defer context.AfterFunc(ctxOf(r), func() {
		if !a.upgraded() {
			cancel()
		}
	})()
	res, err := s.executor.Attach(ctx, id, req, a.stdin(), a.writer(wire.FrameStdout), a.writer(wire.FrameStderr), a.resize)
	if !a.upgraded() && err != nil {
		return err
	}
	if uerr := a.upgrade(); uerr != nil {
		s.log.Debug("attach: upgrade failed", "workspace", id, "err", uerr)
		return nil
	}
	ev := wire.ExecEvent{Result: &res}
	if err != nil {
		_, e, internal := classify(err)
		if internal {
			s.log.Error("attached exec failed", "id", w.Header().Get("X-Request-Id"), "workspace", id, "err", err)
			e.Message = "internal error; the daemon's log has the details under request id " + w.Header().Get("X-Request-Id")
		}
		ev = wire.ExecEvent{Error: &e}
	}
	a.end(ev)
	return nil
}

// upgradeAsked reports whether r asks for wire.AttachProtocol.
func upgradeAsked(r *http.Request) bool {
	conn := false
	for _, v := range r.Header.Values("Connection") {
		for _, t := range strings.Split(v, ",") {
			conn = conn || strings.EqualFold(strings.TrimSpace(t), "upgrade")
		}
	}
	return conn && strings.EqualFold(r.Header.Get("Upgrade"), wire.AttachProtocol)
}

// attachment is an attached exec's connection: upgraded once, then read
// for frames by one goroutine and written (frames of output) under mu.
type attachment struct {
	w      http.ResponseWriter
	cancel context.CancelFunc
	resize chan wire.TerminalSize
	inR    *io.PipeReader
	inW    *io.PipeWriter

	mu   sync.Mutex
	conn net.Conn
	brw  *bufio.ReadWriter
	err  error // the upgrade's, once tried
	done bool  // the upgrade was tried
}

func newAttachment(w http.ResponseWriter, cancel context.CancelFunc) *attachment {
	a := &attachment{w: w, cancel: cancel, resize: make(chan wire.TerminalSize, 4)}
	a.inR, a.inW = io.Pipe()
	return a
}

func (a *attachment) upgraded() bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.done && a.err == nil
}

// upgrade answers 101 and starts reading frames, once.
func (a *attachment) upgrade() error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.done {
		return a.err
	}
	a.done = true
	if rec, ok := a.w.(*recorder); ok {
		rec.status = http.StatusSwitchingProtocols
	}
	a.conn, a.brw, a.err = http.NewResponseController(a.w).Hijack()
	if a.err != nil {
		return a.err
	}
	_ = a.conn.SetDeadline(time.Time{})
	_, a.err = a.brw.WriteString("HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: " + wire.AttachProtocol + "\r\n\r\n")
	if a.err == nil {
		a.err = a.brw.Flush()
	}
	if a.err != nil {
		a.conn.Close()
		return a.err
	}
	go a.readFrames(a.brw.Reader)
	return nil
}

// readFrames feeds the client's frames to the exec until the client ends
// the connection, which ends the exec's input (a terminal hangs up); an
// exec that runs on hangupGrace after that is killed.
func (a *attachment) readFrames(r io.Reader) {
	defer func() {
		a.inW.Close()
		time.AfterFunc(hangupGrace, a.cancel)
	}()
	for {
		typ, p, err := wire.ReadFrame(r)
		if err != nil {
			return
		}
		switch typ {
		case wire.FrameStdin:
			if _, err := a.inW.Write(p); err != nil && !errors.Is(err, io.ErrClosedPipe) {
				return
			}
		case wire.FrameStdinEnd:
			a.inW.Close()
		case wire.FrameResize:
			var sz wire.TerminalSize
			if json.Unmarshal(p, &sz) != nil {
				return
			}
			select {
			case a.resize <- sz:
			default: // the exec is behind: the newest size wins later
			}
		default:
			return // not a client's frame
		}
	}
}

// stdin is the exec's input: its first read upgrades the connection.
func (a *attachment) stdin() io.Reader { return attachedInput{a} }

type attachedInput struct{ a *attachment }

func (in attachedInput) Read(p []byte) (int, error) {
	if err := in.a.upgrade(); err != nil {
		return 0, err
	}
	return in.a.inR.Read(p)
}

// writer sends what is written to it as frames of typ.
func (a *attachment) writer(typ byte) io.Writer { return attachedOutput{a, typ} }

type attachedOutput struct {
	a   *attachment
	typ byte
}

func (o attachedOutput) Write(p []byte) (int, error) {
	if err := o.a.upgrade(); err != nil {
		return 0, err
	}
	o.a.mu.Lock()
	defer o.a.mu.Unlock()
	for rest := p; len(rest) > 0; {
		n := min(len(rest), wire.MaxFramePayload)
		if err := wire.WriteFrame(o.a.brw, o.typ, rest[:n]); err != nil {
			return 0, err
		}
		rest = rest[n:]
	}
	return len(p), o.a.brw.Flush()
}

// end sends the last frame and closes the connection.
func (a *attachment) end(ev wire.ExecEvent) {
	b, err := json.Marshal(ev)
	a.mu.Lock()
	defer a.mu.Unlock()
	if err == nil && wire.WriteFrame(a.brw, wire.FrameEnd, b) == nil {
		_ = a.brw.Flush()
	}
	a.conn.Close()
	a.inR.Close()
}
