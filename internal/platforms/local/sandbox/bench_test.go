package sandbox_test

import (
	"io"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"layerfs.dev/layerfs/internal/platforms"
	"layerfs.dev/layerfs/internal/platforms/local/sandbox"
	"layerfs.dev/layerfs/internal/testenv"
)

// BenchmarkRunTrue is the fixed cost of one exec: a sandbox running `true`.
func BenchmarkRunTrue(b *testing.B) {
	testenv.RequireRoot(b)
	// LAYERFS_SANDBOX_EXE picks the init binary (default: this test
	// binary), LAYERFS_SANDBOX_WARM how many inits are kept started ahead.
	warm, _ := strconv.Atoi(os.Getenv("LAYERFS_SANDBOX_WARM"))
	l := sandbox.Launcher{Exe: os.Getenv("LAYERFS_SANDBOX_EXE"), Warm: warm}
	defer l.Close(b.Context())
	cfg := sandbox.Config{Workspace: b.TempDir(), Spec: platforms.ExecSpec{Argv: []string{"true"}}}
	var launch int64
	for b.Loop() {
		res, err := l.Run(b.Context(), cfg, io.Discard, io.Discard)
		if err != nil || res.ExitCode != 0 {
			b.Fatalf("run: %+v %v", res, err)
		}
		launch += int64(res.Launch)
	}
	b.ReportMetric(float64(launch)/float64(b.N)/1e6, "launch-ms/op")
}

func TestMeasureOverhead(t *testing.T) {
	testenv.RequireRoot(t)
	warm, _ := strconv.Atoi(os.Getenv("LAYERFS_SANDBOX_WARM"))
	l := sandbox.Launcher{Exe: os.Getenv("LAYERFS_SANDBOX_EXE"), Warm: warm}
	defer l.Close(t.Context())
	gap, _ := time.ParseDuration(os.Getenv("LAYERFS_SANDBOX_GAP"))
	o, err := sandbox.MeasureOverhead(t.Context(), &l, t.TempDir(), 30, gap)
	require.NoError(t, err)
	t.Log(o)
	if o.Launch.Median <= 0 || o.Wall.Median < o.Launch.Median || o.Spawn.Median <= 0 {
		t.Fatalf("implausible figures: %v", o)
	}
}
