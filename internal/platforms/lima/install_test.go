package lima

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"layerfs.dev/layerfs/internal/platforms"
)

func TestFindInstallMissingSaysHowToMakeIt(t *testing.T) {
	_, err := FindInstall(t.TempDir())
	if !errors.Is(err, platforms.ErrUnavailable) {
		t.Fatalf("got %v, want ErrUnavailable", err)
	}
	if want := "scripts/ensure-lima"; !strings.Contains(err.Error(), want) {
		t.Errorf("error does not mention %q: %v", want, err)
	}
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
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, nil, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	in, err := FindInstall(dir)
	if os.Geteuid() == 0 && errors.Is(err, platforms.ErrUnavailable) {
		t.Skipf("user %s missing (scripts/ensure-lima makes it): %v", InstallUser, err)
	}
	if err != nil {
		t.Fatal(err)
	}
	cfg := Config{Project: "demo"}
	if err := in.Configure(&cfg); err != nil {
		t.Fatal(err)
	}
	if cfg.Image != filepath.Join(dir, "image/disk.qcow2") || cfg.Kernel != filepath.Join(dir, "image/vmlinuz") ||
		cfg.Initrd != filepath.Join(dir, "image/initrd.img") || cfg.KernelCmdline != kernelCmdline || !cfg.SoftwareEmulation {
		t.Errorf("Configure gave %+v", cfg)
	}
	r, ok := cfg.Runner.(ExecRunner)
	if !ok || r.Path != filepath.Join(dir, "bin/limactl") {
		t.Fatalf("runner %#v, want an ExecRunner of the installation's limactl", cfg.Runner)
	}
	if got := r.Credential != nil; got != (os.Geteuid() == 0) {
		t.Errorf("runs limactl as another user: %v, want %v (root: limactl refuses it)", got, os.Geteuid() == 0)
	}
}

// TestWaitInstallWaitsForEnsureLima: while scripts/ensure-lima holds the
// directory's lock (it is building), WaitInstall waits, and gives up with
// the log's path when its context ends; once the lock is free it answers as
// FindInstall does.
func TestWaitInstallWaitsForEnsureLima(t *testing.T) {
	dir := t.TempDir()
	lock, err := os.Create(filepath.Join(dir, ".lock"))
	if err != nil {
		t.Fatal(err)
	}
	defer lock.Close()
	if err := unix.Flock(int(lock.Fd()), unix.LOCK_EX); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 1500*time.Millisecond)
	defer cancel()
	_, err = WaitInstall(ctx, dir)
	if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "ensure-lima.log") {
		t.Fatalf("while the lock is held: got %v, want the deadline and the log's path", err)
	}
	done := make(chan error, 1)
	go func() {
		_, err := WaitInstall(context.Background(), dir)
		done <- err
	}()
	if err := unix.Flock(int(lock.Fd()), unix.LOCK_UN); err != nil {
		t.Fatal(err)
	}
	if err := <-done; !errors.Is(err, platforms.ErrUnavailable) {
		t.Fatalf("after the lock is freed, in an empty directory: got %v, want ErrUnavailable", err)
	}
}
