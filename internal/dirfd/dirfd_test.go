package dirfd

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"layerfs.dev/layerfs/internal/testenv"
)

func TestBeneath(t *testing.T) {
	outside := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(outside, "secret"), []byte("x"), 0o600))
	dir := t.TempDir()
	require.NoError(t, os.MkdirAll(filepath.Join(dir, "a/b"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "a/b/f"), []byte("f"), 0o644))
	require.NoError(t, os.Symlink(outside, filepath.Join(dir, "a/out")))
	long := strings.Repeat("t", 300)
	require.NoError(t, os.Symlink(long, filepath.Join(dir, "a/long")))
	// A chain of 255-byte names far past PATH_MAX.
	name := strings.Repeat("n", 255)
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY, 0)
	require.NoError(t, err)
	deep := ""
	for range 20 {
		require.NoError(t, unix.Mkdirat(fd, name, 0o755))
		next, err := unix.Openat(fd, name, unix.O_RDONLY|unix.O_DIRECTORY, 0)
		unix.Close(fd)
		require.NoError(t, err)
		fd, deep = next, deep+name+"/"
	}
	require.NoError(t, unix.Mkfifoat(fd, "p", 0o644))
	unix.Close(fd)

	root, err := OpenRoot(dir)
	require.NoError(t, err)
	defer unix.Close(root)
	for _, c := range []struct {
		rel  string
		mode uint32
		err  error
	}{
		{"a/b/f", unix.S_IFREG, nil},
		{"a/out", unix.S_IFLNK, nil},      // the symlink itself
		{"a/out/secret", 0, unix.ENOTDIR}, // never through it, last on the way
		{"a/out/x/y", 0, unix.ELOOP},      // nor on the way
		{"a/../../x", 0, unix.EXDEV},      // never above the root
		{"a/..", 0, unix.EINVAL},          // nor by a last ".."
		{"..", 0, unix.EINVAL},
		{deep + "p", unix.S_IFIFO, nil}, // 5,100 bytes deep
	} {
		a, err := Beneath(root, c.rel)
		if err == nil {
			var st unix.Stat_t
			err = a.Lstat(&st)
			unix.Close(a.Dir)
			if err == nil && st.Mode&unix.S_IFMT != c.mode {
				t.Errorf("%.40s: mode %o, want %o", c.rel, st.Mode&unix.S_IFMT, c.mode)
			}
		}
		if !errors.Is(err, c.err) && !(c.err == nil && err == nil) {
			t.Errorf("%.40s: %v, want %v", c.rel, err, c.err)
		}
	}
	a, err := Beneath(root, "a/long")
	require.NoError(t, err)
	defer unix.Close(a.Dir)
	if got, err := a.Readlink(); err != nil || got != long {
		t.Errorf("readlink of a 300-byte target: %d bytes, %v", len(got), err)
	}
	var st unix.Stat_t
	if err := LstatBeneath(dir, deep+"p", &st); err != nil || st.Mode&unix.S_IFMT != unix.S_IFIFO {
		t.Errorf("LstatBeneath of the deep fifo: mode %o, %v", st.Mode, err)
	}
}

// TestListxattr lists an entry's xattrs through listxattrat and through the
// /proc path it falls back to, not following a final symlink, and asks
// for the size with a nil buffer.
func TestListxattr(t *testing.T) {
	dir := t.TempDir()
	f := filepath.Join(dir, "f")
	require.NoError(t, os.WriteFile(f, nil, 0o644))
	if err := unix.Setxattr(f, "user.one", []byte("1"), 0); err != nil {
		testenv.Skip(t, "user xattrs on "+dir+": "+err.Error())
	}
	require.NoError(t, unix.Setxattr(f, "user.two", []byte("2"), 0))
	require.NoError(t, os.Symlink("f", filepath.Join(dir, "link")))
	fd, err := unix.Open(dir, unix.O_PATH|unix.O_DIRECTORY, 0)
	require.NoError(t, err)
	defer unix.Close(fd)
	for _, fallback := range []bool{false, true} {
		noListxattrat.Store(fallback)
		size, err := At{fd, "f"}.Listxattr(nil)
		require.NoError(t, err)
		buf := make([]byte, size)
		n, err := At{fd, "f"}.Listxattr(buf)
		require.NoError(t, err)
		require.Equal(t, "user.one\x00user.two\x00", string(buf[:n]), "fallback %v", fallback)
		n, err = At{fd, "link"}.Listxattr(buf)
		require.NoError(t, err)
		require.NotContains(t, string(buf[:n]), "user.", "fallback %v: followed the symlink", fallback)
		_, err = At{fd, "f"}.Listxattr(make([]byte, 3))
		require.ErrorIs(t, err, unix.ERANGE, "fallback %v", fallback)
	}
	noListxattrat.Store(false)
}
