package libkrun

import (
	"testing"

	"layerfs.dev/layerfs/internal/platforms/internal/guest/guesttest"
)

// TestConformance runs the conformance suite through the daemon of real
// microVMs wherever msb is installed (Linux with KVM, or Apple silicon
// macOS); this project's CI machines have no usable KVM, so there it skips.
func TestConformance(t *testing.T) {
	guesttest.Conformance(t, "msb", "msb (microsandbox) not installed", func(t *testing.T, project, daemon string) (*Platform, error) {
		return New(Options{Project: project, Daemon: daemon, StateDir: t.TempDir()})
	})
}
