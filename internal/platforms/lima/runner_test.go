package lima

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"layerfs.dev/layerfs/internal/platforms"
	"layerfs.dev/layerfs/internal/platforms/internal/guest/guesttest"
)

// TestUpWithoutLimactl runs Up through the real os/exec runner with no
// limactl on PATH.
func TestUpWithoutLimactl(t *testing.T) {
	guesttest.UpWithoutTool(t, New, Options{Project: "demo"}, "brew install lima")
}

// TestUpWithFakeLimactl runs Up through the real os/exec runner against the
// fake limactl: version, list, and a boot that fails.
func TestUpWithFakeLimactl(t *testing.T) {
	log := guesttest.FakeBin(t, "FAKE_LIMACTL_LOG")
	f := newFixture(t)
	list := filepath.Join(t.TempDir(), "list.jsonl")
	b, err := os.ReadFile("testdata/list-stopped.jsonl")
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(list, []byte(strings.ReplaceAll(string(b), "$LIMA_HOME", f.limaHome)), 0o644))
	t.Setenv("FAKE_LIMACTL_LIST", list)
	p := f.platform(t, nil, nil)
	guesttest.WantError(t, p.Up(t.Context()), platforms.ErrStart, f.limaHome+`/layerfs-demo/ha.stderr.log`)
	guesttest.WantLog(t, log, "--version\n--\nlist\n--json\n--\nstart\n--tty=false\n--timeout=10m0s\nlayerfs-demo\n--\n")
}
