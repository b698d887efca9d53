package fusefs_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"layerfs.dev/layerfs/internal/overlay/overlaytest"
	"layerfs.dev/layerfs/internal/testenv"
)

// stressors are stress-ng's file-system stressors the stress run starts,
// one worker each: directories, dentries, hard and symbolic links, renames,
// file data (written and read back, verified), modes, times, xattrs and
// preallocation.
var stressors = []string{"--dir", "--dentry", "--link", "--symlink", "--rename", "--hdd", "--chmod", "--utime", "--xattr", "--fallocate"}

// TestStress runs stress-ng's file-system stressors in a workspace for a
// bounded time, on both data paths: every stressor must finish without an
// error or a failed verification. It keeps what they leave, commits it,
// checks the whole store (fsck) and compares a fresh workspace on the
// commit with the workspace.
func TestStress(t *testing.T) { onBothPaths(t, testStress) }

func testStress(t *testing.T, path string) {
	if _, err := exec.LookPath("stress-ng"); err != nil {
		testenv.Skip(t, "stress-ng is not installed (scripts/test-setup installs it)")
	}
	seconds := 20
	if testing.Short() {
		seconds = 3
	}
	e := newEnvOn(t, true, path)
	m, mnt := e.mount(e.Root)
	dir := filepath.Join(mnt, "stress")
	require.NoError(t, os.Mkdir(dir, 0o755))
	args := []string{"--temp-path", dir, "--keep-files", "--verify", "--metrics-brief", "--timeout", fmt.Sprint(seconds, "s")}
	for _, s := range stressors {
		args = append(args, s, "1")
	}
	args = append(args, "--hdd-bytes", "16M", "--hdd-opts", "wr-rnd,rd-rnd", "--fallocate-bytes", "16M")
	// A deadline far beyond the run: a hung file system fails the test
	// instead of hanging it.
	ctx, cancel := context.WithTimeout(t.Context(), time.Duration(seconds)*time.Second+5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "stress-ng", args...)
	cmd.Dir = "/" // the serving process never forks with its working directory on the mount
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "stress-ng %v\n%s", args, out)
	t.Logf("stress-ng on %s:\n%s", path, out)

	root := e.Commit(m)
	rep, err := e.DB.Fsck(e.ctx, nil)
	require.NoError(t, err, "fsck")
	require.NoError(t, rep.Err(), "fsck")
	_, mnt2 := e.mount(root)
	overlaytest.RequireSame(t, mnt, mnt2, "fresh workspace on the commit")
}
