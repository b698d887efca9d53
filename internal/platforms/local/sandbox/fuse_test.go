package sandbox_test

import (
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"testing"

	gofs "github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"layerfs.dev/layerfs/internal/platforms/local/sandbox"
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
	require.NoError(t, err)
	server, err := gofs.Mount(mnt, root, &gofs.Options{MountOptions: fuse.MountOptions{
		AllowOther: true, DirectMount: true, FsName: "layerfs-test", Name: "rawBridge",
	}})
	require.NoError(t, err, "mount")
	defer func() { assert.NoError(t, server.Unmount(), "unmount") }()
	require.NoError(t, os.WriteFile(filepath.Join(backing, "in"), []byte("from the backing dir\n"), 0o644))
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
	l.Settle(t.Context())
}

// TestFUSEWorkspaceIDMapped: a FUSE server that lets the kernel id-map its
// mounts (FUSE_ALLOW_IDMAP, go-fuse's IDMappedMount) gets the creations of
// a command in a user namespace as the ids inside; on one that does not,
// the exec is refused rather than run in the host's user namespace.
func TestFUSEWorkspaceIDMapped(t *testing.T) {
	testenv.RequireFUSE(t)
	l := userNSLauncher(t, 0)
	for _, allow := range []bool{true, false} {
		t.Run(fmt.Sprintf("allow idmap %v", allow), func(t *testing.T) {
			backing, mnt := t.TempDir(), t.TempDir()
			root, err := gofs.NewLoopbackRoot(backing)
			require.NoError(t, err)
			opts := fuse.MountOptions{AllowOther: true, DirectMount: true, FsName: "layerfs-test", Name: "rawBridge",
				Options: []string{"default_permissions"}, IDMappedMount: allow}
			server, err := gofs.Mount(mnt, root, &gofs.Options{MountOptions: opts})
			require.NoError(t, err, "mount")
			defer func() { assert.NoError(t, server.Unmount(), "unmount") }()
			cfg := shell(mnt, "echo x > f && mkdir d && stat -c %u:%g f d")
			if !allow {
				refused(t, l, cfg, filepath.Join(backing, "f"))
				return
			}
			o := run(t, l, cfg)
			if o.res.ExitCode != 0 {
				t.Fatalf("exit %d: %s", o.res.ExitCode, o.stderr)
			}
			if o.stdout != "0:0\n0:0\n" || o.res.UserNamespace != sandbox.DefaultIDRange.String() {
				t.Errorf("inside: %q, user namespace %q", o.stdout, o.res.UserNamespace)
			}
			for _, name := range []string{"f", "d"} {
				st, err := os.Lstat(filepath.Join(backing, name))
				require.NoError(t, err)
				if s := st.Sys().(*syscall.Stat_t); s.Uid != 0 || s.Gid != 0 {
					t.Errorf("%s is %d:%d in the backing dir, want 0:0", name, s.Uid, s.Gid)
				}
			}
		})
	}
}
