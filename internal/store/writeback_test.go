package store

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"layerfs.dev/layerfs/internal/store/cache"
)

// markers lists the write-back markers of the Store in dir.
func markers(t *testing.T, dir string) []string {
	t.Helper()
	ents, err := os.ReadDir(filepath.Join(dir, cacheDir, cache.UnsyncedDir))
	if os.IsNotExist(err) {
		return nil
	}
	require.NoError(t, err)
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
	}
	return names
}

// TestCacheWriteback checks the window of unsynced cache files: a marker
// is made before the first cache file and removed once synced; a later
// open syncs what a dead process of this boot left, and removes what a
// window of another boot covered, keeping what was synced before it.
func TestCacheWriteback(t *testing.T) {
	ctx := t.Context()
	dir := t.TempDir()
	db, err := Init(ctx, dir, Options{})
	require.NoError(t, err)
	b, err := db.NewBatch(ctx)
	require.NoError(t, err)
	var es []Entry
	for i := range 4 {
		es = append(es, putContent(t, b, "f", randBytes(uint64(i), 1000+i)))
	}
	require.NoError(t, b.Flush(ctx))
	b.Abort()
	materialize := func(db *DB, e Entry) string {
		p, err := db.Materialize(ctx, &e)
		require.NoError(t, err)
		return p
	}

	require.Empty(t, markers(t, dir), "a new Store")
	synced := materialize(db, es[0])
	require.Len(t, markers(t, dir), 1, "a window is open once a cache file is written")
	require.NoError(t, db.SyncCache())
	require.Empty(t, markers(t, dir), "synced")

	// A second open of the Store leaves a live window alone.
	p1 := materialize(db, es[1])
	other, err := Open(ctx, dir, Options{})
	require.NoError(t, err)
	require.NoError(t, other.Close())
	require.Len(t, markers(t, dir), 1, "another open removed a live process's marker")

	// Closed without a sync, as by a dead process of this boot: the next
	// open syncs and keeps its files.
	require.NoError(t, db.Close())
	db, err = Open(ctx, dir, Options{})
	require.NoError(t, err)
	require.Empty(t, markers(t, dir), "a dead process's window of this boot")
	require.FileExists(t, p1)

	// The same, but the window was of another boot: its files go, the
	// files synced before it stay.
	time.Sleep(cache.WindowMargin + 50*time.Millisecond)
	p2 := materialize(db, es[2])
	p3 := materialize(db, es[3])
	require.NoError(t, db.Close())
	m := markers(t, dir)
	require.Len(t, m, 1)
	_, rest, _ := strings.Cut(m[0], ".")
	udir := filepath.Join(dir, cacheDir, cache.UnsyncedDir)
	require.NoError(t, os.Rename(filepath.Join(udir, m[0]), filepath.Join(udir, "another-boot."+rest)))
	db, err = Open(ctx, dir, Options{})
	require.NoError(t, err)
	defer db.Close()
	require.Empty(t, markers(t, dir), "a window of another boot")
	for _, p := range []string{synced, p1} {
		require.FileExists(t, p, "a cache file synced before the window")
	}
	for _, p := range []string{p2, p3} {
		require.NoFileExists(t, p, "a cache file of the window")
	}
	// And it is materialized again on demand.
	require.Equal(t, p2, materialize(db, es[2]))
	got, err := os.ReadFile(p2)
	require.NoError(t, err)
	require.Equal(t, randBytes(2, 1002), got)
}
