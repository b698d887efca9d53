package lima

import (
	"errors"
	"log/slog"
	"os"
	"os/exec"
	"testing"

	"layerfs.dev/layerfs/internal/platforms"
	"layerfs.dev/layerfs/internal/platforms/internal/guest/guesttest"
	"layerfs.dev/layerfs/internal/platforms/platformtest"
	"layerfs.dev/layerfs/internal/testenv"
)

// TestConformance boots real Lima instances and runs the conformance suite
// through their guest daemons. On Linux it uses the installation that
// scripts/ensure-lima makes (limactl built from source, a guest image built
// from Debian packages, QEMU under software emulation); elsewhere a
// limactl on PATH (a Mac with Lima) and its default image. It is opt-in,
// with LAYERFS_TEST_LIMA=1: each boot under emulation takes minutes (see
// docs/platforms.md).
func TestConformance(t *testing.T) {
	if os.Getenv("LAYERFS_TEST_LIMA") != "1" {
		t.Skip("set LAYERFS_TEST_LIMA=1 (after scripts/ensure-lima) to boot Lima VMs")
	}
	in, err := FindInstall("")
	local := err == nil
	if !local {
		if _, lerr := exec.LookPath("limactl"); lerr != nil {
			if errors.Is(err, platforms.ErrUnavailable) {
				testenv.SkipNotHere(t, err.Error())
			}
			t.Fatal(err)
		}
	}
	daemon := guesttest.GuestDaemon(t)
	platformtest.Run(t, func(t *testing.T) platforms.Platform {
		cfg := Config{
			Project: guesttest.Project(),
			Daemon:  daemon,
			Image:   os.Getenv("LAYERFS_LIMA_IMAGE"), // a local qcow2 saves the download
			Logger:  slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelInfo})),
		}
		if local {
			if err := in.Configure(&cfg); err != nil {
				t.Fatal(err)
			}
		}
		p, err := New(cfg)
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
