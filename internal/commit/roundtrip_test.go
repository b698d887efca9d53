package commit

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"layerfs.dev/layerfs/internal/store"
	"layerfs.dev/layerfs/internal/testenv"
)

func goroot(t *testing.T) string {
	out, err := exec.Command(testenv.GoTool(), "env", "GOROOT").Output()
	require.NoError(t, err, "go env GOROOT")
	return strings.TrimSpace(string(out))
}

// TestRoundTripGoSource imports the Go standard library's source tree,
// checks it out and compares the two trees.
func TestRoundTripGoSource(t *testing.T) {
	src := filepath.Join(goroot(t), "src")
	require.DirExists(t, src, "no Go source tree")
	db := newDB(t)
	start := time.Now()
	root, st := capture(t, db, src)
	t.Logf("capture took %v", time.Since(start))
	t.Logf("captured %d entries, %d files, %d bytes, %d chunks (%d new), %d trees", st.Entries, st.Files, st.Bytes, st.Chunks, st.NewChunks, st.Trees)
	if st.Files < 5000 {
		t.Fatalf("captured only %d files from %s", st.Files, src)
	}
	out := filepath.Join(t.TempDir(), "out")
	start = time.Now()
	cst, err := Checkout(t.Context(), db, root, out, nil)
	t.Logf("checkout took %v", time.Since(start))
	require.NoError(t, err)
	if cst.Files != st.Files {
		t.Errorf("checked out %d files, captured %d", cst.Files, st.Files)
	}
	compareDirs(t, src, out, cmpOpts{owners: os.Geteuid() == 0, dirTime: true})
	// Capturing the checkout gives the same root: nothing was lost.
	again, st2 := capture(t, db, out)
	if again != root {
		t.Errorf("re-capture of the checkout: root %s, want %s", again.Short(), root.Short())
	}
	if st2.NewBytes != 0 {
		t.Errorf("re-capture stored %d new payload bytes, want 0", st2.NewBytes)
	}
}

// specialTree builds a tree with everything an entry can hold.
func specialTree(t *testing.T, dir string) {
	w := func(p, s string) { require.NoError(t, os.WriteFile(filepath.Join(dir, p), []byte(s), 0o644)) }
	require.NoError(t, os.MkdirAll(filepath.Join(dir, "sub/empty"), 0o755))
	require.NoError(t, os.MkdirAll(filepath.Join(dir, "ro"), 0o755))
	w("ro/f", "read-only dir")
	require.NoError(t, os.Chmod(filepath.Join(dir, "ro"), 0o555))
	w("a", "hello\n")
	w("zero", "")
	w("name with spaces", "s")
	w("new\nline", "n")
	w("bad\xff\xfeutf8", "b")
	w("sub/exec", "#!/bin/sh\n")
	require.NoError(t, os.Chmod(filepath.Join(dir, "sub/exec"), 0o4755))
	require.NoError(t, os.Chmod(filepath.Join(dir, "zero"), 0o600))
	big := make([]byte, 300<<10)
	for i := range big {
		big[i] = byte(i * 7 / 3)
	}
	require.NoError(t, os.WriteFile(filepath.Join(dir, "big"), big, 0o644))
	require.NoError(t, os.Link(filepath.Join(dir, "a"), filepath.Join(dir, "sub/hardlink-to-a")))
	require.NoError(t, os.Link(filepath.Join(dir, "big"), filepath.Join(dir, "big-link")))
	require.NoError(t, os.Symlink("a", filepath.Join(dir, "link")))
	require.NoError(t, os.Symlink("/etc/passwd", filepath.Join(dir, "abs-link")))
	require.NoError(t, os.Symlink("../../outside", filepath.Join(dir, "sub/dangling")))
	// A 100 MiB sparse file: a little data at the start, middle and end.
	f, err := os.Create(filepath.Join(dir, "sparse"))
	require.NoError(t, err)
	for _, off := range []int64{0, 50 << 20, 100<<20 - 5} {
		_, err := f.WriteAt([]byte("data!"), off)
		require.NoError(t, err)
	}
	require.NoError(t, f.Close())
	// A file that is all hole.
	w("sub/empty-sparse", "")
	require.NoError(t, os.Truncate(filepath.Join(dir, "sub/empty-sparse"), 1<<20))
	require.NoError(t, unix.Mkfifo(filepath.Join(dir, "fifo"), 0o640))
	for _, x := range []struct{ path, name, value string }{
		{"a", "user.color", "blue"},
		{"a", "user.empty", ""},
		{"sub", "user.dir", "yes"},
		{"big", "user.bin", "\x00\x01\x02"},
	} {
		require.NoError(t, unix.Lsetxattr(filepath.Join(dir, x.path), x.name, []byte(x.value), 0), "set xattr")
	}
	if os.Geteuid() == 0 {
		require.NoError(t, unix.Lsetxattr(filepath.Join(dir, "link"), "trusted.t", []byte("on a symlink"), 0))
		require.NoError(t, unix.Lsetxattr(filepath.Join(dir, "a"), "security.test", []byte("sec"), 0))
		require.NoError(t, unix.Mknod(filepath.Join(dir, "null"), unix.S_IFCHR|0o666, int(unix.Mkdev(1, 3))))
		require.NoError(t, unix.Mknod(filepath.Join(dir, "blk"), unix.S_IFBLK|0o600, int(unix.Mkdev(7, 99))))
		require.NoError(t, unix.Mknod(filepath.Join(dir, "sock"), unix.S_IFSOCK|0o755, 0))
		require.NoError(t, os.Lchown(filepath.Join(dir, "a"), 1234, 5678))
		require.NoError(t, os.Lchown(filepath.Join(dir, "link"), 42, 43))
		require.NoError(t, os.Chown(filepath.Join(dir, "sub/empty"), 7, 8))
	}
	// Odd mtimes, set last, directories after their contents.
	for i, p := range []string{"a", "zero", "sparse", "link", "fifo", "sub/empty", "sub", "ro"} {
		ts := []unix.Timespec{{Sec: 1e9 + int64(i), Nsec: 123456789}, {Sec: 1e9 + int64(i), Nsec: 123456789}}
		require.NoError(t, unix.UtimesNanoAt(unix.AT_FDCWD, filepath.Join(dir, p), ts, unix.AT_SYMLINK_NOFOLLOW))
	}
}

