package lima

import (
	"context"
	"log/slog"
	"os"
	"os/exec"
	"runtime"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"layerfs.dev/layerfs/internal/platforms"
	"layerfs.dev/layerfs/internal/platforms/internal/guest/guesttest"
	"layerfs.dev/layerfs/internal/platforms/platformtest"
	"layerfs.dev/layerfs/internal/testenv"
)

// installWait bounds the wait for a scripts/ensure-lima that scripts/test-setup
// left building the installation in the background (a cold image build
// took 8.5 minutes on the loaded 2-core development machine).
const installWait = 25 * time.Minute

// TestConformance boots one real Lima VM and runs the whole conformance
// suite through its guest daemon: Up, every check on the running VM, then
// Down and nothing left (platformtest.Run boots once). On Linux (x86_64) it
// uses the installation scripts/ensure-lima makes, which scripts/test-setup
// runs (limactl built from source, a guest image built from Debian
// packages, QEMU under software emulation), waiting for an ensure-lima still
// at work; without it the test skips, which LAYERFS_TEST_STRICT=1 makes a
// failure. Elsewhere it uses a limactl on PATH (a Mac with Lima) and Lima's
// default image, and skips where there is none.
func TestConformance(t *testing.T) {
	t.Parallel() // the package's other tests run while the VM boots
	ctx, cancel := context.WithTimeout(t.Context(), installWait)
	defer cancel()
	in, err := WaitInstall(ctx, "")
	local := err == nil
	if !local {
		require.ErrorIs(t, err, platforms.ErrUnavailable)
		if _, lerr := exec.LookPath("limactl"); lerr != nil {
			if runtime.GOOS == "linux" && runtime.GOARCH == "amd64" {
				testenv.Skip(t, err.Error())
			}
			testenv.SkipNotHere(t, err.Error())
		}
	}
	daemon := guesttest.GuestDaemon(t)
	platformtest.Run(t, func(t *testing.T) platforms.Platform {
		cfg := Options{
			Project: guesttest.Project(),
			Daemon:  daemon,
			Image:   os.Getenv("LAYERFS_LIMA_IMAGE"), // a local qcow2 saves the download
			// Each step limactl takes, with its time, in the test's log.
			Logger: slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelInfo})),
		}
		if local {
			require.NoError(t, in.Configure(&cfg))
		}
		p, err := New(cfg)
		require.NoError(t, err)
		return p
	})
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(string(p))
	return len(p), nil
}
