package fusefs

import (
	"context"
	"errors"
	"io/fs"
	"log/slog"
	"sync"
	"syscall"

	"layerfs.dev/layerfs/internal/store"
)

// errnoMapper is the one place errors become errnos: not found -> ENOENT,
// canceled -> EINTR, deadline -> ETIMEDOUT, a syscall.Errno passes
// through, anything else is logged (once per message) and becomes EIO.
type errnoMapper struct {
	log    *slog.Logger
	mu     sync.Mutex
	logged map[string]bool
}

func (m *errnoMapper) errno(err error) syscall.Errno {
	if err == nil {
		return 0
	}
	var e syscall.Errno
	switch {
	case errors.As(err, &e):
		return e
	case errors.Is(err, store.ErrNotFound), errors.Is(err, fs.ErrNotExist):
		return syscall.ENOENT
	case errors.Is(err, context.Canceled):
		return syscall.EINTR
	case errors.Is(err, context.DeadlineExceeded):
		return syscall.ETIMEDOUT
	}
	msg := err.Error()
	m.mu.Lock()
	first := !m.logged[msg]
	if first {
		if m.logged == nil {
			m.logged = map[string]bool{}
		}
		if len(m.logged) < 1000 {
			m.logged[msg] = true
		}
	}
	m.mu.Unlock()
	if first && m.log != nil {
		m.log.Error("fuse request failed", "err", err)
	}
	return syscall.EIO
}
