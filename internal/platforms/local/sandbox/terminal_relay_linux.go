package sandbox

import (
	"io"
	"os"

	"golang.org/x/sys/unix"

	"layerfs.dev/layerfs/internal/platforms"
	"layerfs.dev/layerfs/wire"
)

// relayTerminal relays an exec's terminal once the init has handed its
// master over: its output to the exec's stdout, the spec's stdin to it
// (whose end hangs the terminal up: closing the last master sends the
// command's session SIGHUP), and resizes. The channel closes once the
// output has ended: every process of the exec has let go of the terminal,
// or it was hung up.
func (x *execution) relayTerminal() <-chan struct{} {
	done := make(chan struct{})
	go func() {
		defer close(done)
		m := x.awaitTerminal()
		if m == nil {
			return // the command did not start: its report says why
		}
		stop := make(chan struct{})
		defer close(stop)
		if t := x.cfg.Spec.Terminal; t.Resize != nil {
			go resizeTerminal(m, t.Resize, stop)
		}
		if in := x.cfg.Spec.Stdin; in != nil {
			go func() {
				_, _ = io.Copy(m, in)
				m.Close() // hang up
			}()
		}
		// EIO once every slave is closed; an error once hung up.
		_, _ = io.Copy(x.outW, m)
		m.Close()
	}()
	return done
}

// awaitTerminal is the exec's terminal master, or nil once the exec was
// reported without one.
func (x *execution) awaitTerminal() *os.File {
	select {
	case m := <-x.ip.p.ptys:
		return m
	case <-x.gotReport:
	case <-x.ip.p.done:
	}
	select { // handed over just before the report or the end
	case m := <-x.ip.p.ptys:
		return m
	default:
		return nil
	}
}

// resizeTerminal sets the terminal's size to each that comes until stop.
func resizeTerminal(m *os.File, sizes <-chan wire.TerminalSize, stop <-chan struct{}) {
	rc, err := m.SyscallConn()
	if err != nil {
		return
	}
	for {
		select {
		case <-stop:
			return
		case sz, ok := <-sizes:
			if !ok {
				return
			}
			ws := &unix.Winsize{Row: uint16(min(max(sz.Rows, 1), platforms.MaxTerminal)), Col: uint16(min(max(sz.Cols, 1), platforms.MaxTerminal))}
			_ = rc.Control(func(fd uintptr) { _ = unix.IoctlSetWinsize(int(fd), unix.TIOCSWINSZ, ws) })
		}
	}
}
