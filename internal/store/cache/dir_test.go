package cache

import (
	"log/slog"
	"os"
	"testing"

	"github.com/stretchr/testify/require"

	"layerfs.dev/layerfs/internal/store/object"
)

// place writes data as the content id and reports whether it was placed.
func place(t *testing.T, d *Dir, id object.ID, data string) bool {
	t.Helper()
	f, err := d.Create(d.Path(id))
	require.NoError(t, err)
	defer f.Abort()
	_, err = f.File().WriteString(data)
	require.NoError(t, err)
	placed, err := f.Place(int64(len(data)))
	require.NoError(t, err)
	return placed
}

// TestPlaceAndSweep: a content in place is kept against a second writer;
// Sweep removes what keep refuses and counts it; Count and Placed follow.
func TestPlaceAndSweep(t *testing.T) {
	d, err := Open(t.Context(), t.TempDir(), -1, slog.New(slog.DiscardHandler))
	require.NoError(t, err)
	defer d.Close()
	a, b := object.Hash(object.KindChunk, []byte("a")), object.Hash(object.KindChunk, []byte("b"))
	require.True(t, place(t, d, a, "a"))
	require.False(t, place(t, d, a, "other"), "a second placement replaced the first")
	require.True(t, place(t, d, b, "b"))
	got, err := os.ReadFile(d.Path(a))
	require.NoError(t, err)
	require.Equal(t, "a", string(got))
	require.EqualValues(t, 2, d.Placed())
	n, err := d.Count()
	require.NoError(t, err)
	require.EqualValues(t, 2, n)
	require.NoError(t, d.Sync())

	removed, err := d.Sweep(func(id object.ID) bool { return id == a })
	require.NoError(t, err)
	require.Equal(t, 1, removed)
	require.FileExists(t, d.Path(a))
	require.NoFileExists(t, d.Path(b))
}
