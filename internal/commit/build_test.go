package commit

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"layerfs.dev/layerfs/internal/dirfd"
	"layerfs.dev/layerfs/internal/store"
)

// lookup returns the entry at path in the stored tree root.
func lookup(t testing.TB, r Reader, root store.ID, path string) *store.Entry {
	t.Helper()
	id := root
	var e *store.Entry
	for c := range strings.SplitSeq(path, "/") {
		tr, err := r.Tree(t.Context(), id)
		require.NoError(t, err)
		x, ok := tr.Find(c)
		if !ok {
			return nil
		}
		cp := *x
		e = &cp
		id = x.Object
	}
	return e
}

// changeSet keeps a canonical set of changes while a test edits a
// directory, the way a workspace's dirty-path tracking would.
type changeSet struct {
	dir     string
	base    store.ID
	r       Reader
	changes map[string]*Change
	touched map[string]bool // directories whose entries changed
}

func (s *changeSet) dropUnder(p string) {
	for q := range s.changes {
		if isAncestor(p, q) {
			delete(s.changes, q)
		}
	}
	for q := range s.touched {
		if isAncestor(p, q) || q == p {
			delete(s.touched, q)
		}
	}
}

func (s *changeSet) touchParent(p string) {
	if i := strings.LastIndexByte(p, '/'); i > 0 {
		s.touched[p[:i]] = true
	}
}

func (s *changeSet) set(p string, c Change) {
	s.dropUnder(p)
	c.Path = p
	s.changes[p] = &c
	s.touchParent(p)
}

// dirty reports whether p or anything under it was changed.
func (s *changeSet) dirty(p string) bool {
	for q := range s.changes {
		if q == p || isAncestor(p, q) || isAncestor(q, p) {
			return true
		}
	}
	for q := range s.touched {
		if q == p || isAncestor(p, q) || isAncestor(q, p) {
			return true
		}
	}
	return false
}

func (s *changeSet) list() []Change {
	for d := range s.touched {
		if c, ok := s.changes[d]; ok {
			if c.Entry != nil && c.Entry.Type == store.TypeDir {
				// A moved directory whose entries changed: the workspace
				// hands the moved entry with its new metadata.
				e, _, err := statEntry(dirfd.At{Dir: unix.AT_FDCWD, Name: filepath.Join(s.dir, d)}, "", d, nil)
				if err == nil {
					m := *c.Entry
					m.Mode, m.MtimeNs, m.UID, m.GID, m.Xattrs = e.Mode, e.MtimeNs, e.UID, e.GID, e.Xattrs
					c.Entry = &m
				}
			}
			continue
		}
		if fi, err := os.Lstat(filepath.Join(s.dir, d)); err == nil && fi.IsDir() {
			s.changes[d] = &Change{Path: d, Root: s.dir, Source: d}
		}
	}
	var out []Change
	for _, c := range s.changes {
		out = append(out, *c)
	}
	// Any order: Build sorts.
	rand.Shuffle(len(out), func(i, j int) { out[i], out[j] = out[j], out[i] })
	return out
}

