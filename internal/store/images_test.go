package store

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// TestImages: an image names a commit, which GC keeps while the image (or
// a workspace standing on it) does; derivations are a memo that GC drops
// with their commit; a project's default image must exist.
func TestImages(t *testing.T) {
	eachBackend(t, func(t *testing.T, newDB func(testing.TB) *DB) {
		ctx := t.Context()
		db := newDB(t)
		base := commitFiles(t, db, ZeroID, "layer 1", map[string][]byte{"a": randBytes(1, 100<<10)})
		top := commitFiles(t, db, base, "layer 2", map[string][]byte{"b": randBytes(2, 100<<10)})

		_, err := db.PutImage(ctx, Image{Name: "Bad Name", Commit: top}, nil)
		require.ErrorIs(t, err, ErrInvalidName)
		_, err = db.PutImage(ctx, Image{Name: "team/env:1", Commit: Hash(KindCommit, []byte("none"))}, nil)
		require.ErrorIs(t, err, ErrNotFound, "an image of a commit the store lacks")

		img, err := db.PutImage(ctx, Image{Name: "team/env:1", Digest: "sha256:aa", Commit: top, Record: []byte(`{}`)},
			map[string]ID{"layer:1": base, "layer:2": top})
		require.NoError(t, err)
		got, err := db.Image(ctx, "team/env:1")
		require.NoError(t, err)
		require.Equal(t, img.Commit, got.Commit)
		require.Equal(t, "sha256:aa", got.Digest)
		byDigest, err := db.ImagesByDigest(ctx, "sha256:aa")
		require.NoError(t, err)
		require.Len(t, byDigest, 1)
		id, ok, err := db.Derivation(ctx, "layer:2")
		require.NoError(t, err)
		require.True(t, ok)
		require.Equal(t, top, id)

		require.ErrorIs(t, db.SetProjectImage(ctx, "nope", "team/env:1"), ErrNotFound, "no such project")
	})
}

// TestImagesGC: what an image reaches survives GC until the image is
// removed; a workspace's root image keeps its commit after that.
func TestImagesGC(t *testing.T) {
	ctx := t.Context()
	db := newDB(t)
	base := commitFiles(t, db, ZeroID, "layer 1", map[string][]byte{"a": randBytes(1, 300<<10)})
	top := commitFiles(t, db, base, "layer 2", map[string][]byte{"b": randBytes(2, 300<<10)})
	_, err := db.PutImage(ctx, Image{Name: "env", Digest: "sha256:bb", Commit: top, Record: []byte(`{}`)}, map[string]ID{"k": top})
	require.NoError(t, err)
	other := commitFiles(t, db, ZeroID, "other", map[string][]byte{"c": randBytes(3, 300<<10)})
	_, err = db.CreateProject(ctx, "p", other)
	require.NoError(t, err)
	require.ErrorIs(t, db.SetProjectImage(ctx, "p", "missing"), ErrNotFound)
	require.NoError(t, db.SetProjectImage(ctx, "p", "env"))
	p, err := db.Project(ctx, "p")
	require.NoError(t, err)
	require.Equal(t, "env", p.Image)

	st, err := db.GC(ctx, GCOptions{})
	require.NoError(t, err)
	require.Zero(t, st.DeadObjects, "nothing is dead while the image names it: %+v", st)

	_, err = db.CreateWorkspace(ctx, Workspace{ID: "w", Project: "p", Base: other, Head: other, Image: base})
	require.NoError(t, err)
	w, err := db.Workspace(ctx, "w")
	require.NoError(t, err)
	require.Equal(t, base, w.Image)

	require.NoError(t, db.DeleteImage(ctx, "env"))
	require.ErrorIs(t, db.DeleteImage(ctx, "env"), ErrNotFound)
	p, err = db.Project(ctx, "p")
	require.NoError(t, err)
	require.Empty(t, p.Image, "the default image went with the image")

	st, err = db.GC(ctx, GCOptions{})
	require.NoError(t, err)
	require.NotZero(t, st.DeadObjects, "layer 2 is dead: %+v", st)
	_, err = db.Commit(ctx, base)
	require.NoError(t, err, "the workspace's root image survives")
	_, err = db.Commit(ctx, top)
	require.ErrorIs(t, err, ErrNotFound, "the removed image's top layer is collected")
	_, ok, err := db.Derivation(ctx, "k")
	require.NoError(t, err)
	require.False(t, ok, "a derivation of a collected commit is forgotten")

	require.NoError(t, db.DeleteWorkspace(ctx, "w"))
	_, err = db.GC(ctx, GCOptions{})
	require.NoError(t, err)
	_, err = db.Commit(ctx, base)
	require.ErrorIs(t, err, ErrNotFound)
	rep, err := db.Fsck(ctx, nil)
	require.NoError(t, err)
	require.True(t, rep.OK(), "fsck: %+v", rep)
}
