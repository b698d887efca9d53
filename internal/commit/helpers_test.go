package commit

import (
	"bytes"
	"database/sql"
	"encoding/binary"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
	_ "modernc.org/sqlite" // the index of version 1 commits written by hand

	"layerfs.dev/layerfs/internal/store"
)

func newDB(t testing.TB) *store.DB {
	t.Helper()
	db, err := store.Init(t.Context(), filepath.Join(t.TempDir(), "store"), store.Options{})
	require.NoError(t, err)
	t.Cleanup(func() { db.Close() })
	return db
}

// capture stores dir as a root tree and flushes.
func capture(t testing.TB, db *store.DB, dir string) (store.ID, Stats) {
	t.Helper()
	ctx := t.Context()
	b, err := db.NewBatch(ctx)
	require.NoError(t, err)
	defer b.Abort()
	id, st, err := CaptureDir(ctx, b, db, dir, nil)
	require.NoError(t, err)
	require.NoError(t, b.Flush(ctx))
	return id, st
}

// buildT applies changes and flushes.
func buildT(t testing.TB, db *store.DB, base store.ID, changes []Change) (store.ID, Stats) {
	t.Helper()
	ctx := t.Context()
	b, err := db.NewBatch(ctx)
	require.NoError(t, err)
	defer b.Abort()
	id, st, err := Build(ctx, b, db, base, changes, nil)
	require.NoError(t, err)
	require.NoError(t, b.Flush(ctx))
	return id, st
}

type cmpOpts struct {
	owners  bool // compare uid and gid
	dirTime bool // compare directory mtimes
	holes   bool // compare allocated blocks of sparse files
}

type fileInfo struct {
	st      unix.Stat_t
	target  string
	xattrs  []store.Xattr
	content []byte
}

// scan lists every path under root with what the comparison needs.
func scan(t testing.TB, root string) map[string]*fileInfo {
	t.Helper()
	out := map[string]*fileInfo{}
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		fi := &fileInfo{}
		if err := unix.Lstat(p, &fi.st); err != nil {
			return err
		}
		if fi.xattrs, err = readXattrs(p); err != nil {
			return err
		}
		switch fi.st.Mode & unix.S_IFMT {
		case unix.S_IFLNK:
			fi.target, err = os.Readlink(p)
		case unix.S_IFREG:
			fi.content, err = os.ReadFile(p)
		}
		out[rel] = fi
		return err
	})
	require.NoError(t, err)
	return out
}

// compareDirs reports every difference between two trees on disk; hard
// links must group the same paths on both sides.
func compareDirs(t testing.TB, want, got string, o cmpOpts) {
	t.Helper()
	a, b := scan(t, want), scan(t, got)
	var problems []string
	addf := func(format string, args ...any) { problems = append(problems, fmt.Sprintf(format, args...)) }
	inoA, inoB := map[uint64]string{}, map[uint64]string{}
	for p, x := range a {
		y, ok := b[p]
		if !ok {
			addf("%q missing", p)
			continue
		}
		if x.st.Mode != y.st.Mode {
			addf("%q: mode %o, want %o", p, y.st.Mode, x.st.Mode)
		}
		if o.owners && (x.st.Uid != y.st.Uid || x.st.Gid != y.st.Gid) {
			addf("%q: owner %d:%d, want %d:%d", p, y.st.Uid, y.st.Gid, x.st.Uid, x.st.Gid)
		}
		isDir := x.st.Mode&unix.S_IFMT == unix.S_IFDIR
		if p != "." && (!isDir || o.dirTime) && x.st.Mtim != y.st.Mtim {
			addf("%q: mtime %v, want %v", p, y.st.Mtim, x.st.Mtim)
		}
		if x.st.Size != y.st.Size && !isDir {
			addf("%q: size %d, want %d", p, y.st.Size, x.st.Size)
		}
		if x.target != y.target {
			addf("%q: target %q, want %q", p, y.target, x.target)
		}
		if x.st.Rdev != y.st.Rdev {
			addf("%q: rdev %x, want %x", p, y.st.Rdev, x.st.Rdev)
		}
		if !bytes.Equal(x.content, y.content) {
			addf("%q: content differs", p)
		}
		if !slices.EqualFunc(x.xattrs, y.xattrs, func(u, v store.Xattr) bool { return u.Name == v.Name && bytes.Equal(u.Value, v.Value) }) {
			addf("%q: xattrs %v, want %v", p, y.xattrs, x.xattrs)
		}
		if o.holes && x.st.Mode&unix.S_IFMT == unix.S_IFREG && x.st.Blocks < x.st.Size/512/2 && y.st.Blocks > x.st.Blocks+64 {
			addf("%q: %d blocks allocated, want about %d (holes lost)", p, y.st.Blocks, x.st.Blocks)
		}
		if x.st.Nlink > 1 && !isDir {
			if q, ok := inoA[x.st.Ino]; ok {
				if bq := inoB[y.st.Ino]; bq != q {
					addf("%q: hard link to %q lost (got %q)", p, q, bq)
				}
			} else {
				inoA[x.st.Ino], inoB[y.st.Ino] = p, p
			}
		}
	}
	for p := range b {
		if _, ok := a[p]; !ok {
			addf("%q unexpected", p)
		}
	}
	slices.Sort(problems)
	if len(problems) > 20 {
		problems = append(problems[:20], fmt.Sprintf("... and %d more", len(problems)-20))
	}
	if len(problems) > 0 {
		t.Errorf("%s vs %s:\n%s", want, got, strings.Join(problems, "\n"))
	}
}

// storeV1Commit stores c the way the store wrote commits before they had
// several parents (encoding version 1: root, one parent or the zero id,
// message, author, time, stats; no generation), straight into the index.
func storeV1Commit(t testing.TB, db *store.DB, c *store.Commit) store.ID {
	t.Helper()
	require.LessOrEqual(t, len(c.Parents), 1, "a version 1 commit has one parent at most")
	b := []byte{1}
	b = append(b, c.Root[:]...)
	parent := c.Parent()
	b = append(b, parent[:]...)
	for _, s := range []string{c.Message, c.Author} {
		b = binary.AppendUvarint(b, uint64(len(s)))
		b = append(b, s...)
	}
	for _, v := range []int64{c.TimeNs, c.Stats.Files, c.Stats.Dirs, c.Stats.Bytes, c.Stats.Changed} {
		b = binary.AppendVarint(b, v)
	}
	id := store.Hash(store.KindCommit, b)
	sdb, err := sql.Open("sqlite", filepath.Join(db.Dir(), "store.db"))
	require.NoError(t, err)
	defer sdb.Close()
	_, err = sdb.ExecContext(t.Context(), `INSERT INTO objects(id, kind, data) VALUES (?, ?, ?)`, id[:], int(store.KindCommit), b)
	require.NoError(t, err)
	got, err := db.Commit(t.Context(), id)
	require.NoError(t, err)
	require.Zero(t, got.Generation, "a version 1 commit")
	return id
}
