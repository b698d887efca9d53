package fusefs_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"layerfs.dev/layerfs/internal/kerneloverlay"
	"layerfs.dev/layerfs/internal/overlay"
	"layerfs.dev/layerfs/internal/overlay/overlaytest"
	"layerfs.dev/layerfs/internal/store"
)

// TestMetaLayer: on the overlay path the commit's metadata comes from an
// EROFS image, so creating names in committed directories (each a negative
// lookup in the lower), listing and stat-ing committed names send the FUSE
// view nothing; only opening a committed file's data reaches it, and only
// until the content is in the Store's cache.
func TestMetaLayer(t *testing.T) {
	e := newEnvOn(t, true, "overlay")
	// The capture filled the Store's cache: empty it, as a host that never
	// saw the commit or an evicted cache has it.
	require.NoError(t, e.DB.WaitFill(e.ctx))
	contents, err := filepath.Glob(filepath.Join(e.DB.CacheDir(), "[0-9a-f][0-9a-f]", "*"))
	require.NoError(t, err)
	require.NotEmpty(t, contents, "the capture filled no cache")
	for _, p := range contents {
		require.NoError(t, os.Remove(p))
	}
	m, mnt := e.mount(e.Root)
	assert.Contains(t, m.DataPath(), "metadata erofs")
	before := m.Stats()
	sh(t, mnt, `
for i in $(seq 100); do echo $i > new$i; echo $i > a/g$i; echo $i > d/e/g$i; done
ls -la . a a/b d d/e >/dev/null
stat f1 a/f2 a/b/f3 a/link h1 >/dev/null
readlink a/link >/dev/null
find . -type f | wc -l >/dev/null
test ! -e a/absent
`)
	assert.Empty(t, m.Stats().Sub(before).ByOp(), "requests to the view for creates, listings, stats")
	got, err := os.ReadFile(filepath.Join(mnt, "a/f2"))
	require.NoError(t, err)
	assert.Equal(t, strings.Repeat("abc", 40000), string(got))
	assert.NotZero(t, m.Stats().Sub(before).Requests(), "a committed file's data comes from the view")

	// Once materialized, a content is read, copied and copied up from the
	// Store's cache, the first data-only layer: another workspace of the
	// commit sends the view nothing for it.
	m2, mnt2 := e.mount(e.Root)
	before = m2.Stats()
	sh(t, mnt2, `
set -e
cmp a/f2 a/b/../f2
cp a/f2 copy
echo more >> a/f2
`)
	assert.Empty(t, m2.Stats().Sub(before).ByOp(), "requests to the view for a content in the cache")
	got, err = os.ReadFile(filepath.Join(mnt2, "copy"))
	require.NoError(t, err)
	assert.Equal(t, strings.Repeat("abc", 40000), string(got))
	got, err = os.ReadFile(filepath.Join(mnt2, "a/f2"))
	require.NoError(t, err)
	assert.Equal(t, strings.Repeat("abc", 40000)+"more\n", string(got))
}

// TestMetaLayerBehaviours runs the behaviours, the lockstep random
// operations and the commit of deep paths over the view as the whole
// lower, the overlay a workspace falls back to without a metadata image.
func TestMetaLayerBehaviours(t *testing.T) {
	t.Run("behaviours", func(t *testing.T) { testBehaviours(t, "overlay-nometa") })
	t.Run("more", func(t *testing.T) { testMoreBehaviours(t, "overlay-nometa") })
	t.Run("deep", func(t *testing.T) { testDeepPathCommit(t, "overlay-nometa") })
}

// TestMetaLayerUpgrade: a workspace whose upper was written over the view
// alone (before the metadata image, or after a fallback) and is mounted
// again with the image shows and commits the same tree: the upper's
// redirects name commit paths either way.
func TestMetaLayerUpgrade(t *testing.T) {
	for _, from := range []string{"overlay-nometa", "overlay"} {
		to := map[string]string{"overlay-nometa": "overlay", "overlay": "overlay-nometa"}[from]
		t.Run(from+"->"+to, func(t *testing.T) {
			e := newEnvOn(t, true, from)
			ws := filepath.Join(e.DB.WorkspacesDir(), "w")
			mnt := filepath.Join(t.TempDir(), "mnt")
			require.NoError(t, os.Mkdir(mnt, 0o755))
			m, err := e.serve(ws, mnt, e.Root, store.ZeroID, overlay.EmptyUpper())
			require.NoError(t, err)
			body := `
set -e
echo more >> f1
chmod 600 a/b/f3
mv a/f2 moved
mv d dd
rm h1
mkdir -p n && echo new > n/x
`
			sh(t, mnt, body)
			ref := filepath.Join(t.TempDir(), "ref")
			sh(t, "/", "cp -a "+e.Base+" "+ref)
			sh(t, ref, body)
			require.NoError(t, m.Unmount(context.Background()))

			e.path = to
			m2, err := e.serve(ws, mnt, e.Root, store.ZeroID, nil)
			require.NoError(t, err)
			t.Cleanup(func() { m2.Unmount(context.Background()) })
			assert.Equal(t, to == "overlay", m2.(*kerneloverlay.Mount).HasMeta(), m2.DataPath())
			overlaytest.RequireSame(t, ref, mnt, "remounted")
			overlaytest.RequireSame(t, ref, e.Checkout(e.Commit(m2)), "checkout of the commit")
		})
	}
}

// TestMetaImage: the image of a commit is built once and then found in
// the cache; an image directory of another boot is emptied first.
func TestMetaImage(t *testing.T) {
	e := newEnvOn(t, true, "overlay")
	cache := t.TempDir()
	p, err := kerneloverlay.MetaImage(e.ctx, e.DB, cache, e.Root)
	require.NoError(t, err)
	first, err := os.Stat(p)
	require.NoError(t, err)
	p2, err := kerneloverlay.MetaImage(e.ctx, e.DB, cache, e.Root)
	require.NoError(t, err)
	again, err := os.Stat(p2)
	require.NoError(t, err)
	assert.True(t, os.SameFile(first, again), "the second call finds the first image")

	dir := filepath.Dir(p)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "boot_id"), []byte("another boot\n"), 0o600))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "marker"), nil, 0o600))
	p3, err := kerneloverlay.MetaImage(e.ctx, e.DB, cache, e.Root)
	require.NoError(t, err)
	_, err = os.Stat(filepath.Join(dir, "marker"))
	assert.ErrorIs(t, err, os.ErrNotExist, "the images of another boot are removed")
	_, err = os.Stat(p3)
	require.NoError(t, err, "and the image written again")
	boot, err := os.ReadFile("/proc/sys/kernel/random/boot_id")
	require.NoError(t, err)
	had, err := os.ReadFile(filepath.Join(dir, "boot_id"))
	require.NoError(t, err)
	assert.Equal(t, string(boot), string(had))
}
