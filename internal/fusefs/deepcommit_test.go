package fusefs_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"layerfs.dev/layerfs/internal/overlay/overlaytest"
)

// deepCommitLevels 255-byte directories put the bottom of a chain 4,608
// bytes below the workspace root: past PATH_MAX from the upper directory's
// host path, and from the mount's.
const deepCommitLevels = 18

// TestDeepPathCommit commits a workspace holding paths deeper than
// PATH_MAX, new ones and ones of the base changed in place, checks the
// commit out into a fresh workspace and into a directory, and compares them
// with a plain directory that had the same calls; then changes the bottom
// again and commits once more (on overlay, the incremental scan of a
// kernel-written upper).
func TestDeepPathCommit(t *testing.T) { onBothPaths(t, testDeepPathCommit) }

func testDeepPathCommit(t *testing.T, path string) {
	fill := func(t testing.TB, dir string) {
		bottom := deepChain(t, dir, "low")
		defer unix.Close(bottom)
		deepWrite(t, bottom, "f", "lower f\n")
		deepWrite(t, bottom, "g", "lower g\n")
		require.NoError(t, unix.Mkdirat(bottom, "sub", 0o755))
		sub := deepOpen(t, bottom, "sub")
		defer unix.Close(sub)
		deepWrite(t, sub, "h", "lower h\n")
	}
	e := newEnvWith(t, fill, path)
	m, mnt := e.mount(e.Root)
	// The plain directory gets the same base (cp -a stops at PATH_MAX).
	ref := filepath.Join(t.TempDir(), "ref")
	require.NoError(t, os.Mkdir(ref, 0o755))
	fill(t, ref)
	for _, dir := range []string{ref, mnt} {
		// A new chain: captured whole from the upper.
		bottom := deepChain(t, dir, "new")
		deepWrite(t, bottom, "f", "new f\n")
		f := deepOpenFile(t, bottom, "f")
		require.NoError(t, unix.Fsetxattr(f, "user.deep", []byte("yes"), 0))
		unix.Close(f)
		require.NoError(t, unix.Linkat(bottom, "f", bottom, "f2", 0))
		require.NoError(t, unix.Symlinkat("../../escape", bottom, "s"))
		require.NoError(t, unix.Mkfifoat(bottom, "p", 0o644))
		require.NoError(t, unix.Mkdirat(bottom, "d", 0o750))
		d := deepOpen(t, bottom, "d")
		deepWrite(t, d, "e", "new e\n")
		unix.Close(d)
		unix.Close(bottom)
		// The base's chain changed in place: a copy-up, a metadata change
		// (a metacopy on overlay), a new file and a removal, each a change
		// of its own below lower directories.
		low := deepWalk(t, dir, "low")
		deepWrite(t, low, "f", "changed f\n")
		require.NoError(t, unix.Fchmodat(low, "g", 0o600, 0))
		deepWrite(t, low, "added", "added\n")
		require.NoError(t, unix.Unlinkat(low, "sub/h", 0))
		unix.Close(low)
	}
	root := e.Commit(m)
	_, mnt2 := e.mount(root)
	overlaytest.RequireSame(t, ref, mnt2, "fresh workspace on the commit")
	overlaytest.RequireSame(t, ref, e.Checkout(root), "checkout of the commit")

	for _, dir := range []string{ref, mnt} {
		low := deepWalk(t, dir, "low")
		deepWrite(t, low, "f", "changed again\n")
		require.NoError(t, unix.Unlinkat(low, "g", 0))
		unix.Close(low)
	}
	root = e.Commit(m)
	_, mnt3 := e.mount(root)
	overlaytest.RequireSame(t, ref, mnt3, "fresh workspace on the second commit")
}

// deepChain makes top/name255/.../name255 (deepCommitLevels levels) below
// dir, one level at a time from the previous level's descriptor, and
// returns the bottom's.
func deepChain(t testing.TB, dir, top string) int {
	t.Helper()
	require.NoError(t, os.Mkdir(filepath.Join(dir, top), 0o755))
	fd := deepOpen(t, unix.AT_FDCWD, filepath.Join(dir, top))
	for i := range deepCommitLevels {
		require.NoError(t, unix.Mkdirat(fd, name255, 0o755), "level %d", i)
		next := deepOpen(t, fd, name255)
		unix.Close(fd)
		fd = next
	}
	return fd
}

// deepWalk opens the bottom of the chain dir/top.
func deepWalk(t testing.TB, dir, top string) int {
	t.Helper()
	fd := deepOpen(t, unix.AT_FDCWD, filepath.Join(dir, top))
	for range deepCommitLevels {
		next := deepOpen(t, fd, name255)
		unix.Close(fd)
		fd = next
	}
	return fd
}

func deepOpen(t testing.TB, dir int, name string) int {
	t.Helper()
	fd, err := unix.Openat(dir, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	require.NoError(t, err, "open %s", name)
	return fd
}

func deepOpenFile(t testing.TB, dir int, name string) int {
	t.Helper()
	fd, err := unix.Openat(dir, name, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	require.NoError(t, err, "open %s", name)
	return fd
}

// deepWrite creates or truncates dir/name with data.
func deepWrite(t testing.TB, dir int, name, data string) {
	t.Helper()
	fd, err := unix.Openat(dir, name, unix.O_WRONLY|unix.O_CREAT|unix.O_TRUNC|unix.O_CLOEXEC, 0o644)
	require.NoError(t, err, "create %s", name)
	defer unix.Close(fd)
	_, err = unix.Write(fd, []byte(data))
	require.NoError(t, err, "write %s", name)
}
