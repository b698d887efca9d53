package store

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// A checkpoint record names its image's commit, whose first parent is the
// files' commit; it keeps both (and what they reach) from GC until it is
// deleted, and fsck checks what it names. Both backends.
func TestCheckpoints(t *testing.T) {
	eachBackend(t, func(t *testing.T, newDB func(testing.TB) *DB) {
		ctx := t.Context()
		db := newDB(t)
		base := commitFiles(t, db, ZeroID, "base", map[string][]byte{"a": []byte("a")})
		_, err := db.CreateProject(ctx, "p", base)
		require.NoError(t, err)
		// Files on no branch (a live workspace's), and the image on them.
		files := commitFiles(t, db, base, "files", map[string][]byte{"a": []byte("a"), "b": randBytes(3, 300<<10)})
		image := commitFiles(t, db, files, "image", map[string][]byte{"pages-1.img": randBytes(4, 2<<20), "core-1.img": []byte("core")})

		c := Checkpoint{ID: "ckpt-1", Project: "p", Workspace: "ws-1", Commit: image, Files: files, Message: "warm", Meta: []byte(`{"services":[]}`)}
		got, err := db.CreateCheckpoint(ctx, c)
		require.NoError(t, err)
		require.False(t, got.Created.IsZero())
		_, err = db.CreateCheckpoint(ctx, c)
		require.ErrorIs(t, err, ErrExists)
		for _, bad := range []Checkpoint{
			{ID: "Bad", Project: "p", Commit: image, Files: files},
			{ID: "x", Project: "nope", Commit: image, Files: files},
			{ID: "y", Project: "p", Commit: image, Files: base}, // not its parent
			{ID: "z", Project: "p", Commit: image},
			{ID: "w", Project: "p", Commit: Hash(KindCommit, nil), Files: files},
		} {
			_, err := db.CreateCheckpoint(ctx, bad)
			require.Error(t, err, "CreateCheckpoint(%+v)", bad)
		}
		_, err = db.CreateCheckpoint(ctx, Checkpoint{ID: "y", Project: "p", Commit: image, Files: base})
		require.ErrorIs(t, err, ErrInvalidCheckpoint)

		r, err := db.Checkpoint(ctx, "ckpt-1")
		require.NoError(t, err)
		require.Equal(t, image, r.Commit)
		require.Equal(t, files, r.Files)
		require.Equal(t, "ws-1", r.Workspace)
		require.Equal(t, "warm", r.Message)
		require.JSONEq(t, `{"services":[]}`, string(r.Meta))
		all, err := db.Checkpoints(ctx, "p")
		require.NoError(t, err)
		require.Len(t, all, 1)
		all, err = db.Checkpoints(ctx, "other")
		require.NoError(t, err)
		require.Empty(t, all)

		// Kept by the record alone.
		_, err = db.GC(ctx, GCOptions{Grace: -1})
		require.NoError(t, err)
		_, err = db.Commit(ctx, image)
		require.NoError(t, err, "the image outlives GC")
		_, err = db.Commit(ctx, files)
		require.NoError(t, err, "the files outlive GC")
		rep := mustFsck(t, db)
		require.Equal(t, 3, int(rep.Refs), "fsck counts the checkpoint among the refs (branch, layer, checkpoint)")

		require.NoError(t, db.DeleteCheckpoint(ctx, "ckpt-1"))
		require.ErrorIs(t, db.DeleteCheckpoint(ctx, "ckpt-1"), ErrNotFound)
		_, err = db.Checkpoint(ctx, "ckpt-1")
		require.ErrorIs(t, err, ErrNotFound)
		st, err := db.GC(ctx, GCOptions{Grace: -1})
		require.NoError(t, err)
		require.GreaterOrEqual(t, st.DeadObjects, int64(2), "the image's commit and tree go: %+v", st)
		_, err = db.Commit(ctx, image)
		require.ErrorIs(t, err, ErrNotFound)
		mustFsck(t, db)
	})
}
