package kerneloverlay

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"layerfs.dev/layerfs/internal/overlay"
	"layerfs.dev/layerfs/internal/overlay/overlaytest"
	"layerfs.dev/layerfs/internal/store"
)

// countingLower counts the trees read through it.
type countingLower struct {
	overlay.Lower
	trees int
}

func (c *countingLower) Tree(ctx context.Context, id store.ID) (*store.Tree, error) {
	c.trees++
	return c.Lower.Tree(ctx, id)
}

// TestContentView: the content view files each content of a commit once,
// under its prefix, with its kind and size; from the contents list that
// MetaImage writes beside the image without reading a tree, and from a
// walk of the commit, the same, when the list is damaged or gone.
func TestContentView(t *testing.T) {
	ctx := t.Context()
	s := overlaytest.NewStore(t, ctx, func(t testing.TB, dir string) {
		require.NoError(t, os.MkdirAll(filepath.Join(dir, "a/b"), 0o755))
		require.NoError(t, os.MkdirAll(filepath.Join(dir, "same"), 0o755))
		for name, data := range map[string]string{
			"small": "small\n", "a/big": strings.Repeat("0123456789", 100_000), "a/b/twin": "twin\n",
			"same/twin": "twin\n", "empty": "",
		} {
			require.NoError(t, os.WriteFile(filepath.Join(dir, name), []byte(data), 0o644))
		}
	})
	cache := t.TempDir()
	_, err := MetaImage(ctx, s.DB, cache, s.Root)
	require.NoError(t, err)

	walked := newContentLower(s.DB, s.Root, "")
	want := allDirs(t, walked)
	var n int
	for _, tr := range want {
		n += len(tr.Entries)
	}
	assert.Equal(t, 3, n, "small, big and one twin; no empty file")
	for _, name := range []string{"small", "a/big", "a/b/twin"} {
		e := entryAt(t, s, name)
		id := e.Object.String()
		dir, err := walked.Tree(ctx, walked.contentID(id[:2]))
		require.NoError(t, err)
		got, ok := dir.Find(id)
		require.True(t, ok, "%s under %s", name, contentPath(e.Object))
		assert.Equal(t, e.Size, got.Size)
		assert.Equal(t, e.ObjectKind, got.ObjectKind)
	}

	counting := &countingLower{Lower: s.DB}
	assert.Equal(t, want, allDirs(t, newContentLower(counting, s.Root, contentsPath(cache, s.Root))), "from the contents list")
	assert.Zero(t, counting.trees, "trees read with a contents list")

	require.NoError(t, os.WriteFile(contentsPath(cache, s.Root), make([]byte, 2*contentsRecordSize), 0o600))
	assert.Equal(t, want, allDirs(t, newContentLower(counting, s.Root, contentsPath(cache, s.Root))), "from a walk, the list out of order")
	assert.NotZero(t, counting.trees)

	require.NoError(t, os.Remove(contentsPath(cache, s.Root)))
	counting.trees = 0
	assert.Equal(t, want, allDirs(t, newContentLower(counting, s.Root, contentsPath(cache, s.Root))), "from a walk, the list gone")
	assert.NotZero(t, counting.trees)
}

// allDirs returns the view's 256 prefix directories, by name.
func allDirs(t *testing.T, c *contentLower) map[string]*store.Tree {
	t.Helper()
	root, err := c.Tree(t.Context(), c.Root())
	require.NoError(t, err)
	require.Len(t, root.Entries, 256)
	dirs := map[string]*store.Tree{}
	for _, e := range root.Entries {
		tr, err := c.Tree(t.Context(), e.Object)
		require.NoError(t, err)
		dirs[e.Name] = tr
	}
	return dirs
}

// entryAt returns the committed entry at the slash-separated path p.
func entryAt(t *testing.T, s *overlaytest.Store, p string) store.Entry {
	t.Helper()
	id := s.Root
	names := strings.Split(p, "/")
	for i, name := range names {
		tr, err := s.DB.Tree(t.Context(), id)
		require.NoError(t, err)
		e, ok := tr.Find(name)
		require.True(t, ok, p)
		if i == len(names)-1 {
			return *e
		}
		id = e.Object
	}
	panic("unreachable")
}
