package overlay_test

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"layerfs.dev/layerfs/internal/commit"
	"layerfs.dev/layerfs/internal/overlay"
	"layerfs.dev/layerfs/internal/overlay/overlaytest"
	"layerfs.dev/layerfs/internal/store"
	"layerfs.dev/layerfs/internal/testenv"
)

// env is a real Store with a committed lower tree and a workspace over it.
type env struct {
	*overlaytest.Store // Root is the lower the workspace is mounted on, Base a plain copy of it
	t                  testing.TB
	ctx                context.Context
	upper              string
	ov                 *overlay.Overlay
}

// populate writes a small but varied tree: files, a sparse file, nested
// directories, a symlink, a hard-link pair, xattrs, a fifo.
func populate(t testing.TB, dir string) {
	t.Helper()
	require.NoError(t, os.MkdirAll(filepath.Join(dir, "a/b/c"), 0o755))
	require.NoError(t, os.MkdirAll(filepath.Join(dir, "d/e"), 0o750))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "f1"), []byte("hello\n"), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "a/f2"), []byte(strings.Repeat("abc", 40000)), 0o600))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "a/b/f3"), []byte("three"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "a/b/c/f4"), nil, 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "d/e/f5"), []byte("five"), 0o644))
	require.NoError(t, os.Symlink("../f1", filepath.Join(dir, "a/link")))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "h1"), []byte("hard"), 0o644))
	require.NoError(t, os.Link(filepath.Join(dir, "h1"), filepath.Join(dir, "d/h2")))
	require.NoError(t, unix.Setxattr(filepath.Join(dir, "f1"), "user.color", []byte("blue"), 0))
	require.NoError(t, unix.Mkfifo(filepath.Join(dir, "d/fifo"), 0o644))
	f, err := os.Create(filepath.Join(dir, "sparse"))
	require.NoError(t, err)
	require.NoError(t, f.Truncate(8<<20))
	_, err = f.WriteAt([]byte("middle"), 4<<20)
	require.NoError(t, err)
	require.NoError(t, f.Close())
}

func newEnv(t testing.TB, populated bool) *env {
	t.Helper()
	testenv.RequireRoot(t) // whiteouts are device nodes, xattrs are trusted.*
	ctx := t.Context()
	var fill func(testing.TB, string)
	if populated {
		fill = populate
	}
	e := &env{Store: overlaytest.NewStore(t, ctx, fill), t: t, ctx: ctx}
	e.upper = filepath.Join(e.DB.WorkspacesDir(), "w1", "upper")
	e.ov = e.open(e.Root, store.ZeroID)
	return e
}

func (e *env) open(root, base store.ID) *overlay.Overlay {
	e.t.Helper()
	ov, err := overlay.Open(e.ctx, overlay.Config{Lower: e.DB, Root: root, Base: base, UpperDir: e.upper})
	require.NoError(e.t, err)
	return ov
}

// apiTarget applies operations through the overlay API.
type apiTarget struct {
	ctx context.Context
	ov  *overlay.Overlay
}

func (a apiTarget) resolve(p string) (*overlay.Node, error) {
	n := a.ov.Root()
	if p == "" {
		return n, nil
	}
	for _, c := range strings.Split(p, "/") {
		next, err := a.ov.Lookup(a.ctx, n, c)
		if err != nil {
			return nil, err
		}
		n = next
	}
	return n, nil
}

func (a apiTarget) parent(p string) (*overlay.Node, string, error) {
	dir, name := "", p
	if i := strings.LastIndexByte(p, '/'); i >= 0 {
		dir, name = p[:i], p[i+1:]
	}
	d, err := a.resolve(dir)
	return d, name, err
}

// regular resolves p to a regular file, failing like the kernel would for
// a path that follows a (here always dangling) symlink.
func (a apiTarget) regular(p string, follow bool) (*overlay.Node, error) {
	n, err := a.resolve(p)
	if err != nil {
		return nil, err
	}
	switch n.Mode() {
	case syscall.S_IFLNK:
		if follow {
			return nil, syscall.ENOENT
		}
		return nil, syscall.ELOOP
	case syscall.S_IFDIR:
		return nil, syscall.EISDIR
	}
	return n, nil
}

