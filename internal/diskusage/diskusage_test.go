package diskusage

import (
	"os"
	"path/filepath"
	"testing"
)

// TestTree: blocks are counted, not sizes; a skipped directory and a
// missing root count nothing.
func TestTree(t *testing.T) {
	root := t.TempDir()
	if err := os.WriteFile(filepath.Join(root, "a"), make([]byte, 64<<10), 0o600); err != nil {
		t.Fatal(err)
	}
	sparse, err := os.Create(filepath.Join(root, "sparse"))
	if err != nil {
		t.Fatal(err)
	}
	if err := sparse.Truncate(1 << 30); err != nil {
		t.Fatal(err)
	}
	sparse.Close()
	if err := os.MkdirAll(filepath.Join(root, "links"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "links", "b"), make([]byte, 64<<10), 0o600); err != nil {
		t.Fatal(err)
	}
	all, err := Tree(root)
	if err != nil {
		t.Fatal(err)
	}
	skipped, err := Tree(root, "links")
	if err != nil {
		t.Fatal(err)
	}
	if all < 128<<10 || all > 1<<20 {
		t.Errorf("Tree = %d, want the two 64 KiB files' blocks and not the sparse file's size", all)
	}
	if skipped >= all || skipped < 64<<10 {
		t.Errorf("Tree skipping links = %d, want less than %d and at least 64 KiB", skipped, all)
	}
	if n, err := Tree(filepath.Join(root, "missing")); err != nil || n != 0 {
		t.Errorf("Tree of a missing root = %d, %v; want 0, nil", n, err)
	}
}
