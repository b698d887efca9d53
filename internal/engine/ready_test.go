package engine_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"layerfs.dev/layerfs/internal/engine"
	"layerfs.dev/layerfs/internal/platforms"
	"layerfs.dev/layerfs/internal/platforms/local"
	"layerfs.dev/layerfs/internal/store"
	"layerfs.dev/layerfs/internal/testenv"
	"layerfs.dev/layerfs/wire"
)

// TestFirstRead: the first workspace opened on an import reads every file
// with no request to the daemon's view once its contents are trusted,
// whether the import's fill of the Store's cache or the workspace's
// prefetch put them there (the workspace's readying trusts them, with
// prefetching off too); with neither, the reads go through the view. The
// import's metadata image is there before the first open.
func TestFirstRead(t *testing.T) {
	src := t.TempDir()
	const files = 200
	total := 0
	for i := range files {
		d := filepath.Join(src, fmt.Sprintf("d%d", i%10))
		require.NoError(t, os.MkdirAll(d, 0o755))
		data := []byte(fmt.Sprintf("file %d\n%0*d", i, 100+i*50, i))
		require.NoError(t, os.WriteFile(filepath.Join(d, fmt.Sprintf("f%d", i)), data, 0o644))
		total += len(data)
	}
	for _, tc := range []struct {
		name      string
		fill      bool
		prefetch  bool
		viewOpens bool // the reads open contents through the view
	}{
		{name: "filled by the import", fill: true},
		{name: "prefetched", prefetch: true},
		{name: "neither", viewOpens: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			testenv.RequireFUSE(t)
			ctx := context.Background()
			db, err := store.Init(ctx, filepath.Join(t.TempDir(), "store"), store.Options{NoCacheFill: !tc.fill, NoPrefetch: !tc.prefetch})
			require.NoError(t, err)
			p := local.New(local.Options{})
			require.NoError(t, p.Up(ctx))
			e, err := engine.New(ctx, engine.Config{Store: db, Platforms: []platforms.Platform{p}, NoPrefetch: !tc.prefetch})
			require.NoError(t, err)
			t.Cleanup(func() {
				assert.NoError(t, e.Shutdown(context.Background()))
				p.Down(context.Background())
				db.Close()
			})
			_, err = e.CreateProject(ctx, wire.CreateProject{Name: "p", FromPath: src})
			require.NoError(t, err)
			images, err := filepath.Glob(filepath.Join(db.CacheDir(), "meta", "*.erofs"))
			require.NoError(t, err)
			require.Len(t, images, 1, "the import's metadata image")

			ws, err := e.CreateWorkspace(ctx, wire.WorkspaceSpec{Project: "p", Branch: "main"})
			require.NoError(t, err)
			if tc.fill || tc.prefetch {
				// The import's fill, the prefetch and the trust of the
				// contents run behind the import and the open.
				require.Eventually(t, func() bool {
					st, err := db.Stats(ctx)
					return err == nil && st.CacheTrusted == files
				}, 30*time.Second, 20*time.Millisecond, "the contents were not put in the cache and trusted")
			}
			out, res := run(t, e, ws.ID, "find . -type f -print0 | xargs -0 cat | wc -c")
			assert.Equal(t, fmt.Sprintln(total), out, "bytes read")
			opens := res.Receipt.FUSE.ByOp["OPEN"].Count
			if tc.viewOpens {
				assert.Positive(t, opens, "the view served no content")
			} else {
				assert.Zero(t, opens, "contents opened through the view")
			}
		})
	}
}
