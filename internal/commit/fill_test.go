package commit

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"layerfs.dev/layerfs/internal/loopfs"
	"layerfs.dev/layerfs/internal/store"
	"layerfs.dev/layerfs/internal/testenv"
)

// cached checks that every file with data in the tree id has its content
// in the Store's cache, as the file under dir holds it, and returns how
// many contents it checked.
func cached(t *testing.T, db *store.DB, id store.ID, dir string) int {
	t.Helper()
	n := 0
	tr, err := db.Tree(t.Context(), id)
	require.NoError(t, err)
	for _, e := range tr.Entries {
		p := filepath.Join(dir, e.Name)
		switch {
		case e.Type == store.TypeDir:
			n += cached(t, db, e.Object, p)
		case e.Type == store.TypeFile && e.Size > 0:
			want, err := os.ReadFile(p)
			require.NoError(t, err)
			got, err := os.ReadFile(db.CachePath(e.Object))
			require.NoError(t, err, "%s is not in the cache", p)
			require.True(t, bytes.Equal(want, got), "%s: the cache holds other bytes", p)
			n++
		}
	}
	return n
}

// TestCaptureFillsCache: a capture puts every content it stores in the
// Store's cache, small and chunked ones alike, holes left holes; a build
// on it puts its new contents there. On XFS the contents are clones of
// the captured files.
func TestCaptureFillsCache(t *testing.T) {
	t.Run("tmp", func(t *testing.T) { testCaptureFillsCache(t, t.TempDir(), 0) })
	t.Run("xfs", func(t *testing.T) {
		testenv.RequireRoot(t)
		img, mnt := filepath.Join(t.TempDir(), "xfs.img"), t.TempDir()
		require.NoError(t, loopfs.Make(t.Context(), img, "xfs", 320<<20))
		require.NoError(t, loopfs.Mount(t.Context(), img, mnt, "xfs"))
		t.Cleanup(func() { require.NoError(t, loopfs.Unmount(mnt)) })
		testCaptureFillsCache(t, mnt, 4)
	})
}

func testCaptureFillsCache(t *testing.T, fsDir string, clones int64) {
	db, err := store.Init(t.Context(), filepath.Join(fsDir, "store"), store.Options{})
	require.NoError(t, err)
	defer db.Close()
	dir := filepath.Join(fsDir, "src")
	require.NoError(t, os.MkdirAll(filepath.Join(dir, "sub"), 0o755))
	files := map[string][]byte{
		"small":     []byte("hello"),
		"sub/same":  []byte("hello"),
		"sub/other": bytes.Repeat([]byte("abc"), 5000),
		"empty":     nil,
	}
	for name, data := range files {
		require.NoError(t, os.WriteFile(filepath.Join(dir, name), data, 0o644))
	}
	// A large file: data, 16 MiB of zeros (a hole in the manifest), data.
	big := make([]byte, 20<<20)
	copy(big, bytes.Repeat([]byte("0123456789"), 200_000))
	copy(big[18<<20:], bytes.Repeat([]byte("xyz"), 100_000))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "big"), big, 0o644))

	b, err := db.NewBatch(t.Context())
	require.NoError(t, err)
	defer b.Abort()
	root, _, err := CaptureDir(t.Context(), b, db, dir, nil)
	require.NoError(t, err)
	require.NoError(t, b.Flush(t.Context()))
	b.CacheFill().Wait()
	require.Equal(t, 4, cached(t, db, root, dir))
	require.Equal(t, store.FillStats{Placed: 3, Bytes: int64(5 + 15000 + len(big)), Cloned: min(clones, 3), Skipped: 1}, b.CacheFill().Stats())
	tr, err := db.Tree(t.Context(), root)
	require.NoError(t, err)
	var st unix.Stat_t
	for _, e := range tr.Entries {
		// (A clone shares the file's blocks, zeros and all.)
		if e.Name == "big" && clones == 0 {
			require.NoError(t, unix.Stat(db.CachePath(e.Object), &st))
			require.Less(t, st.Blocks*512, int64(8<<20), "the zeros of the large file were written to the cache")
		}
	}

	require.NoError(t, os.WriteFile(filepath.Join(dir, "sub", "new"), []byte("new content"), 0o644))
	next, _ := buildT(t, db, root, []Change{{Path: "sub/new", Source: filepath.Join(dir, "sub", "new")}})
	require.NoError(t, db.WaitFill(t.Context()))
	require.Equal(t, 5, cached(t, db, next, dir))
}