// listPaths returns every path under dir (relative), sorted.
func listPaths(t testing.TB, dir string) (files, dirs []string) {
	t.Helper()
	require.NoError(t, filepath.Walk(dir, func(p string, fi os.FileInfo, err error) error {
		if err != nil || p == dir {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		if fi.IsDir() {
			dirs = append(dirs, rel)
		} else {
			files = append(files, rel)
		}
		return nil
	}))
	return files, dirs
}

func randomTree(t testing.TB, r *rand.Rand, dir string, depth int) {
	require.NoError(t, os.MkdirAll(dir, 0o755))
	for i := range 2 + r.IntN(5) {
		p := filepath.Join(dir, fmt.Sprintf("%c%d", 'a'+r.IntN(6), i))
		switch k := r.IntN(10); {
		case k < 6:
			size := r.IntN(3000)
			if r.IntN(8) == 0 {
				size = 40<<10 + r.IntN(100<<10) // chunked
			}
			b := make([]byte, size)
			for j := range b {
				b[j] = byte(r.Uint32())
			}
			require.NoError(t, os.WriteFile(p, b, 0o644))
		case k < 7:
			require.NoError(t, os.Symlink(fmt.Sprintf("target-%d", r.IntN(100)), p))
		default:
			if depth > 0 {
				randomTree(t, r, p, depth-1)
			}
		}
	}
}

// TestBuildMatchesCapture is the property test: random edits of a
// directory, applied to its captured base with Build, give exactly the
// tree a full capture of the edited directory gives.
func TestBuildMatchesCapture(t *testing.T) {
	db := newDB(t)
	for seed := range uint64(40) {
		r := rand.New(rand.NewPCG(seed, 99))
		dir := filepath.Join(t.TempDir(), "w")
		randomTree(t, r, dir, 3)
		base, _ := capture(t, db, dir)
		s := &changeSet{dir: dir, base: base, r: db, changes: map[string]*Change{}, touched: map[string]bool{}}
		var log []string
		for range 1 + r.IntN(12) {
			files, dirs := listPaths(t, dir)
			all := append(slices.Clone(files), dirs...)
			pick := func(xs []string) string {
				if len(xs) == 0 {
					return ""
				}
				return xs[r.IntN(len(xs))]
			}
			parent := func() string {
				if len(dirs) == 0 || r.IntN(3) == 0 {
					return ""
				}
				return pick(dirs)
			}
			switch op := r.IntN(8); op {
			case 0: // modify a file
				p := pick(files)
				if p == "" {
					continue
				}
				fi, _ := os.Lstat(filepath.Join(dir, p))
				if !fi.Mode().IsRegular() {
					continue
				}
				require.NoError(t, os.WriteFile(filepath.Join(dir, p), []byte(fmt.Sprintf("edited %d", r.Int())), 0o600))
				s.set(p, Change{Root: dir, Source: p})
				log = append(log, "modify "+p)
			case 1: // new file
				p := filepath.Join(parent(), fmt.Sprintf("new%d", r.IntN(1000)))
				p = strings.TrimPrefix(p, "/")
				if _, err := os.Lstat(filepath.Join(dir, p)); err == nil {
					continue
				}
				require.NoError(t, os.WriteFile(filepath.Join(dir, p), []byte("new"), 0o640))
				s.set(p, Change{Root: dir, Source: p})
				log = append(log, "create "+p)
			case 2: // delete anything
				p := pick(all)
				if p == "" {
					continue
				}
				require.NoError(t, os.RemoveAll(filepath.Join(dir, p)))
				s.set(p, Change{Delete: true})
				log = append(log, "delete "+p)
			case 3: // new directory with contents
				p := strings.TrimPrefix(filepath.Join(parent(), fmt.Sprintf("nd%d", r.IntN(1000))), "/")
				if _, err := os.Lstat(filepath.Join(dir, p)); err == nil {
					continue
				}
				randomTree(t, r, filepath.Join(dir, p), 1)
				s.set(p, Change{Root: dir, Source: p, Recursive: true})
				log = append(log, "mkdir -r "+p)
			case 4: // a file or symlink becomes a directory
				p := pick(files)
				if p == "" {
					continue
				}
				require.NoError(t, os.Remove(filepath.Join(dir, p)))
				randomTree(t, r, filepath.Join(dir, p), 0)
				s.set(p, Change{Root: dir, Source: p, Recursive: true})
				log = append(log, "file->dir "+p)
			case 5: // a directory becomes a symlink
				p := pick(dirs)
				if p == "" {
					continue
				}
				require.NoError(t, os.RemoveAll(filepath.Join(dir, p)))
				require.NoError(t, os.Symlink("was-a-dir", filepath.Join(dir, p)))
				s.set(p, Change{Root: dir, Source: p})
				log = append(log, "dir->symlink "+p)
			case 6: // chmod a directory: only its own metadata changes
				p := pick(dirs)
				if p == "" {
					continue
				}
				require.NoError(t, os.Chmod(filepath.Join(dir, p), os.FileMode(0o700+r.IntN(0o100))))
				if _, ok := s.changes[p]; !ok {
					s.changes[p] = &Change{Path: p, Root: dir, Source: p}
				}
				log = append(log, "chmod "+p)
			case 7: // rename an unchanged base entry: an Entry change
				src := pick(all)
				if src == "" || s.dirty(src) {
					continue
				}
				e := lookup(t, db, base, src)
				if e == nil {
					continue
				}
				dst := strings.TrimPrefix(filepath.Join(parent(), fmt.Sprintf("mv%d", r.IntN(1000))), "/")
				if dst == src || isAncestor(src, dst) {
					continue
				}
				if _, err := os.Lstat(filepath.Join(dir, dst)); err == nil {
					continue
				}
				require.NoError(t, os.Rename(filepath.Join(dir, src), filepath.Join(dir, dst)))
				s.set(src, Change{Delete: true})
				s.set(dst, Change{Entry: e})
				log = append(log, "rename "+src+" "+dst)
			}
		}
		changes := s.list()
		got, st := buildT(t, db, base, changes)
		want, full := capture(t, db, dir)
		if got != want {
			diffs, _, _ := Diff(t.Context(), db, want, got, "", 20)
			t.Fatalf("seed %d: Build gives %s, capture gives %s\nops: %s\ndiff capture->build: %+v", seed, got.Short(), want.Short(), strings.Join(log, "; "), diffs)
		}
		// The delta Build computed matches the totals of a full capture.
		baseTotals, err := TreeTotals(t.Context(), db, base, nil)
		require.NoError(t, err)
		if baseTotals.Files+st.Delta.Files != full.Delta.Files || baseTotals.Dirs+st.Delta.Dirs != full.Delta.Dirs || baseTotals.Bytes+st.Delta.Bytes != full.Delta.Bytes {
			t.Fatalf("seed %d: base %+v + delta %+v != full %+v\nops: %s", seed, baseTotals, st.Delta, full.Delta, strings.Join(log, "; "))
		}
	}
}

// countingReader counts the trees Build reads.
type countingReader struct {
	Reader
	trees atomic.Int64
}

func (c *countingReader) Tree(ctx context.Context, id store.ID) (*store.Tree, error) {
	c.trees.Add(1)
	return c.Reader.Tree(ctx, id)
}

// TestBuildVisitsOnlyChangedPaths: one changed file in a 100,000-file
// tree reads and writes one tree per ancestor.
func TestBuildVisitsOnlyChangedPaths(t *testing.T) {
	ctx := t.Context()
	db := newDB(t)
	b, err := db.NewBatch(ctx)
	require.NoError(t, err)
	chunk := []byte("same content everywhere")
	cid := store.Hash(store.KindChunk, chunk)
	_, err = b.PutChunk(cid, chunk)
	require.NoError(t, err)
	root := &store.Tree{}
	for d := range 100 {
		sub := &store.Tree{}
		for f := range 1000 {
			sub.Entries = append(sub.Entries, store.Entry{Name: fmt.Sprintf("f%04d", f), Type: store.TypeFile, Mode: 0o644,
				Size: int64(len(chunk)), Object: cid, ObjectKind: store.KindChunk})
		}
		id, err := b.PutTree(sub)
		require.NoError(t, err)
		root.Entries = append(root.Entries, store.Entry{Name: fmt.Sprintf("d%03d", d), Type: store.TypeDir, Mode: 0o755, Object: id, ObjectKind: store.KindTree})
	}
	base, err := b.PutTree(root)
	require.NoError(t, err)
	require.NoError(t, b.Flush(ctx))
	b.Abort()

	src := filepath.Join(t.TempDir(), "f")
	require.NoError(t, os.WriteFile(src, []byte("changed"), 0o644))
	cr := &countingReader{Reader: db}
	b, err = db.NewBatch(ctx)
	require.NoError(t, err)
	defer b.Abort()
	got, st, err := Build(ctx, b, cr, base, []Change{{Path: "d042/f0500", Source: src}}, nil)
	require.NoError(t, err)
	require.NoError(t, b.Flush(ctx))
	if st.Trees != 2 || cr.trees.Load() != 2 {
		t.Errorf("wrote %d trees and read %d, want 2 and 2 (root and d042)", st.Trees, cr.trees.Load())
	}
	if e := lookup(t, db, got, "d042/f0500"); e == nil || e.Size != 7 {
		t.Errorf("d042/f0500 = %+v, want the new 7-byte file", e)
	}
	if e := lookup(t, db, got, "d041/f0500"); e == nil || e.Object != cid {
		t.Errorf("d041/f0500 changed: %+v", e)
	}
	if st.Delta.Files != 0 || st.Delta.Bytes != 7-int64(len(chunk)) {
		t.Errorf("delta %+v, want 0 files and %d bytes", st.Delta, 7-len(chunk))
	}
}

func TestBuildEdgeCases(t *testing.T) {
	db := newDB(t)
	dir := t.TempDir()
	require.NoError(t, os.MkdirAll(filepath.Join(dir, "a/deep"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "a/x"), []byte("x"), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "a/y"), []byte("y"), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "f"), []byte("f"), 0o644))
	base, _ := capture(t, db, dir)

	// Deletes under a replaced directory apply to the replacement.
	repl := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(repl, "x"), []byte("new x"), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(repl, "z"), []byte("z"), 0o644))
	got, _ := buildT(t, db, base, []Change{{Path: "a/x", Delete: true}, {Path: "a", Source: repl, Recursive: true}})
	if lookup(t, db, got, "a/x") != nil || lookup(t, db, got, "a/y") != nil || lookup(t, db, got, "a/z") == nil {
		t.Errorf("delete under a replaced dir: want only a/z")
	}
	// A non-recursive directory change keeps the base's children.
	got, _ = buildT(t, db, base, []Change{{Path: "a", Source: repl}})
	if lookup(t, db, got, "a/x") == nil || lookup(t, db, got, "a/deep") == nil || lookup(t, db, got, "a/z") != nil {
		t.Errorf("non-recursive dir change lost or gained children")
	}
	// Type changes both ways.
	got, _ = buildT(t, db, base, []Change{{Path: "f", Source: repl, Recursive: true}, {Path: "a", Source: filepath.Join(dir, "f")}})
	if e := lookup(t, db, got, "f"); e == nil || e.Type != store.TypeDir {
		t.Errorf("f should be a directory: %+v", e)
	}
	if e := lookup(t, db, got, "a"); e == nil || e.Type != store.TypeFile {
		t.Errorf("a should be a file: %+v", e)
	}
	// Deleting what is not there is a no-op.
	got, _ = buildT(t, db, base, []Change{{Path: "nope/deeper", Delete: true}, {Path: "f/x", Delete: true}})
	if got != base {
		t.Errorf("deleting missing paths changed the tree")
	}
	// Creating a new directory and a file inside it, in one change set.
	got, _ = buildT(t, db, base, []Change{{Path: "n/m", Source: filepath.Join(dir, "f")}, {Path: "n", Source: repl}})
	if lookup(t, db, got, "n/m") == nil || lookup(t, db, got, "n/x") != nil {
		t.Errorf("new dir with one explicit child: wrong contents")
	}

	bad := []struct {
		name    string
		changes []Change
		want    error
	}{
		{"empty path", []Change{{Path: "", Delete: true}}, ErrInvalidPath},
		{"absolute", []Change{{Path: "/etc", Delete: true}}, ErrInvalidPath},
		{"dotdot", []Change{{Path: "a/../../etc", Delete: true}}, ErrInvalidPath},
		{"dot", []Change{{Path: "./a", Delete: true}}, ErrInvalidPath},
		{"double slash", []Change{{Path: "a//x", Delete: true}}, ErrInvalidPath},
		{"trailing slash", []Change{{Path: "a/", Delete: true}}, ErrInvalidPath},
		{"nothing set", []Change{{Path: "a"}}, ErrInvalidChange},
		{"two set", []Change{{Path: "a", Delete: true, Source: dir}}, ErrInvalidChange},
		{"duplicate", []Change{{Path: "a", Delete: true}, {Path: "a", Delete: true}}, ErrInvalidChange},
		{"below a file", []Change{{Path: "f/x", Source: filepath.Join(dir, "f")}}, ErrInvalidChange},
		{"below a missing dir", []Change{{Path: "m/x", Source: filepath.Join(dir, "f")}}, ErrInvalidChange},
		{"below a deleted dir", []Change{{Path: "a", Delete: true}, {Path: "a/x", Source: filepath.Join(dir, "f")}}, ErrInvalidChange},
		{"missing source", []Change{{Path: "a/q", Source: filepath.Join(dir, "does-not-exist")}}, os.ErrNotExist},
	}
	for _, c := range bad {
		b, err := db.NewBatch(t.Context())
		require.NoError(t, err)
		_, _, err = Build(t.Context(), b, db, base, c.changes, nil)
		b.Abort()
		assert.ErrorIs(t, err, c.want, c.name)
	}
}

