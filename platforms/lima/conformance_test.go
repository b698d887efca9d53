package lima

import (
	"log/slog"
	"os"
	"os/exec"
	"testing"

	"layerfs.dev/layerfs/internal/testenv"
	"layerfs.dev/layerfs/platforms"
	"layerfs.dev/layerfs/platforms/internal/guest/guesttest"
	"layerfs.dev/layerfs/platforms/platformtest"
)

// TestConformance boots real Lima instances and runs the conformance suite
// through their guest daemons. It runs wherever limactl is installed (a
// Mac with Lima); this project's CI machines have no usable hypervisor, so
// there it skips.
func TestConformance(t *testing.T) {
	if _, err := exec.LookPath("limactl"); err != nil {
		testenv.SkipNotHere(t, "limactl not installed")
	}
	daemon := guesttest.GuestDaemon(t)
	platformtest.Run(t, func(t *testing.T) platforms.Platform {
		p, err := New(Config{
			Project: guesttest.Project(),
			Daemon:  daemon,
			Image:   os.Getenv("LAYERFS_LIMA_IMAGE"), // a local qcow2 saves the download
			Logger:  slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelInfo})),
		})
		if err != nil {
			t.Fatal(err)
		}
		return p
	})
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(string(p))
	return len(p), nil
}
