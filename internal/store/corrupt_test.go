package store

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

// flipPackByte flips one byte of chunk id's payload in its pack and returns
// the pack's path.
func flipPackByte(t *testing.T, db *DB, id ID, at int64) string {
	t.Helper()
	var pack, off int64
	require.NoError(t, db.withTx(t.Context(), txRead, func(tx *tx) error {
		return tx.Row(t.Context(), `SELECT pack, off FROM chunks WHERE id = ?`, id[:]).Scan(&pack, &off)
	}))
	path := db.packs.Path(pack)
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	require.NoError(t, err)
	defer f.Close()
	b := make([]byte, 1)
	_, err = f.ReadAt(b, off+at)
	require.NoError(t, err)
	b[0] ^= 0x40
	_, err = f.WriteAt(b, off+at)
	require.NoError(t, err)
	return path
}

func wantCorrupt(t *testing.T, what string, err error, names ...string) {
	t.Helper()
	require.ErrorIs(t, err, ErrCorrupt, what)
	for _, n := range names {
		require.ErrorContains(t, err, n, what)
	}
}

func TestCorruptPackIsCaught(t *testing.T) {
	ctx := t.Context()
	db := newDB(t)
	small := randBytes(1, 5000)
	big := randBytes(2, 3*testChunkSize+7)
	c := commitFiles(t, db, ZeroID, "c", map[string][]byte{"small": small, "big": big})
	tr, _ := db.Tree(ctx, mustCommit(t, db, c).Root)
	bigE, _ := tr.Find("big")
	smallE, _ := tr.Find("small")
	m, err := db.Manifest(ctx, bigE.Object)
	require.NoError(t, err)
	victim := m.Extents[1].Chunk
	pack := flipPackByte(t, db, victim, 100)
	smallPack := flipPackByte(t, db, smallE.Object, 0)

	_, err = db.Chunk(ctx, victim)
	wantCorrupt(t, "Chunk", err, victim.String(), pack)
	rc, err := db.OpenContent(ctx, bigE)
	require.NoError(t, err)
	_, err = readCloser(rc)
	wantCorrupt(t, "OpenContent", err, victim.String(), pack)
	_, err = db.OpenContent(ctx, smallE)
	wantCorrupt(t, "OpenContent small", err, smallE.Object.String(), smallPack)
	_, err = db.Materialize(ctx, bigE)
	wantCorrupt(t, "Materialize", err, victim.String(), pack)
	_, err = os.Stat(db.CachePath(bigE.Object))
	require.ErrorIs(t, err, os.ErrNotExist, "a failed Materialize left a cache file")
	ents, _ := os.ReadDir(filepath.Dir(db.CachePath(bigE.Object)))
	require.Empty(t, ents, "a failed Materialize left files")

	rep, err := db.Fsck(ctx, nil)
	require.NoError(t, err)
	found := map[ID]Problem{}
	for _, p := range rep.Problems {
		found[p.Object] = p
	}
	require.Len(t, rep.Problems, 2, "Fsck problems")
	require.Equal(t, "hash", found[victim].Kind, "Fsck problems: %v", rep.Problems)
	require.Equal(t, pack, found[victim].Where, "Fsck problems: %v", rep.Problems)
	require.Equal(t, "hash", found[smallE.Object].Kind, "Fsck problems: %v", rep.Problems)
	wantCorrupt(t, "FsckReport.Err", rep.Err(), victim.String())
	_, err = db.GC(ctx, GCOptions{})
	require.NoError(t, err, "GC over a bad chunk still runs (chunks are not decoded)")
}

