package platformtest_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"layerfs.dev/layerfs/client"
	"layerfs.dev/layerfs/internal/platforms"
	"layerfs.dev/layerfs/internal/platforms/internal/guest"
	"layerfs.dev/layerfs/internal/platforms/platformtest"
	"layerfs.dev/layerfs/internal/testenv"
	"layerfs.dev/layerfs/wire"
)

// daemonPlatform is a RemoteDaemon platform whose "guest" is this host: Up
// starts a real layerfsd over a fresh Store and Endpoint is its socket. It
// lets the Remote variant of the suite run here, where no VM boots.
type daemonPlatform struct {
	bin string
	mu  sync.Mutex
	cmd *exec.Cmd
	dir string
}

func (p *daemonPlatform) Name() string { return "hostdaemon" }

func (p *daemonPlatform) Features() platforms.Features {
	return platforms.Features{RemoteDaemon: true}
}

func (p *daemonPlatform) Up(ctx context.Context) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd != nil {
		return nil
	}
	dir, err := os.MkdirTemp("", "hostdaemon-")
	if err != nil {
		return err
	}
	cmd := exec.Command(p.bin, "serve", "--store", filepath.Join(dir, "store"), "--socket", filepath.Join(dir, "d.sock"))
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Start(); err != nil {
		os.RemoveAll(dir)
		return err
	}
	p.cmd, p.dir = cmd, dir
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		if c, err := client.Dial(ctx, "unix://"+filepath.Join(dir, "d.sock")); err == nil {
			c.Close()
			return nil
		}
	}
	return fmt.Errorf("layerfsd did not answer within 30s")
}

func (p *daemonPlatform) Down(ctx context.Context) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil {
		return nil
	}
	p.cmd.Process.Signal(syscall.SIGTERM)
	err := p.cmd.Wait()
	os.RemoveAll(p.dir)
	p.cmd = nil
	return err
}

func (p *daemonPlatform) Identity(ctx context.Context) (platforms.Identity, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil {
		return platforms.Identity{}, platforms.ErrNotUp
	}
	var u unix.Utsname
	unix.Uname(&u)
	return platforms.Identity{Platform: p.Name(), Kernel: unix.ByteSliceToString(u.Release[:]), CPUs: runtime.NumCPU(), MemoryBytes: 1, Runtime: "layerfsd"}, nil
}

func (p *daemonPlatform) Endpoint(ctx context.Context) (string, string, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil {
		return "", "", platforms.ErrNotUp
	}
	return "unix://" + filepath.Join(p.dir, "d.sock"), "", nil
}

// Isolation is what the host daemon's sandboxes get, as a VM platform
// reports its guest's.
func (p *daemonPlatform) Isolation(ctx context.Context) (wire.Isolation, error) {
	return guest.RemoteIsolation(ctx, p, p.Name(), "none (the guest is this host)")
}

// buildDaemon builds layerfsd and its sandbox init into one directory.
func buildDaemon(t *testing.T) string {
	dir := t.TempDir()
	for _, pkg := range []string{"layerfs.dev/layerfs/cmd/layerfsd", "layerfs.dev/layerfs/cmd/layerfs-sandbox-init"} {
		if out, err := exec.Command("go", "build", "-o", dir, pkg).CombinedOutput(); err != nil {
			t.Fatalf("build %s: %v\n%s", pkg, err, out)
		}
	}
	return filepath.Join(dir, "layerfsd")
}

// TestRemoteConformance runs the RemoteDaemon variant of the suite for real.
func TestRemoteConformance(t *testing.T) {
	testenv.RequireFUSE(t)
	bin := buildDaemon(t)
	platformtest.Run(t, func(t *testing.T) platforms.Platform { return &daemonPlatform{bin: bin} })
}
