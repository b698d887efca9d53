package lima

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"layerfs.dev/layerfs/platforms"
	"layerfs.dev/layerfs/platforms/internal/guest/guesttest"
)

// TestUpWithoutLimactl runs Up through the real os/exec runner with no
// limactl on PATH.
func TestUpWithoutLimactl(t *testing.T) {
	t.Setenv("PATH", t.TempDir())
	p, err := New(Config{Project: "demo"})
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Up(context.Background()); !errors.Is(err, platforms.ErrUnavailable) || !strings.Contains(err.Error(), "brew install lima") {
		t.Errorf("Up without limactl: got %v, want ErrUnavailable with install advice", err)
	}
}

// TestUpWithFakeLimactl runs Up through the real os/exec runner against the
// fake limactl: version, list, and a boot that fails.
func TestUpWithFakeLimactl(t *testing.T) {
	log := guesttest.FakeBin(t, "FAKE_LIMACTL_LOG")
	f := newFixture(t)
	list := filepath.Join(t.TempDir(), "list.jsonl")
	b, err := os.ReadFile("testdata/list-stopped.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(list, []byte(strings.ReplaceAll(string(b), "$LIMA_HOME", f.limaHome)), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Setenv("FAKE_LIMACTL_LIST", list)
	p := f.platform(t, nil, nil)
	err = p.Up(context.Background())
	if !errors.Is(err, ErrStart) || !strings.Contains(err.Error(), f.limaHome+`/layerfs-demo/ha.stderr.log`) {
		t.Fatalf("Up: got %v, want ErrStart with limactl's hint", err)
	}
	got, err := os.ReadFile(log)
	if err != nil {
		t.Fatal(err)
	}
	want := "--version\n--\nlist\n--json\n--\nstart\n--tty=false\n--timeout=10m0s\nlayerfs-demo\n--\n"
	if string(got) != want {
		t.Errorf("limactl saw\n%s\nwant\n%s", got, want)
	}
}
