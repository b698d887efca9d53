package store

import (
	"bytes"
	"fmt"
	"os"
	"testing"

	"github.com/stretchr/testify/require"

	"layerfs.dev/layerfs/internal/diskusage"
)

func TestGCReclaimsDeletedBranch(t *testing.T) {
	ctx := t.Context()
	db := newDB(t)
	keepFiles := map[string][]byte{"keep": randBytes(1, 3*testChunkSize+5), "small": []byte("small")}
	base := commitFiles(t, db, ZeroID, "base", keepFiles)
	_, err := db.CreateProject(ctx, "p", base)
	require.NoError(t, err)
	// A workspace's head and a second layer are roots too.
	wsFiles := map[string][]byte{"ws": randBytes(2, 200<<10)}
	wsHead := commitFiles(t, db, base, "ws", wsFiles)
	_, err = db.CreateWorkspace(ctx, Workspace{ID: "w", Project: "p", Base: base, Head: wsHead})
	require.NoError(t, err)
	// The doomed branch: five commits of 10 MiB unique data each, sharing
	// "keep" with main.
	_, err = db.CreateBranch(ctx, "p", "doomed", base)
	require.NoError(t, err)
	head := base
	var doomed []ID
	for i := 0; i < 5; i++ {
		files := map[string][]byte{"keep": keepFiles["keep"], fmt.Sprint("big", i): randBytes(uint64(100+i), 10<<20)}
		c := commitFiles(t, db, head, fmt.Sprint("d", i), files)
		r, err := db.SetBranchHead(ctx, "p", "doomed", head, c)
		require.NoError(t, err)
		require.Equal(t, PublishCreated, r)
		doomed = append(doomed, c)
		head = c
	}
	// Materialize one doomed file and one kept file.
	tr, _ := db.Tree(ctx, mustCommit(t, db, head).Root)
	big, _ := tr.Find("big4")
	deadCache, err := db.Materialize(ctx, big)
	require.NoError(t, err)
	keepE, _ := tr.Find("keep")
	liveCache, err := db.Materialize(ctx, keepE)
	require.NoError(t, err)

	// Nothing is collectable while the branch exists.
	st, err := db.GC(ctx, GCOptions{})
	require.NoError(t, err)
	require.Zero(t, st.DeadObjects, "GC with every branch alive: %+v", st)
	require.Zero(t, st.DeadChunks, "GC with every branch alive: %+v", st)
	require.LessOrEqual(t, st.Reclaimed, int64(1<<20), "GC with every branch alive: %+v", st)

	require.NoError(t, db.DeleteBranch(ctx, "p", "doomed"))
	packsBefore := packBytes(t, db)
	dry, err := db.GC(ctx, GCOptions{DryRun: true})
	require.NoError(t, err, "dry run")
	require.GreaterOrEqual(t, dry.DeadChunkBytes, int64(50<<20), "dry run: %+v", dry)
	require.Equal(t, packsBefore, packBytes(t, db), "pack bytes after a dry run")
	usageBefore, _ := diskusage.Tree(db.PacksDir())
	st, err = db.GC(ctx, GCOptions{})
	require.NoError(t, err)
	usageAfter, _ := diskusage.Tree(db.PacksDir())
	t.Logf("gc: %+v; packs on disk %d -> %d", st, usageBefore, usageAfter)
	require.GreaterOrEqual(t, usageBefore-usageAfter, int64(45<<20), "bytes the packs shrank by on disk")
	require.GreaterOrEqual(t, st.Reclaimed, int64(45<<20), "GC stats: %+v", st)
	require.Equal(t, int64(15), st.DeadObjects, "GC stats: %+v (a commit, tree and manifest each)", st)
	_, err = os.Stat(deadCache)
	require.ErrorIs(t, err, os.ErrNotExist, "dead cache file still there")
	_, err = os.Stat(liveCache)
	require.NoError(t, err, "live cache file removed")
	for _, c := range doomed {
		ok, err := db.HasCommit(ctx, c)
		require.NoError(t, err)
		require.False(t, ok, "doomed commit %s survived", c.Short())
	}
	for c, files := range map[ID]map[string][]byte{base: keepFiles, wsHead: wsFiles} {
		got := readAll(t, db, c)
		for n, d := range files {
			require.True(t, bytes.Equal(d, got[n]), "%s in %s reads back wrong after GC", n, c.Short())
		}
	}
	mustFsck(t, db)
	// The store keeps working: new data goes to a pack and reads back.
	c := commitFiles(t, db, base, "after", map[string][]byte{"new": randBytes(9, 1<<20)})
	readAll(t, db, c)
	mustFsck(t, db)
	// A second GC finds nothing more to do but the unreferenced commit.
	st, err = db.GC(ctx, GCOptions{})
	require.NoError(t, err, "second GC")
	require.Equal(t, int64(3), st.DeadObjects, "second GC: %+v", st)
	require.LessOrEqual(t, st.PacksRewritten, 1, "second GC: %+v", st)
	mustFsck(t, db)
}

func TestGCBusyWithUnflushedBatch(t *testing.T) {
	ctx := t.Context()
	db := newDB(t)
	b, _ := db.NewBatch(ctx)
	_, err := b.PutChunk(Hash(KindChunk, []byte("x")), []byte("x"))
	require.NoError(t, err)
	_, err = db.GC(ctx, GCOptions{})
	require.ErrorIs(t, err, ErrBusy, "GC during a batch")
	require.NoError(t, b.Flush(ctx))
	_, err = db.GC(ctx, GCOptions{})
	require.NoError(t, err, "GC after Flush")
}
