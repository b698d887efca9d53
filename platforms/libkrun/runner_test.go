package libkrun

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"layerfs.dev/layerfs/platforms"
	"layerfs.dev/layerfs/platforms/internal/guest/guesttest"
)

// TestUpWithFakeMsb runs Up through the real os/exec runner against the
// fake msb in testdata/fakebin, which cannot boot a microVM here.
func TestUpWithFakeMsb(t *testing.T) {
	log := guesttest.FakeBin(t, "FAKE_MSB_LOG")
	f := newFixture(t)
	p := f.platform(t, nil, func(c *Config) { c.CPUs, c.Memory = 0, "" })
	err := p.Up(context.Background())
	if !errors.Is(err, ErrStart) || !strings.Contains(err.Error(), "KVM is not available") {
		t.Fatalf("Up: got %v, want ErrStart with msb's error", err)
	}
	got, err := os.ReadFile(log)
	if err != nil {
		t.Fatal(err)
	}
	boot, err := os.ReadFile("testdata/boot.sh")
	if err != nil {
		t.Fatal(err)
	}
	want := strings.Join([]string{"--version", "--", "ls", "--format", "json", "--",
		"run", "--detach", "--quiet", "--name", "layerfs-demo", "--label", "layerfs.project=demo",
		"--port", "127.0.0.1:" + strconv.Itoa(f.port) + ":7411",
		"--copy-file", f.daemon + ":/usr/local/bin/layerfsd",
		"--copy-file", filepath.Join(f.stateDir, "layerfs-demo.token") + ":/etc/layerfs/token",
		"debian:bookworm-slim", "--", "sh", "-c", string(boot) + "--", ""}, "\n")
	if string(got) != want {
		t.Errorf("msb saw\n%s\nwant\n%s", got, want)
	}
}

// TestUpWithoutMsb runs Up through the real os/exec runner with no msb on
// PATH. (ExecRunner itself is tested in platforms/internal/guest.)
func TestUpWithoutMsb(t *testing.T) {
	t.Setenv("PATH", t.TempDir())
	p, err := New(Config{Project: "demo"})
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Up(context.Background()); !errors.Is(err, platforms.ErrUnavailable) {
		t.Errorf("Up without msb: got %v, want ErrUnavailable", err)
	}
}
