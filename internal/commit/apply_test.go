package commit

import (
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"layerfs.dev/layerfs/internal/store"
)

// TestApply: a directory checked out from one tree, applied the difference
// to another, is that tree (contents, modes, types, symlinks, directory
// times); applied again it stays so, and so does one left half applied.
func TestApply(t *testing.T) {
	ctx := t.Context()
	db := newDB(t)
	b, err := db.NewBatch(ctx)
	require.NoError(t, err)
	defer b.Abort()
	ch, err := NewChunker(DefaultParams)
	require.NoError(t, err)
	from := treeOf(t, b, ch, map[string]ent{
		"same": {data: "s"}, "edit": {data: "1\n2\n"}, "gone": {data: "g"}, "mode": {data: "m"},
		"d/keep": {data: "k", mtime: 5}, "d/drop": {data: "x"}, "todir": {data: "f"}, "tofile/a": {data: "a"}, "tofile/b/c": {data: "c"},
		"link": {data: "->one"}, "deep/er/est": {data: "e"},
	})
	to := treeOf(t, b, ch, map[string]ent{
		"same": {data: "s"}, "edit": {data: "1\n2\n3\n", mtime: 9}, "mode": {data: "m", mode: 0o755}, "new": {data: "n"},
		"d/keep": {data: "k", mtime: 5}, "d/add": {data: "y"}, "todir/x": {data: "x"}, "tofile": {data: "now a file"},
		"link": {data: "->two"}, "deep/er/est": {data: "e2"}, "empty": {data: "dir", mode: 0o700},
	})
	require.NoError(t, b.Flush(ctx))
	want, dir := filepath.Join(t.TempDir(), "want"), filepath.Join(t.TempDir(), "got")
	_, err = Checkout(ctx, db, to, want, nil)
	require.NoError(t, err)
	_, err = Checkout(ctx, db, from, dir, nil)
	require.NoError(t, err)
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY, 0)
	require.NoError(t, err)
	defer unix.Close(fd)
	st, err := Apply(ctx, db, from, to, fd, nil)
	require.NoError(t, err)
	require.NotZero(t, st.Removed)
	compareDirs(t, want, dir, cmpOpts{dirTime: true})
	_, err = Apply(ctx, db, from, to, fd, nil)
	require.NoError(t, err, "again, over what it did")
	compareDirs(t, want, dir, cmpOpts{dirTime: true})
	// The way back.
	_, err = Apply(ctx, db, to, from, fd, nil)
	require.NoError(t, err)
	fromDir := filepath.Join(t.TempDir(), "from")
	_, err = Checkout(ctx, db, from, fromDir, nil)
	require.NoError(t, err)
	compareDirs(t, fromDir, dir, cmpOpts{dirTime: true})
	_, err = Apply(ctx, db, store.ZeroID, store.ZeroID, fd, nil)
	require.NoError(t, err)
}
