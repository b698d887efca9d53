package checkpoint_test

import (
	"bytes"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"layerfs.dev/layerfs/internal/checkpoint"
	"layerfs.dev/layerfs/internal/commit"
	"layerfs.dev/layerfs/internal/store"
)

// pages is n bytes of seeded random memory.
func pages(seed uint64, n int) []byte {
	b := make([]byte, n)
	r := rand.NewChaCha8([32]byte{byte(seed)})
	_, _ = r.Read(b)
	return b
}

// Two checkpoints of one program, whose memory changed in one place,
// share everything else's chunks; each loads back byte for byte, and the
// records keep them through GC until they are deleted.
func TestSaveLoad(t *testing.T) {
	ctx := t.Context()
	db, err := store.Init(ctx, t.TempDir(), store.Options{})
	require.NoError(t, err)
	defer db.Close()
	files := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(files, "app.py"), []byte("print(1)\n"), 0o644))
	p, _, _, err := commit.CreateProject(ctx, db, "p", files, commit.Meta{Message: "init"}, nil)
	require.NoError(t, err)
	head, err := db.Branch(ctx, p.Name, "main")
	require.NoError(t, err)

	mem := pages(1, 8<<20)
	img1 := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(img1, "pages-1.img"), mem, 0o600))
	require.NoError(t, os.WriteFile(filepath.Join(img1, "core-1.img"), []byte("core one"), 0o600))
	rec1, st1, err := checkpoint.Save(ctx, db, img1, store.Checkpoint{ID: checkpoint.NewID(), Project: "p", Workspace: "ws", Files: head.Head, Message: "first"})
	require.NoError(t, err)
	require.Greater(t, st1.NewBytes, int64(8<<20)-(64<<10))

	mem2 := bytes.Clone(mem)
	copy(mem2[4<<20:], pages(2, 4096)) // one page written
	img2 := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(img2, "pages-1.img"), mem2, 0o600))
	require.NoError(t, os.WriteFile(filepath.Join(img2, "core-1.img"), []byte("core two"), 0o600))
	rec2, st2, err := checkpoint.Save(ctx, db, img2, store.Checkpoint{ID: checkpoint.NewID(), Project: "p", Workspace: "ws", Files: head.Head})
	require.NoError(t, err)
	require.Less(t, st2.NewBytes, int64(256<<10), "the second checkpoint stores the changed chunks only: %+v", st2.Stats)
	t.Logf("first: %d new bytes; second: %d new bytes of %d", st1.NewBytes, st2.NewBytes, st2.Bytes)

	c, err := db.Commit(ctx, rec1.Commit)
	require.NoError(t, err)
	require.Equal(t, head.Head, c.Parent())
	require.Contains(t, c.Message, "first")

	_, err = db.GC(ctx, store.GCOptions{})
	require.NoError(t, err)
	for _, tc := range []struct {
		rec  store.Checkpoint
		mem  []byte
		core string
	}{{rec1, mem, "core one"}, {rec2, mem2, "core two"}} {
		out := filepath.Join(t.TempDir(), "images")
		_, err := checkpoint.Load(ctx, db, tc.rec, out)
		require.NoError(t, err)
		got, err := os.ReadFile(filepath.Join(out, "pages-1.img"))
		require.NoError(t, err)
		require.True(t, bytes.Equal(tc.mem, got), "pages of %s", tc.rec.ID)
		core, err := os.ReadFile(filepath.Join(out, "core-1.img"))
		require.NoError(t, err)
		require.Equal(t, tc.core, string(core))
	}
	rep, err := db.Fsck(ctx, nil)
	require.NoError(t, err)
	require.True(t, rep.OK(), "%+v", rep)

	require.NoError(t, db.DeleteCheckpoint(ctx, rec1.ID))
	require.NoError(t, db.DeleteCheckpoint(ctx, rec2.ID))
	_, err = db.GC(ctx, store.GCOptions{})
	require.NoError(t, err)
	_, err = db.Commit(ctx, rec1.Commit)
	require.ErrorIs(t, err, store.ErrNotFound)
}
