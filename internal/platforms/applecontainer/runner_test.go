package applecontainer

import (
	"strings"
	"testing"

	"layerfs.dev/layerfs/internal/platforms"
	"layerfs.dev/layerfs/internal/platforms/internal/guest/guesttest"
)

// TestUpWithFakeCLI runs Up through the real os/exec runner against the
// fake CLI in testdata/fakebin, whose `container run` fails.
func TestUpWithFakeCLI(t *testing.T) {
	log := guesttest.FakeBin(t, "FAKE_CONTAINER_LOG")
	f := newFixture(t)
	p := f.platform(t, nil, func(c *Options) { c.CPUs, c.Memory = 0, "" })
	guesttest.WantError(t, p.Up(t.Context()), platforms.ErrStart, "nested virtualization is not available")
	guesttest.WantLog(t, log, strings.Join([]string{"--version", "--", "system", "status", "--", "list", "--all", "--format", "json", "--",
		"run", "--detach", "--name", "layerfs-demo", "--cap-add", "ALL", "--label", "layerfs.project=demo",
		"--publish-socket", f.hostSocket() + ":/var/lib/layerfs/run/layerfsd.sock",
		"docker.io/library/debian:bookworm-slim", "sleep", "infinity", "--", ""}, "\n"))
}

// TestUpWithoutCLI runs Up through the real os/exec runner without the
// container CLI on PATH. (ExecRunner itself is tested in
// platforms/internal/guest.)
func TestUpWithoutCLI(t *testing.T) {
	guesttest.UpWithoutTool(t, New, Options{Project: "demo"}, "not in PATH")
}
