package sandbox_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"layerfs.dev/layerfs/internal/kerneloverlay"
)

// overlayWorkspace mounts kernel overlayfs, the overlay data path's
// workspace mount, over a lower holding one root-owned file and an upper
// and work directory below dir, over id-mapped layers when idmap is set.
// It returns the mount and the upper directory.
func overlayWorkspace(t *testing.T, idmap *kerneloverlay.IDMap) (mnt, upper string) {
	t.Helper()
	dir := t.TempDir()
	lower, mnt, upper := filepath.Join(dir, "lower"), filepath.Join(dir, "mnt"), filepath.Join(dir, "ws", "upper")
	for _, d := range []string{lower, mnt, upper, filepath.Join(dir, "ws", "work")} {
		require.NoError(t, os.MkdirAll(d, 0o755))
	}
	require.NoError(t, os.WriteFile(filepath.Join(lower, "committed"), []byte("c\n"), 0o644))
	var err error
	if idmap != nil {
		err = kerneloverlay.MountIDMapped(lower, filepath.Join(dir, "ws"), mnt, idmap)
	} else {
		err = kerneloverlay.MountDirs(lower, upper, filepath.Join(dir, "ws", "work"), mnt, false)
	}
	require.NoError(t, err)
	t.Cleanup(func() { assert.NoError(t, unix.Unmount(mnt, 0), "unmount") })
	return mnt, upper
}

// TestOverlayWorkspaceIDMapped: a workspace on kernel overlayfs over
// id-mapped layers (Config.IDMapped) runs its command in the user namespace,
// and what root and uid 1000 create, chown and copy up lands in the upper
// owned by their ids inside; concurrent execs share the one overlay mount.
// Over layers that are not id-mapped, the exec is refused: it never runs
// in the host's user namespace instead.
func TestOverlayWorkspaceIDMapped(t *testing.T) {
	l := userNSLauncher(t, 1)
	t.Run("plain layers", func(t *testing.T) {
		mnt, upper := overlayWorkspace(t, nil)
		refused(t, l, shell(mnt, "echo ran > ran"), filepath.Join(upper, "ran"))
	})
	t.Run("id-mapped layers", func(t *testing.T) {
		ns, r, err := l.IDMap()
		require.NoError(t, err)
		mnt, upper := overlayWorkspace(t, &kerneloverlay.IDMap{UserNS: ns, Root: r.Host})
		cfg := shell(mnt, `set -e
			stat -c %u:%g committed .
			echo r > r; mkdir -m 0777 d; echo u > u; chown 1000:1000 u
			chmod 0600 committed; chown 1000 committed`)
		cfg.IDMapped = true
		o := run(t, l, cfg)
		if o.res.ExitCode != 0 || o.res.UserNamespace != r.String() {
			t.Fatalf("exit %d, user namespace %q, stderr %q", o.res.ExitCode, o.res.UserNamespace, o.stderr)
		}
		if o.stdout != "0:0\n0:0\n" {
			t.Errorf("owners inside: %q, want the lower's root as 0", o.stdout)
		}
		// Execs at once, each as its own uid, in one directory.
		const n = 4
		var wg sync.WaitGroup
		outs := make([]output, n)
		for i := range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				c := shell(mnt, fmt.Sprintf("for j in $(seq 50); do echo %d-$j >> d/f%d; done; mkdir d/dir%d", i, i, i))
				c.IDMapped, c.Spec.UID, c.Spec.GID = true, 100+i, 100+i
				outs[i] = run(t, l, c)
			}()
		}
		wg.Wait()
		want := map[string]uint32{"r": 0, "d": 0, "u": 1000, "committed": 1000}
		for i, o := range outs {
			if o.res.ExitCode != 0 {
				t.Errorf("exec %d: exit %d, %s", i, o.res.ExitCode, o.stderr)
			}
			want[fmt.Sprintf("d/f%d", i)] = uint32(100 + i)
			want[fmt.Sprintf("d/dir%d", i)] = uint32(100 + i)
			b, err := os.ReadFile(filepath.Join(mnt, "d", fmt.Sprintf("f%d", i)))
			if err != nil || strings.Count(string(b), "\n") != 50 {
				t.Errorf("d/f%d through the mount: %v, %d lines", i, err, strings.Count(string(b), "\n"))
			}
		}
		for name, id := range want {
			st, err := os.Lstat(filepath.Join(upper, name))
			if !assert.NoError(t, err, "upper") {
				continue
			}
			if s := st.Sys().(*syscall.Stat_t); s.Uid != id || (s.Gid != id && name != "committed") {
				t.Errorf("%s is %d:%d in the upper, want %d", name, s.Uid, s.Gid, id)
			}
		}
		// The host sees the mapped ids through the mount.
		if st, err := os.Stat(filepath.Join(mnt, "r")); err != nil || st.Sys().(*syscall.Stat_t).Uid != r.Host {
			t.Errorf("r through the mount on the host: %v, want uid %d", err, r.Host)
		}
	})
}
