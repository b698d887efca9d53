package sandbox_test

import (
	"io"
	"os"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"layerfs.dev/layerfs/internal/platforms"
	"layerfs.dev/layerfs/internal/platforms/local/sandbox"
	"layerfs.dev/layerfs/internal/stats"
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

// BenchmarkForkIntoUserNamespace is why the launcher makes its user
// namespace once (its spawner) rather than one per exec: Go's own fork and
// exec of /bin/true (no sandbox), plainly and into a new user namespace
// with the default range, alternating, with LAYERFS_SANDBOX_GAP idle
// before each. Into a user namespace the runtime cannot use vfork (the
// parent must write the mapping while the child waits), so it copies the
// whole process (here the test binary, larger than the sandbox init, so
// more to copy) and syncs with the child over a pipe; docs/security.md has
// the figures.
func BenchmarkForkIntoUserNamespace(b *testing.B) {
	testenv.RequireRoot(b)
	gap, _ := time.ParseDuration(os.Getenv("LAYERFS_SANDBOX_GAP"))
	r := sandbox.DefaultIDRange
	fork := func(userns bool) time.Duration {
		attr := &syscall.ProcAttr{Files: []uintptr{0, 1, 2}, Sys: &syscall.SysProcAttr{Setpgid: true}}
		if userns {
			attr.Sys.Cloneflags = syscall.CLONE_NEWUSER
			attr.Sys.UidMappings, attr.Sys.GidMappings = r.Mapping(), r.Mapping()
			attr.Sys.GidMappingsEnableSetgroups = true
		}
		time.Sleep(gap)
		t0 := time.Now()
		pid, err := syscall.ForkExec("/bin/true", []string{"true"}, attr)
		d := time.Since(t0)
		require.NoError(b, err)
		var ws syscall.WaitStatus
		_, err = syscall.Wait4(pid, &ws, 0, nil)
		require.NoError(b, err)
		return d
	}
	var plain, userns []float64
	for b.Loop() {
		plain = append(plain, float64(fork(false).Microseconds()))
		userns = append(userns, float64(fork(true).Microseconds()))
	}
	b.ReportMetric(stats.Median(plain), "plain-us/fork")
	b.ReportMetric(stats.Median(userns), "userns-us/fork")
}
