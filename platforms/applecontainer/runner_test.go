package applecontainer

import (
	"context"
	"errors"
	"os"
	"strings"
	"testing"

	"layerfs.dev/layerfs/platforms"
	"layerfs.dev/layerfs/platforms/internal/guest/guesttest"
)

// TestUpWithFakeCLI runs Up through the real os/exec runner against the
// fake CLI in testdata/fakebin, whose `container run` fails.
func TestUpWithFakeCLI(t *testing.T) {
	log := guesttest.FakeBin(t, "FAKE_CONTAINER_LOG")
	f := newFixture(t)
	p := f.platform(t, nil, func(c *Config) { c.CPUs, c.Memory = 0, "" })
	err := p.Up(context.Background())
	if !errors.Is(err, ErrStart) || !strings.Contains(err.Error(), "nested virtualization is not available") {
		t.Fatalf("Up: got %v, want ErrStart with the CLI's error", err)
	}
	got, err := os.ReadFile(log)
	if err != nil {
		t.Fatal(err)
	}
	want := strings.Join([]string{"--version", "--", "system", "status", "--", "list", "--all", "--format", "json", "--",
		"run", "--detach", "--name", "layerfs-demo", "--cap-add", "ALL", "--label", "layerfs.project=demo",
		"--publish-socket", f.hostSocket() + ":/var/lib/layerfs/run/layerfsd.sock",
		"docker.io/library/debian:bookworm-slim", "sleep", "infinity", "--", ""}, "\n")
	if string(got) != want {
		t.Errorf("the CLI saw\n%s\nwant\n%s", got, want)
	}
}

// TestUpWithoutCLI runs Up through the real os/exec runner without the
// container CLI on PATH. (ExecRunner itself is tested in
// platforms/internal/guest.)
func TestUpWithoutCLI(t *testing.T) {
	t.Setenv("PATH", t.TempDir())
	p, err := New(Config{Project: "demo"})
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Up(context.Background()); !errors.Is(err, platforms.ErrUnavailable) {
		t.Errorf("Up without the CLI: got %v, want ErrUnavailable", err)
	}
}
