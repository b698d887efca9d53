package libkrun

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"testing"
	"time"

	"layerfs.dev/layerfs/internal/testenv"
	"layerfs.dev/layerfs/platforms"
	"layerfs.dev/layerfs/platforms/internal/guest"
)

// TestConformance runs remoteConformance against a real microVM wherever
// msb is installed (Linux with KVM, or Apple silicon macOS); this project's
// CI machines have no usable KVM, so there it skips.
func TestConformance(t *testing.T) {
	if _, err := exec.LookPath("msb"); err != nil {
		testenv.SkipNotHere(t, "msb (microsandbox) not installed")
	}
	suffix := make([]byte, 3)
	_, _ = rand.Read(suffix)
	p, err := New(Config{Project: "conformance-" + hex.EncodeToString(suffix), Daemon: guestDaemonBinary(t), StateDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	remoteConformance(t, p, func(ctx context.Context) (bool, error) {
		_, found, err := p.find(ctx)
		return found, err
	})
}

// remoteConformance is the part of the Remote conformance suite this
// package can run until platforms/platformtest has one: lifecycle,
// idempotence, the published API answering (and refusing a wrong token),
// identity, and cleanup leaving no microVM behind.
func remoteConformance(t *testing.T, p platforms.Platform, exists func(context.Context) (bool, error)) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	t.Cleanup(func() { _ = p.Down(context.Background()) })
	r, ok := p.(platforms.Remote)
	if !ok || !p.Features().RemoteDaemon {
		t.Fatalf("%s is not a RemoteDaemon platform implementing platforms.Remote", p.Name())
	}
	if _, _, err := r.Endpoint(ctx); !errors.Is(err, platforms.ErrNotUp) {
		t.Errorf("Endpoint before Up: got %v, want ErrNotUp", err)
	}
	if err := p.Up(ctx); err != nil {
		t.Fatalf("Up: %v", err)
	}
	if err := p.Up(ctx); err != nil {
		t.Fatalf("second Up: %v", err)
	}
	addr, token, err := r.Endpoint(ctx)
	if err != nil {
		t.Fatalf("Endpoint: %v", err)
	}
	if _, err := guest.TCPDaemon(addr, token).Version(ctx); err != nil {
		t.Fatalf("GET /v1/version on %s: %v", addr, err)
	}
	if _, err := guest.TCPDaemon(addr, "wrong").Version(ctx); err == nil {
		t.Errorf("the daemon on %s answered a wrong token", addr)
	}
	id, err := p.Identity(ctx)
	if err != nil {
		t.Fatalf("Identity: %v", err)
	}
	if id.Platform != p.Name() || id.Kernel == "" || id.CPUs <= 0 || id.MemoryBytes <= 0 || id.Runtime == "" {
		t.Errorf("Identity is incomplete: %+v", id)
	}
	if err := p.Down(ctx); err != nil {
		t.Fatalf("Down: %v", err)
	}
	if found, err := exists(ctx); err != nil || found {
		t.Errorf("after Down the microVM still exists (%v, %v)", found, err)
	}
	if err := p.Down(ctx); err != nil {
		t.Errorf("second Down: %v", err)
	}
}

// guestDaemonBinary returns a layerfsd for a Linux guest of this host's
// architecture: $LAYERFS_GUEST_DAEMON, or one built from ./cmd/layerfsd.
func guestDaemonBinary(t *testing.T) string {
	if p := os.Getenv("LAYERFS_GUEST_DAEMON"); p != "" {
		return p
	}
	out := filepath.Join(t.TempDir(), "layerfsd")
	cmd := exec.Command("go", "build", "-o", out, "layerfs.dev/layerfs/cmd/layerfsd")
	cmd.Env = append(os.Environ(), "GOOS=linux", "GOARCH="+runtime.GOARCH, "CGO_ENABLED=0")
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build layerfsd for the guest (or set LAYERFS_GUEST_DAEMON): %v\n%s", err, b)
	}
	return out
}
