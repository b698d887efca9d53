// Package flock takes flock(2) locks that wait only as long as a context
// allows: a non-blocking attempt, retried with a growing pause (up to
// 100 ms) until the lock is granted or the context ends, so that an open
// blocked by another process's lock can be cancelled.
package flock

import (
	"context"
	"errors"
	"os"
	"time"

	"golang.org/x/sys/unix"
)

// Lock takes the lock how (unix.LOCK_SH or unix.LOCK_EX) on f, waiting
// until it is granted or ctx ends.
func Lock(ctx context.Context, f *os.File, how int) error {
	for delay := time.Millisecond; ; delay = min(delay*2, 100*time.Millisecond) {
		err := unix.Flock(int(f.Fd()), how|unix.LOCK_NB)
		if err == nil {
			return nil
		}
		if !errors.Is(err, unix.EWOULDBLOCK) && !errors.Is(err, unix.EINTR) {
			return err
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(delay):
		}
	}
}
