package sandbox

import (
	"fmt"

	"golang.org/x/sys/unix"
)

// terminal is an exec's pseudo-terminal, made by the init inside the
// sandbox from the sandbox's own devpts instance (/dev/ptmx there), so the
// command's terminal is a /dev/pts/N of its own /dev and nothing of the
// daemon's. The init hands the master to the launcher (ptyMessage) and
// keeps neither end once the command runs.
type terminal struct {
	master, slave int
}

// ptyMessage is the init's message on its control socket that carries an
// exec's terminal master as its one descriptor.
const ptyMessage = "pty"

// openTerminal opens a pty pair on the sandbox's /dev/ptmx, sized as the
// exec asks, its slave owned by the exec's uid and gid as a login's is.
func openTerminal(cfg *initConfig) (*terminal, error) {
	m, err := unix.Open("/dev/ptmx", unix.O_RDWR|unix.O_NOCTTY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("open /dev/ptmx: %w", err)
	}
	t := &terminal{master: m, slave: -1}
	if err := unix.IoctlSetPointerInt(m, unix.TIOCSPTLCK, 0); err != nil {
		t.close()
		return nil, fmt.Errorf("unlock pty: %w", err)
	}
	ws := &unix.Winsize{Row: cfg.TTY.Rows, Col: cfg.TTY.Cols}
	if err := unix.IoctlSetWinsize(m, unix.TIOCSWINSZ, ws); err != nil {
		t.close()
		return nil, fmt.Errorf("size pty: %w", err)
	}
	// TIOCGPTPEER opens the slave from the master itself, with no lookup
	// of a path that the sandbox's processes could replace.
	s, _, errno := unix.Syscall(unix.SYS_IOCTL, uintptr(m), unix.TIOCGPTPEER, unix.O_RDWR|unix.O_NOCTTY|unix.O_CLOEXEC)
	err = nil
	if errno != 0 {
		err = errno
	} else {
		t.slave = int(s)
		err = unix.Fchown(t.slave, cfg.UID, cfg.GID)
	}
	if err != nil {
		t.close()
		return nil, fmt.Errorf("open the pty's slave: %w", err)
	}
	return t, nil
}

// handOver sends the master to the launcher and closes the init's ends.
func (t *terminal) handOver() error {
	err := unix.Sendmsg(ctlFD, []byte(ptyMessage), unix.UnixRights(t.master), nil, 0)
	t.close()
	if err != nil {
		return fmt.Errorf("send the pty: %w", err)
	}
	return nil
}

func (t *terminal) close() {
	for _, fd := range []*int{&t.master, &t.slave} {
		if *fd >= 0 {
			unix.Close(*fd)
			*fd = -1
		}
	}
}
