package flock

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

// TestLock: a lock another descriptor holds is waited for until it is
// released, or until the context ends.
func TestLock(t *testing.T) {
	path := filepath.Join(t.TempDir(), "lock")
	open := func() *os.File {
		f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
		require.NoError(t, err)
		t.Cleanup(func() { f.Close() })
		return f
	}
	a, b := open(), open()
	require.NoError(t, Lock(t.Context(), a, unix.LOCK_EX))
	ctx, cancel := context.WithTimeout(t.Context(), 50*time.Millisecond)
	defer cancel()
	require.ErrorIs(t, Lock(ctx, b, unix.LOCK_SH), context.DeadlineExceeded)
	time.AfterFunc(20*time.Millisecond, func() { unix.Flock(int(a.Fd()), unix.LOCK_UN) })
	require.NoError(t, Lock(t.Context(), b, unix.LOCK_SH))
}
