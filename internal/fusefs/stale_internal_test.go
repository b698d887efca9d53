package fusefs

import (
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"

	"layerfs.dev/layerfs/internal/testenv"
)

// TestMountRoot: CleanStale skips the mount table only for a directory
// that exists and is no mount's root.
func TestMountRoot(t *testing.T) {
	testenv.RequireRoot(t)
	dir := t.TempDir()
	if mountRoot(dir) {
		t.Errorf("a plain directory is a mount root")
	}
	if !mountRoot(filepath.Join(dir, "absent")) {
		t.Errorf("a path that does not exist is not looked up in the mount table")
	}
	if err := unix.Mount("tmpfs", dir, "tmpfs", 0, "size=1m"); err != nil {
		t.Fatal(err)
	}
	defer unix.Unmount(dir, unix.MNT_DETACH)
	if !mountRoot(dir) {
		t.Errorf("a tmpfs mount point is not a mount root")
	}
	if err := CleanStale(dir); err != nil {
		t.Fatal(err)
	}
	if mountRoot(dir) {
		t.Errorf("still a mount root after CleanStale")
	}
}