func TestRoundTripSpecial(t *testing.T) {
	testenv.RequireRoot(t) // devices, owners, trusted.* xattrs
	src := filepath.Join(t.TempDir(), "src")
	require.NoError(t, os.Mkdir(src, 0o755))
	specialTree(t, src)
	db := newDB(t)
	root, st := capture(t, db, src)
	t.Logf("stats: %+v", st)
	out := filepath.Join(t.TempDir(), "out")
	_, err := Checkout(t.Context(), db, root, out, nil)
	require.NoError(t, err)
	compareDirs(t, src, out, cmpOpts{owners: true, dirTime: true, holes: true})
	// The sparse file keeps its holes: far fewer blocks than bytes.
	var sst unix.Stat_t
	require.NoError(t, unix.Stat(filepath.Join(out, "sparse"), &sst))
	if sst.Size != 100<<20 || sst.Blocks*512 > 1<<20 {
		t.Errorf("sparse file: size %d, %d bytes allocated; want 100 MiB with holes", sst.Size, sst.Blocks*512)
	}
	// Its manifest records holes with zero ids; only a few bytes are stored.
	if st.NewBytes > 400<<10 {
		t.Errorf("stored %d payload bytes; the sparse file's holes were stored as data", st.NewBytes)
	}
	again, _ := capture(t, db, out)
	if again != root {
		t.Errorf("re-capture of the checkout: root %s, want %s", again.Short(), root.Short())
	}
	// Hard links come out as one inode.
	var a, l unix.Stat_t
	require.NoError(t, unix.Stat(filepath.Join(out, "a"), &a))
	require.NoError(t, unix.Stat(filepath.Join(out, "sub/hardlink-to-a"), &l))
	if a.Ino != l.Ino {
		t.Errorf("a and sub/hardlink-to-a are different inodes")
	}
}

func TestCheckoutRefusesNonEmpty(t *testing.T) {
	db := newDB(t)
	src := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(src, "f"), []byte("new"), 0o644))
	root, _ := capture(t, db, src)
	out := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(out, "f"), []byte("old"), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(out, "other"), []byte("keep"), 0o644))
	if _, err := Checkout(t.Context(), db, root, out, nil); err == nil || !strings.Contains(err.Error(), "not empty") {
		t.Fatalf("checkout into a non-empty dir: err = %v, want ErrNotEmpty", err)
	}
	if b, _ := os.ReadFile(filepath.Join(out, "f")); string(b) != "old" {
		t.Fatalf("refused checkout changed f to %q", b)
	}
	_, err := Checkout(t.Context(), db, root, out, &CheckoutOptions{Overwrite: true})
	require.NoError(t, err)
	if b, _ := os.ReadFile(filepath.Join(out, "f")); string(b) != "new" {
		t.Fatalf("overwrite checkout: f = %q, want new", b)
	}
}

// TestCheckoutNoSymlinkEscape: a tree whose directory entry is replaced by
// a symlink on disk must not make Checkout write through it.
func TestCheckoutNoSymlinkEscape(t *testing.T) {
	db := newDB(t)
	src := t.TempDir()
	require.NoError(t, os.Mkdir(filepath.Join(src, "d"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(src, "d/f"), []byte("x"), 0o644))
	root, _ := capture(t, db, src)
	outside := t.TempDir()
	out := t.TempDir()
	require.NoError(t, os.Symlink(outside, filepath.Join(out, "d")))
	_, err := Checkout(t.Context(), db, root, out, &CheckoutOptions{Overwrite: true})
	require.NoError(t, err)
	_, err = os.Stat(filepath.Join(outside, "f"))
	require.ErrorIs(t, err, os.ErrNotExist, "checkout wrote through a symlink out of the target")
	if fi, err := os.Lstat(filepath.Join(out, "d")); err != nil || !fi.IsDir() {
		t.Fatalf("d should now be a real directory: %v %v", fi, err)
	}
	_ = store.ZeroID
}
