package lima

import (
	"log/slog"
	"os"
	"testing"

	"layerfs.dev/layerfs/platforms/internal/guest/guesttest"
)

// TestConformance boots real Lima instances and runs the conformance suite
// through their guest daemons. It runs wherever limactl is installed (a
// Mac with Lima); this project's CI machines have no usable hypervisor, so
// there it skips.
func TestConformance(t *testing.T) {
	guesttest.Conformance(t, "limactl", "limactl not installed", func(t *testing.T, project, daemon string) (*Platform, error) {
		return New(Config{
			Project: project,
			Daemon:  daemon,
			Image:   os.Getenv("LAYERFS_LIMA_IMAGE"), // a local qcow2 saves the download
			Logger:  slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelInfo})),
		})
	})
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(string(p))
	return len(p), nil
}