// TestBuildEmptyDirEntry: a directory Entry with the zero id becomes a real
// empty tree, and changes below it fill it.
func TestBuildEmptyDirEntry(t *testing.T) {
	db := newDB(t)
	f := filepath.Join(t.TempDir(), "f")
	require.NoError(t, os.WriteFile(f, []byte("x"), 0o644))
	dirEntry := &store.Entry{Type: store.TypeDir, Mode: 0o755, ObjectKind: store.KindTree}
	root, _ := buildT(t, db, store.ZeroID, []Change{{Path: "e", Entry: dirEntry}, {Path: "n", Entry: dirEntry}, {Path: "n/f", Source: f}})
	e := lookup(t, db, root, "e")
	if e == nil || e.Object.IsZero() {
		t.Fatalf("e = %+v, want a directory naming a stored empty tree", e)
	}
	if tr, err := db.Tree(t.Context(), e.Object); err != nil || len(tr.Entries) != 0 {
		t.Errorf("e's tree: %v %v", tr, err)
	}
	if lookup(t, db, root, "n/f") == nil {
		t.Errorf("n/f missing")
	}
	rep, err := db.Fsck(t.Context(), nil)
	require.NoError(t, err)
	if !rep.OK() {
		t.Errorf("fsck: %v", rep.Err())
	}
}