func (a apiTarget) WriteFile(p string, data []byte, mode uint32) error {
	d, name, err := a.parent(p)
	if err != nil {
		return err
	}
	var f *overlay.File
	if n, err := a.ov.Lookup(a.ctx, d, name); err == nil {
		if n.Mode() == syscall.S_IFDIR {
			return syscall.EISDIR
		}
		if n.Mode() == syscall.S_IFLNK {
			return syscall.ELOOP
		}
		if f, err = a.ov.Open(a.ctx, n, os.O_WRONLY|os.O_TRUNC); err != nil {
			return err
		}
	} else if _, f, err = a.ov.Create(a.ctx, d, name, os.O_WRONLY, mode, overlay.Caller{}); err != nil {
		return err
	}
	_, err = f.WriteAt(data, 0)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

func (a apiTarget) WriteAt(p string, off int64, data []byte) error {
	n, err := a.regular(p, false)
	if err != nil {
		return err
	}
	f, err := a.ov.Open(a.ctx, n, os.O_WRONLY)
	if err != nil {
		return err
	}
	_, err = f.WriteAt(data, off)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

func (a apiTarget) Truncate(p string, size int64) error {
	n, err := a.regular(p, true)
	if err != nil {
		return err
	}
	_, err = a.ov.Setattr(a.ctx, n, overlay.SetAttr{Valid: overlay.SetSize, Size: size}, nil)
	return err
}

func (a apiTarget) Rename(from, to string) error {
	od, on, err := a.parent(from)
	if err != nil {
		return err
	}
	nd, nn, err := a.parent(to)
	if err != nil {
		return err
	}
	return a.ov.Rename(a.ctx, od, on, nd, nn, 0)
}

func (a apiTarget) Link(from, to string) error {
	n, err := a.resolve(from)
	if err != nil {
		return err
	}
	d, name, err := a.parent(to)
	if err != nil {
		return err
	}
	return a.ov.Link(a.ctx, n, d, name)
}

func (a apiTarget) Unlink(p string) error {
	d, name, err := a.parent(p)
	if err != nil {
		return err
	}
	return a.ov.Unlink(a.ctx, d, name)
}

func (a apiTarget) Mkdir(p string, mode uint32) error {
	d, name, err := a.parent(p)
	if err != nil {
		return err
	}
	_, err = a.ov.Mkdir(a.ctx, d, name, mode, overlay.Caller{})
	return err
}

func (a apiTarget) Rmdir(p string) error {
	d, name, err := a.parent(p)
	if err != nil {
		return err
	}
	return a.ov.Rmdir(a.ctx, d, name)
}

func (a apiTarget) Chmod(p string, mode uint32) error {
	n, err := a.resolve(p)
	if err != nil {
		return err
	}
	if n.Mode() == syscall.S_IFLNK {
		return syscall.ENOENT
	}
	_, err = a.ov.Setattr(a.ctx, n, overlay.SetAttr{Valid: overlay.SetMode, Mode: mode}, nil)
	return err
}

func (a apiTarget) Symlink(target, p string) error {
	d, name, err := a.parent(p)
	if err != nil {
		return err
	}
	_, err = a.ov.Symlink(a.ctx, d, name, target, overlay.Caller{})
	return err
}

func (a apiTarget) Mkfifo(p string, mode uint32) error {
	d, name, err := a.parent(p)
	if err != nil {
		return err
	}
	_, err = a.ov.Mknod(a.ctx, d, name, syscall.S_IFIFO|mode, 0, overlay.Caller{})
	return err
}

func (a apiTarget) Setxattr(p, name string, value []byte) error {
	n, err := a.resolve(p)
	if err != nil {
		return err
	}
	return a.ov.Setxattr(a.ctx, n, name, value, 0)
}

// runLockstep applies n seeded operations to the reference directory and
// to target, requiring the same outcome from both; every commitEvery
// operations it commits the workspace and checks the checkout.
func runLockstep(t *testing.T, e *env, target overlaytest.Target, ref string, seed uint64, n, commitEvery int) store.ID {
	files, dirs := overlaytest.Scan(ref)
	g := overlaytest.NewGen(seed, files, dirs)
	var root store.ID
	var recent []string
	for i := 0; i < n; i++ {
		op, err := g.Step(ref, target)
		require.NoError(t, err, "op %d", i)
		recent = append(recent, fmt.Sprintf("%d %v", i, op))
		if commitEvery > 0 && (i+1)%commitEvery == 0 {
			root = e.Commit(e.ov)
			if diffs := overlaytest.Compare(ref, e.Checkout(root)); len(diffs) > 0 {
				if len(recent) < 60 {
					t.Logf("ops since the last commit:\n%s", strings.Join(recent, "\n"))
				}
				overlaytest.RequireSame(t, ref, e.Checkout(root), fmt.Sprintf("checkout after op %d", i))
			}
			recent = recent[:0]
		}
	}
	return root
}

func TestRandomOpsAPI(t *testing.T) {
	for _, populated := range []bool{false, true} {
		t.Run(fmt.Sprintf("populated=%v", populated), func(t *testing.T) {
			e := newEnv(t, populated)
			ref := filepath.Join(t.TempDir(), "ref")
			if _, err := commit.Checkout(e.ctx, e.DB, e.Root, ref, nil); err != nil && populated {
				t.Fatal(err)
			}
			os.MkdirAll(ref, 0o755)
			every := 5000
			if v := os.Getenv("LAYERFS_COMMIT_EVERY"); v != "" {
				fmt.Sscan(v, &every)
			}
			root := runLockstep(t, e, apiTarget{e.ctx, e.ov}, ref, 42, 20000, every)
			// A fresh overlay on the new commit shows the same tree.
			ov2, err := overlay.Open(e.ctx, overlay.Config{Lower: e.DB, Root: root, UpperDir: filepath.Join(t.TempDir(), "u2")})
			require.NoError(t, err)
			files, _ := overlaytest.Scan(ref)
			for _, f := range files {
				n, err := apiTarget{e.ctx, ov2}.resolve(f)
				require.NoError(t, err, "fresh overlay: %s", f)
				want, _ := os.ReadFile(filepath.Join(ref, f))
				of, err := ov2.Open(e.ctx, n, os.O_RDONLY)
				require.NoError(t, err)
				got := make([]byte, len(want)+1)
				k, _ := of.ReadAt(got, 0)
				of.Close()
				if string(got[:k]) != string(want) {
					t.Fatalf("fresh overlay: %s: content differs", f)
				}
			}
		})
	}
}

// TestEvictedLower: a lower file whose cache file the Store evicted after
// a first open is materialized again by the next open and copy-up.
func TestEvictedLower(t *testing.T) {
	e := newEnv(t, true)
	a := apiTarget{ctx: e.ctx, ov: e.ov}
	n, err := a.regular("a/f2", false)
	require.NoError(t, err)
	want := []byte(strings.Repeat("abc", 40000))
	read := func() []byte {
		f, err := e.ov.Open(e.ctx, n, unix.O_RDONLY)
		require.NoError(t, err)
		defer f.Close()
		b := make([]byte, len(want)+1)
		k, err := f.ReadAt(b, 0)
		require.ErrorIs(t, err, io.EOF)
		return b[:k]
	}
	require.Equal(t, want, read())
	evictAll(t, e.DB)
	require.Equal(t, want, read(), "read after eviction")
	evictAll(t, e.DB)
	f, err := e.ov.Open(e.ctx, n, unix.O_RDWR)
	require.NoError(t, err, "copy-up after eviction")
	require.NoError(t, f.Close())
	require.NoError(t, e.ov.Close())
	got, err := os.ReadFile(filepath.Join(e.upper, "a", "f2"))
	require.NoError(t, err)
	require.Equal(t, want, got)
}

// evictAll removes every content from db's cache, as its bound would.
func evictAll(t *testing.T, db *store.DB) {
	t.Helper()
	dirs, err := filepath.Glob(filepath.Join(db.CacheDir(), "[0-9a-f][0-9a-f]", "*"))
	require.NoError(t, err)
	require.NotEmpty(t, dirs)
	for _, p := range dirs {
		require.NoError(t, os.Remove(p))
	}
}

// TestCloseAfterCommit: a file open for writing counts as changed, and its
// close (which the kernel sends after the writer's close(2) has returned)
// keeps it changed only if it was written since the commit listed it. A
// write straight to the backing file, as FUSE passthrough makes, counts.
func TestCloseAfterCommit(t *testing.T) {
	e := newEnv(t, true)
	a := apiTarget{ctx: e.ctx, ov: e.ov}
	changed := func() []string {
		cs, err := e.ov.Changes(e.ctx)
		require.NoError(t, err)
		var out []string
		for _, c := range cs.Changes {
			out = append(out, c.Path)
		}
		return out
	}
	open := func() *overlay.File {
		n, err := a.regular("f1", false)
		require.NoError(t, err)
		f, err := e.ov.Open(e.ctx, n, os.O_WRONLY)
		require.NoError(t, err)
		return f
	}

	f := open()
	_, err := f.WriteAt([]byte("HELLO"), 0)
	require.NoError(t, err)
	e.Commit(e.ov)
	require.Equal(t, []string{"f1"}, changed(), "open for writing: changed")
	e.Commit(e.ov)
	require.NoError(t, f.Close())
	require.Empty(t, changed(), "closed after the commit, unwritten since: clean")

	f = open()
	e.Commit(e.ov)
	_, err = f.OSFile().WriteAt([]byte("hello"), 0) // past the overlay, as passthrough
	require.NoError(t, err)
	require.NoError(t, f.Close())
	require.Equal(t, []string{"f1"}, changed(), "written after the commit's listing: changed")
	e.Commit(e.ov)
	require.Empty(t, changed())
}
