package commit

import (
	"bytes"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"layerfs.dev/layerfs/internal/store"
)

// TestContentWriterMatchesCapture: a content stored from a stream is the
// object a capture of a file of the same bytes makes, holes included, and
// a stream that ends early fails.
func TestContentWriterMatchesCapture(t *testing.T) {
	ctx := t.Context()
	db := newDB(t)
	rng := rand.New(rand.NewPCG(7, 9))
	random := func(n int) []byte {
		b := make([]byte, n)
		for i := range b {
			b[i] = byte(rng.Uint32())
		}
		return b
	}
	files := map[string][]byte{
		"empty": {},
		"small": []byte("hello"),
		"max":   random(DefaultParams.Max),
		"big":   append(append(random(3<<20), make([]byte, 1<<20)...), random(100<<10)...),
	}
	dir := t.TempDir()
	for name, data := range files {
		require.NoError(t, os.WriteFile(filepath.Join(dir, name), data, 0o644))
	}
	root, _ := capture(t, db, dir)
	tree, err := db.Tree(ctx, root)
	require.NoError(t, err)

	b, err := db.NewBatch(ctx)
	require.NoError(t, err)
	defer b.Abort()
	cw, err := NewContentWriter(b, nil)
	require.NoError(t, err)
	for name, data := range files {
		id, kind, err := cw.Store(ctx, bytes.NewReader(data), int64(len(data)))
		require.NoError(t, err, name)
		e, ok := tree.Find(name)
		require.True(t, ok)
		require.Equal(t, e.Object, id, "%s: the object a capture made", name)
		require.Equal(t, e.ObjectKind, kind, name)
	}
	_, _, err = cw.Store(ctx, bytes.NewReader(files["big"][:1000]), int64(len(files["big"])))
	require.ErrorIs(t, err, io.ErrUnexpectedEOF)
	require.NoError(t, b.Flush(ctx))
	require.NotZero(t, LinkValue(store.ZeroID, "a"))
}
