package sandbox_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"

	gofs "github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"

	"layerfs.dev/layerfs/engine/sandbox"
	"layerfs.dev/layerfs/internal/testenv"
)

// TestFUSEWorkspace runs execs on a FUSE mount served by this very process,
// the case where a child that chdir'd into the mount from a fork of the
// serving process could hang: the init is a fresh process that makes its
// own mounts, so it cannot.
func TestFUSEWorkspace(t *testing.T) {
	testenv.RequireFUSE(t)
	backing, mnt := t.TempDir(), t.TempDir()
	root, err := gofs.NewLoopbackRoot(backing)
	if err != nil {
		t.Fatal(err)
	}
	server, err := gofs.Mount(mnt, root, &gofs.Options{MountOptions: fuse.MountOptions{
		AllowOther: true, DirectMount: true, FsName: "layerfs-test", Name: "rawBridge",
	}})
	if err != nil {
		t.Fatalf("mount: %v", err)
	}
	defer func() {
		if err := server.Unmount(); err != nil {
			t.Errorf("unmount: %v", err)
		}
	}()
	if err := os.WriteFile(filepath.Join(backing, "in"), []byte("from the backing dir\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	var l sandbox.Launcher
	o := run(t, &l, shell(mnt, "cat in; grep ' /workspace ' /proc/self/mountinfo | sed 's/.* - //' | cut -d' ' -f1,2; echo out > out"))
	if o.stdout != "from the backing dir\nfuse.rawBridge layerfs-test\n" || o.res.ExitCode != 0 {
		t.Fatalf("got %q (stderr %q)", o.stdout, o.stderr)
	}
	if b, err := os.ReadFile(filepath.Join(backing, "out")); err != nil || string(b) != "out\n" {
		t.Errorf("backing dir has %q, %v", b, err)
	}
	var wg sync.WaitGroup
	for i := range 6 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			o := run(t, &l, shell(mnt, fmt.Sprintf("mkdir -p d%d && echo %d > d%d/f && cat d%d/f", i, i, i, i)))
			if o.stdout != fmt.Sprintf("%d\n", i) {
				t.Errorf("exec %d: %q (stderr %q)", i, o.stdout, o.stderr)
			}
		}()
	}
	wg.Wait()
	l.Settle(context.Background())
}
