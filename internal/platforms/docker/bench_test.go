package docker

import (
	"io"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/stretchr/testify/require"

	"layerfs.dev/layerfs/internal/platforms"
	"layerfs.dev/layerfs/internal/platforms/local/sandbox"
	"layerfs.dev/layerfs/internal/testenv"
)

// BenchmarkExecOverhead measures the fixed cost of an exec (wall minus the
// command's own time, ExecResult.Launch) of `true`, through docker exec and
// through a direct namespace launch (engine/sandbox), alternating the two in
// one loop so both see the same machine. It reports the median launch of
// each, their ratio, and the median wall time of a bare docker exec of
// `true` (no supervisor), which shows what the supervisor adds:
//
//	go test -run '^$' -bench ExecOverhead -benchtime 50x ./platforms/docker/
func BenchmarkExecOverhead(b *testing.B) {
	testenv.RequireRoot(b)
	testenv.RequireDocker(b)
	ctx := b.Context()
	p := New(Options{Supervisor: supervisorBin})
	require.NoError(b, p.Up(ctx))
	defer p.Down(ctx)
	dir := b.TempDir()
	sb, err := p.Attach(ctx, platforms.Workspace{ID: "bench-overhead", HostPath: dir})
	require.NoError(b, err)
	defer sb.Close(ctx)
	var l sandbox.Launcher
	spec := platforms.ExecSpec{Argv: []string{"true"}}
	cfg := sandbox.Config{Workspace: dir, Spec: spec}
	runDocker := func() time.Duration {
		res, err := sb.Exec(ctx, spec, io.Discard, io.Discard)
		if err != nil || res.ExitCode != 0 {
			b.Fatalf("docker exec: %+v %v", res, err)
		}
		return res.Launch
	}
	runNS := func() time.Duration {
		res, err := l.Run(ctx, cfg, io.Discard, io.Discard)
		if err != nil || res.ExitCode != 0 {
			b.Fatalf("namespace launch: %+v %v", res, err)
		}
		return res.Launch
	}
	// The bare engine path, without the supervisor: what any docker exec of
	// `true` costs here (wall, since there is no command clock).
	raw := sb.(*Sandbox)
	runRaw := func() time.Duration {
		start := time.Now()
		c, err := raw.cli.ContainerExecCreate(ctx, raw.id, container.ExecOptions{AttachStdout: true, AttachStderr: true, Cmd: []string{"true"}})
		require.NoError(b, err)
		hj, err := raw.cli.ContainerExecAttach(ctx, c.ID, container.ExecAttachOptions{})
		require.NoError(b, err)
		_, err = io.Copy(io.Discard, hj.Reader)
		hj.Close()
		require.NoError(b, err)
		ins, err := raw.cli.ContainerExecInspect(ctx, c.ID)
		if err != nil || ins.ExitCode != 0 {
			b.Fatalf("raw exec: %+v %v", ins, err)
		}
		return time.Since(start)
	}
	runDocker() // warm every path
	runNS()
	runRaw()
	var dockerL, nsL, rawL []time.Duration
	for b.Loop() {
		dockerL = append(dockerL, runDocker())
		nsL = append(nsL, runNS())
		rawL = append(rawL, runRaw())
	}
	d, n := median(dockerL), median(nsL)
	b.ReportMetric(ms(d), "docker-launch-ms")
	b.ReportMetric(ms(n), "ns-launch-ms")
	b.ReportMetric(float64(d)/float64(n), "docker/ns")
	b.ReportMetric(ms(median(rawL)), "bare-docker-exec-ms")
	b.ReportMetric(0, "ns/op") // the loop runs both: per-op time means nothing
}

// BenchmarkDockerExecTrue is one docker exec of `true` per op, with the
// stand-alone static supervisor and with the fallback (this test binary
// re-executed), to show what the supervisor's start-up costs.
func BenchmarkDockerExecTrue(b *testing.B) {
	testenv.RequireDocker(b)
	exe, err := os.Executable()
	require.NoError(b, err)
	for _, sup := range []struct{ name, path string }{{"static", supervisorBin}, {"reexec", exe}} {
		b.Run(sup.name, func(b *testing.B) {
			ctx := b.Context()
			p := New(Options{Supervisor: sup.path})
			require.NoError(b, p.Up(ctx))
			defer p.Down(ctx)
			sb, err := p.Attach(ctx, platforms.Workspace{ID: "bench-true", HostPath: b.TempDir()})
			require.NoError(b, err)
			defer sb.Close(ctx)
			var launch []time.Duration
			for b.Loop() {
				res, err := sb.Exec(ctx, platforms.ExecSpec{Argv: []string{"true"}}, io.Discard, io.Discard)
				if err != nil || res.ExitCode != 0 {
					b.Fatalf("exec: %+v %v", res, err)
				}
				launch = append(launch, res.Launch)
			}
			b.ReportMetric(ms(median(launch)), "launch-ms")
		})
	}
}

func median(ds []time.Duration) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[len(s)/2]
}

func ms(d time.Duration) float64 { return float64(d) / 1e6 }
