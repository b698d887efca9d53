package cloexec

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

// openInheritable opens a file without O_CLOEXEC, as go-fuse opens
// /dev/fuse.
func openInheritable(t *testing.T) int {
	t.Helper()
	fd, err := unix.Open(filepath.Join(t.TempDir(), "f"), unix.O_RDWR|unix.O_CREAT, 0o600)
	require.NoError(t, err)
	return fd
}

func cloexec(t *testing.T, fd int) bool {
	t.Helper()
	flags, err := unix.FcntlInt(uintptr(fd), unix.F_GETFD, 0)
	require.NoError(t, err, "F_GETFD %d", fd)
	return flags&unix.FD_CLOEXEC != 0
}

func TestAround(t *testing.T) {
	var fd int
	require.NoError(t, Around(func() error { fd = openInheritable(t); return nil }))
	defer unix.Close(fd)
	if !cloexec(t, fd) {
		t.Errorf("descriptor %d opened inside Around is not close-on-exec", fd)
	}
	want := errors.New("mount failed")
	assert.ErrorIs(t, Around(func() error { return want }), want, "Around")
}

func TestCloseInherited(t *testing.T) {
	a, b := openInheritable(t), openInheritable(t)
	first, below := max(a, b), min(a, b) // only the higher one is closed
	defer unix.Close(below)
	kept, err := os.Open(t.TempDir()) // close-on-exec, as the runtime's own are
	require.NoError(t, err)
	defer kept.Close()
	require.NoError(t, CloseInherited(first))
	for fd, open := range map[int]bool{first: false, below: true, int(kept.Fd()): true} {
		_, err := unix.FcntlInt(uintptr(fd), unix.F_GETFD, 0)
		if got := err == nil; got != open {
			t.Errorf("descriptor %d open = %v after CloseInherited(%d), want %v", fd, got, first, open)
		}
	}
	if !cloexec(t, int(kept.Fd())) {
		t.Error("the close-on-exec descriptor lost its flag")
	}
}