// BenchmarkBuildFlat100k: one changed file in a directory of 100,000
// entries. The base tree is shared, not copied; the cost is encoding and
// storing the one new tree.
func BenchmarkBuildFlat100k(bb *testing.B) {
	ctx := bb.Context()
	db := newDB(bb)
	b, err := db.NewBatch(ctx)
	require.NoError(bb, err)
	chunk := []byte("x")
	cid := store.Hash(store.KindChunk, chunk)
	_, err = b.PutChunk(cid, chunk)
	require.NoError(bb, err)
	root := &store.Tree{}
	for f := range 100000 {
		root.Entries = append(root.Entries, store.Entry{Name: fmt.Sprintf("f%06d", f), Type: store.TypeFile, Mode: 0o644,
			Size: 1, Object: cid, ObjectKind: store.KindChunk})
	}
	base, err := b.PutTree(root)
	require.NoError(bb, err)
	require.NoError(bb, b.Flush(ctx))
	b.Abort()
	src := filepath.Join(bb.TempDir(), "f")
	require.NoError(bb, os.WriteFile(src, []byte("y"), 0o644))
	for bb.Loop() {
		b, err := db.NewBatch(ctx)
		require.NoError(bb, err)
		_, _, err = Build(ctx, b, db, base, []Change{{Path: "f050000", Source: src}}, nil)
		require.NoError(bb, err)
		b.Abort()
	}
}
