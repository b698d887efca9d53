package lima

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"layerfs.dev/layerfs/internal/testenv"
	"layerfs.dev/layerfs/platforms"
	"layerfs.dev/layerfs/platforms/internal/guest"
)

// TestConformance boots a real Lima instance and runs remoteConformance
// against it. It runs wherever limactl is installed (a Mac with Lima); this
// project's CI machines have no usable hypervisor, so there it skips.
func TestConformance(t *testing.T) {
	if _, err := exec.LookPath("limactl"); err != nil {
		testenv.SkipNotHere(t, "limactl not installed")
	}
	suffix := make([]byte, 3)
	_, _ = rand.Read(suffix)
	p, err := New(Config{
		Project: "conformance-" + hex.EncodeToString(suffix),
		Daemon:  guestDaemonBinary(t),
		Image:   os.Getenv("LAYERFS_LIMA_IMAGE"), // a local qcow2 saves the download
		Logger:  slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelInfo})),
	})
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
// idempotence, the forwarded API answering, identity, and cleanup leaving
// no instance behind. exists reports whether the platform's VM exists.
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
	if _, err := p.Identity(ctx); !errors.Is(err, platforms.ErrNotUp) {
		t.Errorf("Identity before Up: got %v, want ErrNotUp", err)
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
	sock, ok := strings.CutPrefix(addr, "unix://")
	if !ok {
		t.Fatalf("Endpoint %q is not a unix socket", addr)
	}
	daemon := guest.UnixDaemon(sock)
	daemon.Token = token
	v, err := daemon.Version(ctx)
	if err != nil {
		t.Fatalf("GET /v1/version through %s: %v", addr, err)
	}
	t.Logf("guest layerfsd %s (API %s)", v.Version, v.API)
	id, err := p.Identity(ctx)
	if err != nil {
		t.Fatalf("Identity: %v", err)
	}
	if id.Platform != p.Name() || id.Kernel == "" || id.CPUs <= 0 || id.MemoryBytes <= 0 || id.Runtime == "" {
		t.Errorf("Identity is incomplete: %+v", id)
	}
	t.Logf("identity: %+v", id)
	if err := p.Down(ctx); err != nil {
		t.Fatalf("Down: %v", err)
	}
	if found, err := exists(ctx); err != nil || found {
		t.Errorf("after Down the VM still exists (%v, %v)", found, err)
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

type testWriter struct{ t *testing.T }

func (w testWriter) Write(b []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(b), "\n"))
	return len(b), nil
}
