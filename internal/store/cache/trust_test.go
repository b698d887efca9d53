package cache

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"layerfs.dev/layerfs/internal/store/object"
)

// checkChunk is the Store's check of a content of one chunk.
func checkChunk(id object.ID, calls *int) func(f *os.File) error {
	return func(f *os.File) error {
		*calls++
		b, err := os.ReadFile(f.Name())
		if err != nil {
			return err
		}
		if object.Hash(object.KindChunk, b) != id {
			return fmt.Errorf("%w: %s", ErrDamaged, id)
		}
		return nil
	}
}

// TestTrust: a content this process placed is trusted with no read while
// unchanged, and linked into the layer; a changed one is read and, when
// damaged, removed and never linked; another process (a new Open)
// trusts nothing yet and reads what it trusts.
func TestTrust(t *testing.T) {
	root := t.TempDir()
	d, err := Open(t.Context(), root, -1, slog.New(slog.DiscardHandler))
	require.NoError(t, err)
	defer d.Close()
	a, b := object.Hash(object.KindChunk, []byte("alpha")), object.Hash(object.KindChunk, []byte("bravo"))
	require.True(t, place(t, d, a, "alpha"))
	require.True(t, place(t, d, b, "bravo"))
	layer := func(id object.ID) string { return filepath.Join(d.Layer(), id.String()[:2], id.String()) }

	calls := 0
	require.NoError(t, d.Trust(a, checkChunk(a, &calls)))
	require.Equal(t, 0, calls, "a content placed by this process and unchanged was read again")
	require.True(t, d.Trusted(a))
	got, err := os.ReadFile(layer(a))
	require.NoError(t, err)
	require.Equal(t, "alpha", string(got))

	// A byte of b flipped after it was placed: its change time moves.
	require.NoError(t, os.Chmod(d.Path(b), 0o644))
	require.NoError(t, os.WriteFile(d.Path(b), []byte("brave"), 0o644))
	err = d.Trust(b, checkChunk(b, &calls))
	require.ErrorIs(t, err, ErrDamaged)
	require.Equal(t, 1, calls)
	require.False(t, d.Trusted(b))
	require.NoFileExists(t, d.Path(b), "a damaged file stays in the cache")
	require.NoFileExists(t, layer(b))
	require.ErrorIs(t, d.Trust(b, checkChunk(b, &calls)), os.ErrNotExist)
	require.EqualValues(t, 1, d.TrustedCount())

	// Another process's cache trusts nothing, and reads what it trusts.
	d2, err := Open(t.Context(), root, -1, slog.New(slog.DiscardHandler))
	require.NoError(t, err)
	require.NotEqual(t, d.Layer(), d2.Layer())
	require.False(t, d2.Trusted(a))
	calls = 0
	require.NoError(t, d2.Trust(a, checkChunk(a, &calls)))
	require.Equal(t, 1, calls)
	layer2 := d2.Layer()
	d2.Close()
	require.NoDirExists(t, layer2, "a closed cache's layer stays")

	// Remove drops the content and its link.
	require.NoError(t, d.Remove(a))
	require.NoFileExists(t, d.Path(a))
	require.NoFileExists(t, layer(a))
	require.False(t, d.Trusted(a))
}

// TestDeadLayers: Open removes the layers whose lock no process holds
// (a process that died), and keeps the live ones.
func TestDeadLayers(t *testing.T) {
	root := t.TempDir()
	live, err := Open(t.Context(), root, -1, slog.New(slog.DiscardHandler))
	require.NoError(t, err)
	defer live.Close()
	dead := filepath.Join(root, TrustedDir, "1.1")
	require.NoError(t, os.MkdirAll(filepath.Join(dead, "ab"), 0o700))
	require.NoError(t, os.WriteFile(dead+".lock", nil, 0o600))
	orphan := filepath.Join(root, TrustedDir, "2.2") // its lock gone
	require.NoError(t, os.MkdirAll(orphan, 0o700))

	d, err := Open(t.Context(), root, -1, slog.New(slog.DiscardHandler))
	require.NoError(t, err)
	defer d.Close()
	require.NoDirExists(t, dead)
	require.NoFileExists(t, dead+".lock")
	require.NoDirExists(t, orphan)
	require.DirExists(t, live.Layer())
}

// TestTrustedSweepAndEvict: Sweep and eviction remove a content's link
// with it, and Sweep removes links whose content another process removed.
func TestTrustedSweepAndEvict(t *testing.T) {
	d, err := Open(t.Context(), t.TempDir(), -1, slog.New(slog.DiscardHandler))
	require.NoError(t, err)
	defer d.Close()
	ids := map[string]object.ID{}
	for _, s := range []string{"one", "two", "three"} {
		ids[s] = object.Hash(object.KindChunk, []byte(s))
		require.True(t, place(t, d, ids[s], s))
		require.NoError(t, d.Trust(ids[s], func(*os.File) error { return errors.New("not read") }))
	}
	link := func(id object.ID) string { return filepath.Join(d.Layer(), id.String()[:2], id.String()) }
	require.NoError(t, os.Remove(d.Path(ids["three"]))) // another process's eviction
	n, err := d.Sweep(func(id object.ID) bool { return id != ids["two"] })
	require.NoError(t, err)
	require.Equal(t, 1, n)
	require.FileExists(t, link(ids["one"]))
	require.NoFileExists(t, link(ids["two"]))
	require.NoFileExists(t, link(ids["three"]))
	require.EqualValues(t, 1, d.TrustedCount())
	var st unix.Stat_t
	require.NoError(t, unix.Stat(d.Path(ids["one"]), &st))
	require.EqualValues(t, 2, st.Nlink)
}

// TestWant: a content a readying waits for is trusted as soon as this
// process places it; others only when asked.
func TestWant(t *testing.T) {
	d, err := Open(t.Context(), t.TempDir(), -1, slog.New(slog.DiscardHandler))
	require.NoError(t, err)
	defer d.Close()
	a, b, c := object.Hash(object.KindChunk, []byte("a")), object.Hash(object.KindChunk, []byte("b")), object.Hash(object.KindChunk, []byte("c"))
	release := d.Want([]object.ID{a})
	require.True(t, place(t, d, a, "a"))
	require.True(t, place(t, d, b, "b"))
	require.True(t, d.Trusted(a), "a content waited for was not trusted once placed")
	require.FileExists(t, filepath.Join(d.Layer(), a.String()[:2], a.String()))
	require.False(t, d.Trusted(b), "a content nobody waits for was trusted unasked")
	release()
	require.True(t, place(t, d, c, "c"))
	require.False(t, d.Trusted(c))
}
