package platformtest

import (
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"layerfs.dev/layerfs/internal/platforms"
	"layerfs.dev/layerfs/wire"
)

// screen collects a terminal's output and lets a test wait for a text.
type screen struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (s *screen) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.buf.Write(p)
}

func (s *screen) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.buf.String()
}

// waitFor waits until the output holds text.
func (s *screen) waitFor(t *testing.T, text string) {
	t.Helper()
	deadline := time.Now().Add(execTimeout)
	for !strings.Contains(s.String(), text) {
		if time.Now().After(deadline) {
			t.Fatalf("the terminal never showed %q; it shows %q", text, s.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// terminalExec is an exec on a terminal running in the background.
type terminalExec struct {
	in     *io.PipeWriter
	resize chan wire.TerminalSize
	out    *screen
	done   chan struct{}
	res    platforms.ExecResult
	err    error
}

func (e *env) startTerminal(t *testing.T, argv []string, rows, cols int) *terminalExec {
	r, w := io.Pipe()
	te := &terminalExec{in: w, resize: make(chan wire.TerminalSize), out: &screen{}, done: make(chan struct{})}
	spec := platforms.ExecSpec{Argv: argv, Stdin: r, Terminal: &platforms.Terminal{Rows: rows, Cols: cols, Resize: te.resize}}
	go func() {
		defer close(te.done)
		te.res, te.err = e.sb.Exec(ctxFor(t, execTimeout), spec, te.out, te.out)
	}()
	t.Cleanup(func() { w.Close(); <-te.done })
	return te
}

func (te *terminalExec) wait(t *testing.T) platforms.ExecResult {
	t.Helper()
	select {
	case <-te.done:
	case <-time.After(execTimeout):
		t.Fatalf("the terminal's exec did not end; it shows %q", te.out.String())
	}
	if te.err != nil {
		t.Fatalf("terminal exec: %v", te.err)
	}
	return te.res
}

// testTerminal: a command on a terminal of the sandbox's own sees one of
// the size asked for, resized as asked; Ctrl-C reaches the foreground
// process group; the exit code comes back; and a terminal hung up (its
// input ended, as when its user vanishes) sends its session SIGHUP and
// leaves nothing.
func testTerminal(t *testing.T, e *env) {
	if !e.p.Features().Terminal {
		_, err := e.sb.Exec(ctxFor(t, execTimeout), platforms.ExecSpec{Argv: []string{"true"}, Terminal: &platforms.Terminal{}}, nil, nil)
		if !errors.Is(err, platforms.ErrNoTerminal) {
			t.Errorf("a terminal on a platform without: %v, want ErrNoTerminal", err)
		}
		return
	}
	t.Run("Terminal", func(t *testing.T) {
		te := e.startTerminal(t, platforms.ShellArgv(`tty; stty size; [ -t 0 ] && [ -t 1 ] && [ -t 2 ] && echo all-tty; exit 5`), 30, 100)
		res := te.wait(t)
		out := strings.ReplaceAll(te.out.String(), "\r\n", "\n")
		if !strings.Contains(out, "/dev/pts/") || !strings.Contains(out, "\n30 100\n") || !strings.Contains(out, "all-tty") || res.ExitCode != 5 {
			t.Errorf("got %q, exit %d; want a /dev/pts/N of 30 rows and 100 columns on stdin, stdout and stderr, exit 5", out, res.ExitCode)
		}
	})
	t.Run("Interactive", func(t *testing.T) {
		te := e.startTerminal(t, []string{"bash", "--norc", "--noprofile", "-i"}, 0, 0)
		write := func(s string) {
			if _, err := te.in.Write([]byte(s)); err != nil {
				t.Fatal(err)
			}
		}
		write("stty size; echo sized-$((6*7))\n")
		te.out.waitFor(t, "24 80")
		te.resize <- wire.TerminalSize{Rows: 40, Cols: 120}
		time.Sleep(100 * time.Millisecond)
		write("stty size; echo resized-$((6*7))\n")
		te.out.waitFor(t, "resized-42")
		write("sleep 60; echo slept-$((6*7))\n")
		time.Sleep(500 * time.Millisecond)
		t0 := time.Now()
		write("\x03")
		write("echo back-$((6*7))\n")
		te.out.waitFor(t, "back-42")
		write("exit 3\n")
		res := te.wait(t)
		out := te.out.String()
		if res.ExitCode != 3 || !strings.Contains(out, "40 120") || strings.Contains(out, "slept-42") || time.Since(t0) > 30*time.Second {
			t.Errorf("got %q, exit %d after %v; want the resize seen, the sleep interrupted, exit 3", out, res.ExitCode, time.Since(t0))
		}
	})
	t.Run("HangUp", func(t *testing.T) {
		mark := filepath.Join(e.ws, "hung-up")
		te := e.startTerminal(t, platforms.ShellArgv(`trap 'echo hup > /workspace/hung-up; exit 0' HUP; echo ready; while :; do sleep 0.1; done`), 0, 0)
		te.out.waitFor(t, "ready")
		t0 := time.Now()
		te.in.Close()
		res := te.wait(t)
		b, err := os.ReadFile(mark)
		if err != nil || string(b) != "hup\n" || res.ExitCode != 0 || time.Since(t0) > killSlack {
			t.Errorf("hung up: mark %q (%v), exit %d after %v; want the session to get SIGHUP and exit 0", b, err, res.ExitCode, time.Since(t0))
		}
		os.Remove(mark)
	})
}
