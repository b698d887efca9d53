package kerneloverlay

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"layerfs.dev/layerfs/internal/overlay/overlaytest"
)

// BenchmarkMetaImage builds the metadata image of a 15,000-file tree (150
// directories of 100 files), the cost of a workspace's first open of a
// commit (later opens find it cached).
func BenchmarkMetaImage(b *testing.B) {
	s := overlaytest.NewStore(b, b.Context(), fill15000)
	cache := b.TempDir()
	b.ResetTimer()
	for b.Loop() {
		require.NoError(b, os.RemoveAll(filepath.Join(cache, metaImageDir)))
		_, err := MetaImage(b.Context(), s.DB, cache, s.Root)
		require.NoError(b, err)
	}
}

// BenchmarkContentIndex indexes the contents of the same tree, the cost
// of a workspace's first read of a content not in the Store's cache: from
// the contents list MetaImage writes, and by a walk of the commit.
func BenchmarkContentIndex(b *testing.B) {
	s := overlaytest.NewStore(b, b.Context(), fill15000)
	cache := b.TempDir()
	_, err := MetaImage(b.Context(), s.DB, cache, s.Root)
	require.NoError(b, err)
	for name, list := range map[string]string{"list": contentsPath(cache, s.Root), "walk": ""} {
		b.Run(name, func(b *testing.B) {
			for b.Loop() {
				c := newContentLower(s.DB, s.Root, list)
				_, err := c.Tree(b.Context(), c.contentID("00"))
				require.NoError(b, err)
			}
		})
	}
}

// fill15000 makes a 15,000-file tree: 150 directories of 100 files.
func fill15000(t testing.TB, dir string) {
	for d := range 150 {
		sub := filepath.Join(dir, fmt.Sprintf("pkg%03d", d))
		require.NoError(t, os.Mkdir(sub, 0o755))
		for f := range 100 {
			require.NoError(t, os.WriteFile(filepath.Join(sub, fmt.Sprintf("file%03d.go", f)), []byte(fmt.Sprint(d, f)), 0o644))
		}
	}
}
