package sandbox

import (
	"context"
	"fmt"
	"io"
	"os/exec"
	"time"

	"layerfs.dev/layerfs/internal/platforms"
	"layerfs.dev/layerfs/internal/stats"
)

// Overhead is the fixed cost of an exec of `true`, measured by
// MeasureOverhead. Launch is Wall minus the command's own time on the
// sandbox clock. Spawn is a plain fork and exec of `true` from this process
// with no sandbox, measured interleaved with the execs, as the yardstick of
// what starting any process costs on this machine at that moment.
type Overhead struct {
	N      int
	Launch Stat
	Wall   Stat
	Spawn  Stat
}

// Stat is a median and a 95th percentile.
type Stat struct{ Median, P95 time.Duration }

func (o Overhead) String() string {
	return fmt.Sprintf("n=%d launch median %.2f ms (p95 %.2f), wall median %.2f ms (p95 %.2f); plain spawn of true median %.2f ms (p95 %.2f); launch/spawn %.1fx",
		o.N, ms(o.Launch.Median), ms(o.Launch.P95), ms(o.Wall.Median), ms(o.Wall.P95),
		ms(o.Spawn.Median), ms(o.Spawn.P95), float64(o.Launch.Median)/float64(max(o.Spawn.Median, 1)))
}

func ms(d time.Duration) float64 { return float64(d) / 1e6 }

// MeasureOverhead runs `true` n times in sandboxes on workspace, each
// followed by a plain spawn of `true`, after one unmeasured warm-up of
// each, and returns medians and 95th percentiles. gap is idle time before
// each exec, as an agent's think time between execs: it lets a launcher's
// warm pool refill (back to back, the refill competes with the next exec).
func MeasureOverhead(ctx context.Context, l *Launcher, workspace string, n int, gap time.Duration) (Overhead, error) {
	if n <= 0 {
		return Overhead{}, fmt.Errorf("measure overhead: n must be positive, got %d", n)
	}
	truePath, err := exec.LookPath("true")
	if err != nil {
		return Overhead{}, fmt.Errorf("measure overhead: %w", err)
	}
	cfg := Config{Workspace: workspace, Spec: platforms.ExecSpec{Argv: []string{"true"}}}
	var launch, wall, spawn []time.Duration
	for i := -1; i < n; i++ {
		if gap > 0 {
			select {
			case <-time.After(gap):
			case <-ctx.Done():
				return Overhead{}, fmt.Errorf("measure overhead: %w", ctx.Err())
			}
		}
		res, err := l.Run(ctx, cfg, io.Discard, io.Discard)
		if err != nil {
			return Overhead{}, fmt.Errorf("measure overhead: %w", err)
		}
		if res.ExitCode != 0 {
			return Overhead{}, fmt.Errorf("measure overhead: true exited %d", res.ExitCode)
		}
		t0 := time.Now()
		if err := exec.CommandContext(ctx, truePath).Run(); err != nil {
			return Overhead{}, fmt.Errorf("measure overhead: plain spawn: %w", err)
		}
		d := time.Since(t0)
		if i >= 0 {
			launch, wall, spawn = append(launch, res.Launch), append(wall, res.Wall), append(spawn, d)
		}
	}
	stat := func(ds []time.Duration) Stat {
		return Stat{stats.MedianDuration(ds), stats.PercentileDuration(ds, 95)}
	}
	return Overhead{N: n, Launch: stat(launch), Wall: stat(wall), Spawn: stat(spawn)}, nil
}
