package lima

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"layerfs.dev/layerfs/internal/platforms"
)

func TestFindInstallMissingSaysHowToMakeIt(t *testing.T) {
	_, err := FindInstall(t.TempDir())
	require.ErrorIs(t, err, platforms.ErrUnavailable)
	assert.ErrorContains(t, err, "scripts/ensure-lima")
}

// TestInstallConfigure: an installation laid out as scripts/ensure-lima
// lays it out configures a direct boot of its image under software
// emulation, with limactl run from it (as InstallUser when root).
func TestInstallConfigure(t *testing.T) {
	if runtime.GOARCH != "amd64" {
		t.Skip("the installation's image is x86_64")
	}
	dir := t.TempDir()
	for _, f := range []string{"bin/limactl", "image/disk.qcow2", "image/vmlinuz", "image/initrd.img"} {
		p := filepath.Join(dir, f)
		require.NoError(t, os.MkdirAll(filepath.Dir(p), 0o755))
		require.NoError(t, os.WriteFile(p, nil, 0o755))
	}
	in, err := FindInstall(dir)
	if os.Geteuid() == 0 && errors.Is(err, platforms.ErrUnavailable) {
		t.Skipf("user %s missing (scripts/ensure-lima makes it): %v", InstallUser, err)
	}
	require.NoError(t, err)
	cfg := Options{Project: "demo"}
	require.NoError(t, in.Configure(&cfg))
	assert.Equal(t, filepath.Join(dir, "image/disk.qcow2"), cfg.Image)
	assert.Equal(t, filepath.Join(dir, "image/vmlinuz"), cfg.Kernel)
	assert.Equal(t, filepath.Join(dir, "image/initrd.img"), cfg.Initrd)
	assert.Equal(t, kernelCmdline, cfg.KernelCmdline)
	assert.True(t, cfg.SoftwareEmulation, "software emulation")
	r, ok := cfg.Runner.(ExecRunner)
	require.True(t, ok, "runner %#v, want an ExecRunner", cfg.Runner)
	assert.Equal(t, filepath.Join(dir, "bin/limactl"), r.Path, "the runner's limactl")
	assert.Equal(t, os.Geteuid() == 0, r.Credential != nil, "runs limactl as another user (root: limactl refuses it)")
}

// TestWaitInstallWaitsForEnsureLima: while scripts/ensure-lima holds the
// directory's lock (it is building), WaitInstall waits, and gives up with
// the log's path when its context ends; once the lock is free it answers as
// FindInstall does.
func TestWaitInstallWaitsForEnsureLima(t *testing.T) {
	dir := t.TempDir()
	lock, err := os.Create(filepath.Join(dir, ".lock"))
	require.NoError(t, err)
	defer lock.Close()
	require.NoError(t, unix.Flock(int(lock.Fd()), unix.LOCK_EX))
	ctx, cancel := context.WithTimeout(t.Context(), 1500*time.Millisecond)
	defer cancel()
	_, err = WaitInstall(ctx, dir)
	require.ErrorIs(t, err, context.DeadlineExceeded, "while the lock is held")
	require.ErrorContains(t, err, "ensure-lima.log", "while the lock is held: the log's path")
	done := make(chan error, 1)
	go func() {
		_, err := WaitInstall(t.Context(), dir)
		done <- err
	}()
	require.NoError(t, unix.Flock(int(lock.Fd()), unix.LOCK_UN))
	require.ErrorIs(t, <-done, platforms.ErrUnavailable, "after the lock is freed, in an empty directory")
}
