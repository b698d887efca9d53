package applecontainer

import (
	"testing"

	"layerfs.dev/layerfs/internal/platforms/internal/guest/guesttest"
)

// TestConformance runs the conformance suite through the daemon of real
// container VMs wherever Apple's container CLI is installed (macOS on Apple
// silicon); elsewhere it skips.
func TestConformance(t *testing.T) {
	guesttest.Conformance(t, "container", "Apple's container CLI not installed", func(t *testing.T, project, daemon string) (*Platform, error) {
		return New(Options{Project: project, Daemon: daemon})
	})
}