func TestCorruptRowsAreCaught(t *testing.T) {
	ctx := t.Context()
	db := newDB(t)
	c := commitFiles(t, db, ZeroID, "c", map[string][]byte{"a": []byte("a"), "b": randBytes(3, 2*testChunkSize)})
	root := mustCommit(t, db, c).Root
	tr, _ := db.Tree(ctx, root)
	bE, _ := tr.Find("b")
	manifest := bE.Object
	_, err := db.CreateProject(ctx, "p", c)
	require.NoError(t, err)
	// A fresh handle, so the tree is not cached.
	dir := db.Dir()
	db.Close()
	db, err = Open(ctx, dir, Options{})
	require.NoError(t, err)
	defer db.Close()
	flipRow := func(id ID) {
		require.NoError(t, db.withTx(ctx, txWrite, func(tx *tx) error {
			_, err := tx.Exec(ctx, `UPDATE objects SET data = CAST(substr(data, 1, length(data) - 1) || x'7f' AS BLOB) WHERE id = ?`, id[:])
			return err
		}))
	}
	flipRow(root)
	flipRow(manifest)
	_, err = db.Tree(ctx, root)
	wantCorrupt(t, "Tree", err, root.String())
	_, err = db.Manifest(ctx, manifest)
	wantCorrupt(t, "Manifest", err, manifest.String())
	_, err = db.OpenContent(ctx, bE)
	wantCorrupt(t, "OpenContent", err, manifest.String())

	rep, err := db.Fsck(ctx, nil)
	require.NoError(t, err)
	bad := map[ID]bool{}
	for _, p := range rep.Problems {
		if p.Kind == "hash" {
			bad[p.Object] = true
		}
	}
	require.True(t, bad[root], "Fsck problems %v: the root tree", rep.Problems)
	require.True(t, bad[manifest], "Fsck problems %v: the manifest", rep.Problems)
	// GC refuses to delete anything over a corrupt reachable object.
	_, err = db.GC(ctx, GCOptions{})
	require.ErrorIs(t, err, ErrCorrupt, "GC over a corrupt tree")
}

func TestFsckFindsDanglingAndRangeProblems(t *testing.T) {
	ctx := t.Context()
	db := newDB(t)
	c := commitFiles(t, db, ZeroID, "c", map[string][]byte{"a": randBytes(1, 100)})
	_, err := db.CreateProject(ctx, "p", c)
	require.NoError(t, err)
	tr, _ := db.Tree(ctx, mustCommit(t, db, c).Root)
	chunk := tr.Entries[0].Object
	mustFsck(t, db)
	// Point the chunk past the end of its pack.
	require.NoError(t, db.withTx(ctx, txWrite, func(tx *tx) error {
		_, err := tx.Exec(ctx, `UPDATE chunks SET off = off + 1000000 WHERE id = ?`, chunk[:])
		return err
	}))
	rep, err := db.Fsck(ctx, nil)
	require.NoError(t, err)
	require.Len(t, rep.Problems, 1, "Fsck problems")
	require.Equal(t, "range", rep.Problems[0].Kind, "Fsck problem")
	require.Equal(t, chunk, rep.Problems[0].Object, "Fsck problem")
	_, err = db.Chunk(ctx, chunk)
	wantCorrupt(t, "Chunk out of range", err, chunk.String())
}

func TestFsckFindsMissingObjects(t *testing.T) {
	eachBackend(t, func(t *testing.T, newDB func(testing.TB) *DB) {
		ctx := t.Context()
		db := newDB(t)
		c := commitFiles(t, db, ZeroID, "c", map[string][]byte{"a": randBytes(1, 3*testChunkSize)})
		_, err := db.CreateProject(ctx, "p", c)
		require.NoError(t, err)
		root := mustCommit(t, db, c).Root
		tr, _ := db.Tree(ctx, root)
		m, _ := db.Manifest(ctx, tr.Entries[0].Object)
		gone := m.Extents[2].Chunk
		require.NoError(t, db.withTx(ctx, txWrite, func(tx *tx) error {
			if _, err := tx.Exec(ctx, `DELETE FROM chunks WHERE id = ?`, gone[:]); err != nil {
				return err
			}
			_, err := tx.Exec(ctx, `DELETE FROM objects WHERE id = ?`, root[:])
			return err
		}))
		rep, err := db.Fsck(ctx, nil)
		require.NoError(t, err)
		missing := map[ID]string{}
		for _, p := range rep.Problems {
			if p.Kind == "missing" {
				missing[p.Object] = p.Where
			}
		}
		require.Len(t, rep.Problems, 2, "Fsck problems")
		require.Contains(t, missing[root], c.String(), "the missing root's problem names its commit")
		require.Contains(t, missing[gone], "manifest", "the missing chunk's problem names its manifest")
		_, err = db.GC(ctx, GCOptions{})
		require.ErrorIs(t, err, ErrNotFound, "GC with a missing reachable tree")
	})
}
