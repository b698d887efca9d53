package libkrun

import (
	"os/exec"
	"testing"

	"layerfs.dev/layerfs/internal/testenv"
	"layerfs.dev/layerfs/platforms"
	"layerfs.dev/layerfs/platforms/internal/guest/guesttest"
	"layerfs.dev/layerfs/platforms/platformtest"
)

// TestConformance runs the conformance suite through the daemon of real
// microVMs wherever msb is installed (Linux with KVM, or Apple silicon
// macOS); this project's CI machines have no usable KVM, so there it skips.
func TestConformance(t *testing.T) {
	if _, err := exec.LookPath("msb"); err != nil {
		testenv.SkipNotHere(t, "msb (microsandbox) not installed")
	}
	daemon := guesttest.GuestDaemon(t)
	platformtest.Run(t, func(t *testing.T) platforms.Platform {
		p, err := New(Config{Project: guesttest.Project(), Daemon: daemon, StateDir: t.TempDir()})
		if err != nil {
			t.Fatal(err)
		}
		return p
	})
}
