package applecontainer

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"layerfs.dev/layerfs/platforms"
)

// TestUpWithFakeCLI runs Up through the real os/exec runner against the
// fake CLI in testdata/fakebin, whose `container run` fails.
func TestUpWithFakeCLI(t *testing.T) {
	bin, err := filepath.Abs("testdata/fakebin")
	if err != nil {
		t.Fatal(err)
	}
	log := filepath.Join(t.TempDir(), "argv.log")
	t.Setenv("PATH", bin+string(os.PathListSeparator)+os.Getenv("PATH"))
	t.Setenv("FAKE_CONTAINER_LOG", log)
	f := newFixture(t)
	p := f.platform(t, nil, func(c *Config) { c.CPUs, c.Memory = 0, "" })
	err = p.Up(context.Background())
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

func TestExecRunnerMissingTool(t *testing.T) {
	t.Setenv("PATH", t.TempDir())
	if _, err := (ExecRunner{}).Run(context.Background(), []string{"container", "--version"}, nil); !errors.Is(err, exec.ErrNotFound) {
		t.Fatalf("got %v, want exec.ErrNotFound", err)
	}
	p, err := New(Config{Project: "demo"})
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Up(context.Background()); !errors.Is(err, platforms.ErrUnavailable) {
		t.Errorf("Up without the CLI: got %v, want ErrUnavailable", err)
	}
}
