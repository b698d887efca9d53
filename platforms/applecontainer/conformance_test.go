package applecontainer

import (
	"os/exec"
	"testing"

	"layerfs.dev/layerfs/internal/testenv"
	"layerfs.dev/layerfs/platforms"
	"layerfs.dev/layerfs/platforms/internal/guest/guesttest"
	"layerfs.dev/layerfs/platforms/platformtest"
)

// TestConformance runs the conformance suite through the daemon of real
// container VMs wherever Apple's container CLI is installed (macOS on Apple
// silicon); elsewhere it skips.
func TestConformance(t *testing.T) {
	if _, err := exec.LookPath("container"); err != nil {
		testenv.SkipNotHere(t, "Apple's container CLI not installed")
	}
	daemon := guesttest.GuestDaemon(t)
	platformtest.Run(t, func(t *testing.T) platforms.Platform {
		p, err := New(Config{Project: guesttest.Project(), Daemon: daemon})
		if err != nil {
			t.Fatal(err)
		}
		return p
	})
}
