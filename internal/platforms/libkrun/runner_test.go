package libkrun

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"layerfs.dev/layerfs/internal/platforms"
	"layerfs.dev/layerfs/internal/platforms/internal/guest/guesttest"
)

// TestUpWithFakeMsb runs Up through the real os/exec runner against the
// fake msb in testdata/fakebin, which cannot boot a microVM here.
func TestUpWithFakeMsb(t *testing.T) {
	log := guesttest.FakeBin(t, "FAKE_MSB_LOG")
	f := newFixture(t)
	p := f.platform(t, nil, func(c *Options) { c.CPUs, c.Memory = 0, "" })
	guesttest.WantError(t, p.Up(t.Context()), platforms.ErrStart, "KVM is not available")
	boot, err := os.ReadFile("testdata/boot.sh")
	require.NoError(t, err)
	guesttest.WantLog(t, log, strings.Join([]string{"--version", "--", "ls", "--format", "json", "--",
		"run", "--detach", "--quiet", "--name", "layerfs-demo", "--label", "layerfs.project=demo",
		"--port", "127.0.0.1:" + strconv.Itoa(f.port) + ":7411",
		"--copy-file", f.daemon + ":/usr/local/bin/layerfsd",
		"--copy-file", filepath.Join(f.stateDir, "layerfs-demo.token") + ":/etc/layerfs/token",
		"debian:bookworm-slim", "--", "sh", "-c", string(boot) + "--", ""}, "\n"))
}

// TestUpWithoutMsb runs Up through the real os/exec runner with no msb on
// PATH. (ExecRunner itself is tested in platforms/internal/guest.)
func TestUpWithoutMsb(t *testing.T) {
	guesttest.UpWithoutTool(t, New, Options{Project: "demo"}, "msb (microsandbox) not found")
}
