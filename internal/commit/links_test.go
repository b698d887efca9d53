package commit

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestLinkCounter(t *testing.T) {
	ctx := t.Context()
	db := newDB(t)
	src := t.TempDir()
	for _, p := range []string{"a/x", "b/y"} {
		require.NoError(t, os.MkdirAll(filepath.Join(src, filepath.Dir(p)), 0o755))
		require.NoError(t, os.WriteFile(filepath.Join(src, p), []byte(p), 0o644))
	}
	var lc LinkCounter
	root, _ := capture(t, db, src)
	if n, err := lc.Count(ctx, db, root); err != nil || n != 0 {
		t.Fatalf("no hard links: %d %v", n, err)
	}
	require.NoError(t, os.Link(filepath.Join(src, "a/x"), filepath.Join(src, "b/x2")))
	root, _ = capture(t, db, src)
	if n, err := lc.Count(ctx, db, root); err != nil || n != 2 {
		t.Fatalf("one group of two names: %d %v; want 2", n, err)
	}
}
