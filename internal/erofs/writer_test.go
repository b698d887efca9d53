package erofs

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"layerfs.dev/layerfs/internal/testenv"
)

// mountImage writes an image of root and mounts it (file-backed, no loop
// device) in a temporary directory, unmounted when t ends.
func mountImage(t *testing.T, root *Inode, opts Options) string {
	t.Helper()
	testenv.RequireRoot(t)
	dir := t.TempDir()
	img, mnt := filepath.Join(dir, "img"), filepath.Join(dir, "mnt")
	var buf bytes.Buffer
	require.NoError(t, Write(&buf, root, opts))
	require.NoError(t, os.WriteFile(img, buf.Bytes(), 0o600))
	require.NoError(t, os.Mkdir(mnt, 0o755))
	if err := unix.Mount(img, mnt, "erofs", unix.MS_RDONLY, ""); err != nil {
		testenv.Skip(t, "cannot mount an EROFS image from a file (Linux 6.12+ with EROFS_FS_BACKED_BY_FILE): "+err.Error())
	}
	t.Cleanup(func() { unix.Unmount(mnt, unix.MNT_DETACH) })
	return mnt
}

func dir(mode uint32, entries ...Entry) *Inode {
	return &Inode{Mode: syscall.S_IFDIR | mode, MtimeNs: 1_700_000_000_123_456_789, Entries: entries}
}

func TestWriteMounts(t *testing.T) {
	file := &Inode{Mode: syscall.S_IFREG | 0o640, UID: 1000, GID: 100, Size: 70 << 20, MtimeNs: 1_600_000_000_000_000_001,
		Xattrs: []Xattr{{"trusted.overlay.metacopy", nil}, {"trusted.overlay.redirect", []byte("/a/big")}, {"user.k", []byte("v")}}}
	empty := &Inode{Mode: syscall.S_IFREG | 0o644}
	long := &Inode{Mode: syscall.S_IFREG | 0o644, Size: 1, Xattrs: []Xattr{
		{"trusted.overlay.redirect", bytes.Repeat([]byte("d/"), 2000)}, {"user.big", bytes.Repeat([]byte("x"), 5000)}}}
	many := make([]Entry, 0, 600)
	for i := range 600 {
		many = append(many, Entry{Name: fmt.Sprintf("file-with-a-longer-name-%03d", i), Inode: empty})
	}
	root := dir(0o755,
		Entry{"a", dir(0o700, Entry{"big", file}, Entry{"link", file})},
		Entry{"many", dir(0o755, many...)},
		Entry{"sym", &Inode{Mode: syscall.S_IFLNK | 0o777, Target: "a/big"}},
		Entry{"null", &Inode{Mode: syscall.S_IFCHR | 0o666, Rdev: unix.Mkdev(1, 3)}},
		Entry{"wide", &Inode{Mode: syscall.S_IFBLK | 0o600, Rdev: unix.Mkdev(259, 70000)}},
		Entry{"fifo", &Inode{Mode: syscall.S_IFIFO | 0o600}},
		Entry{"-dash", empty},
		Entry{"long", long},
	)
	mnt := mountImage(t, root, Options{})

	var st unix.Stat_t
	require.NoError(t, unix.Lstat(filepath.Join(mnt, "a/big"), &st))
	assert.Equal(t, uint32(syscall.S_IFREG|0o640), st.Mode)
	assert.Equal(t, int64(70<<20), st.Size)
	assert.Equal(t, uint64(2), st.Nlink)
	assert.Equal(t, [2]uint32{1000, 100}, [2]uint32{st.Uid, st.Gid})
	assert.Equal(t, int64(1_600_000_000_000_000_001), st.Mtim.Nano())
	var st2 unix.Stat_t
	require.NoError(t, unix.Lstat(filepath.Join(mnt, "a/link"), &st2))
	assert.Equal(t, st.Ino, st2.Ino)
	b, err := os.ReadFile(filepath.Join(mnt, "a/big"))
	require.NoError(t, err)
	assert.Equal(t, 70<<20, len(b))
	assert.True(t, !slices.ContainsFunc(b, func(c byte) bool { return c != 0 }), "a hole reads as zeros")
	for name, want := range map[string]string{"trusted.overlay.redirect": "/a/big", "user.k": "v", "trusted.overlay.metacopy": ""} {
		v := make([]byte, 64)
		n, err := unix.Lgetxattr(filepath.Join(mnt, "a/big"), name, v)
		require.NoError(t, err, name)
		assert.Equal(t, want, string(v[:n]), name)
	}

	require.NoError(t, unix.Lstat(filepath.Join(mnt, "a"), &st))
	assert.Equal(t, uint32(syscall.S_IFDIR|0o700), st.Mode)
	assert.Equal(t, int64(1_700_000_000_123_456_789), st.Mtim.Nano())
	require.NoError(t, unix.Lstat(mnt, &st))
	assert.Equal(t, uint64(4), st.Nlink, "2 + subdirectories")

	target, err := os.Readlink(filepath.Join(mnt, "sym"))
	require.NoError(t, err)
	assert.Equal(t, "a/big", target)
	require.NoError(t, unix.Lstat(filepath.Join(mnt, "null"), &st))
	assert.Equal(t, uint32(syscall.S_IFCHR|0o666), st.Mode)
	assert.Equal(t, unix.Mkdev(1, 3), st.Rdev)
	require.NoError(t, unix.Lstat(filepath.Join(mnt, "wide"), &st))
	assert.Equal(t, unix.Mkdev(259, 70000), st.Rdev)
	require.NoError(t, unix.Lstat(filepath.Join(mnt, "fifo"), &st))
	assert.Equal(t, uint32(syscall.S_IFIFO|0o600), st.Mode)

	for name, want := range map[string][]byte{"trusted.overlay.redirect": long.Xattrs[0].Value, "user.big": long.Xattrs[1].Value} {
		v := make([]byte, 8192)
		n, err := unix.Lgetxattr(filepath.Join(mnt, "long"), name, v)
		require.NoError(t, err, "an xattr longer than a block: %s", name)
		assert.Equal(t, want, v[:n], name)
	}

	names, err := os.ReadDir(filepath.Join(mnt, "many"))
	require.NoError(t, err)
	assert.Len(t, names, 600, "a directory of several blocks lists whole")
	for _, e := range many {
		_, err := os.Lstat(filepath.Join(mnt, "many", e.Name))
		require.NoError(t, err, "lookup of %s", e.Name)
	}
	_, err = os.Lstat(filepath.Join(mnt, "many", "absent"))
	assert.ErrorIs(t, err, os.ErrNotExist)
	_, err = os.Lstat(filepath.Join(mnt, "-dash"))
	assert.NoError(t, err, "a name that sorts before \".\"")
}

func TestWriteRefusesWhatItCannotCarry(t *testing.T) {
	for name, root := range map[string]*Inode{
		"xattr namespace": dir(0o755, Entry{"f", &Inode{Mode: syscall.S_IFREG, Xattrs: []Xattr{{"weird.x", nil}}}}),
		"dot name":        dir(0o755, Entry{"..", &Inode{Mode: syscall.S_IFREG}}),
		"file root":       {Mode: syscall.S_IFREG},
	} {
		assert.ErrorIs(t, Write(&bytes.Buffer{}, root, Options{}), ErrUnsupported, name)
	}
}
