package sandbox

import (
	"context"
	"fmt"
	"io"
	"slices"
	"time"

	"layerfs.dev/layerfs/platforms"
)

// Overhead is the fixed cost of an exec of `true`, measured by
// MeasureOverhead over n runs. Launch is Wall minus the command's own time
// on the sandbox clock.
type Overhead struct {
	N                      int
	LaunchMedian, Launch95 time.Duration
	WallMedian, Wall95     time.Duration
}

func (o Overhead) String() string {
	return fmt.Sprintf("n=%d launch median %.2f ms p95 %.2f ms, wall median %.2f ms p95 %.2f ms",
		o.N, ms(o.LaunchMedian), ms(o.Launch95), ms(o.WallMedian), ms(o.Wall95))
}

func ms(d time.Duration) float64 { return float64(d) / 1e6 }

// MeasureOverhead runs `true` n times in sandboxes on workspace (after one
// unmeasured warm-up run) and returns the medians and 95th percentiles.
func MeasureOverhead(ctx context.Context, l *Launcher, workspace string, n int) (Overhead, error) {
	if n <= 0 {
		return Overhead{}, fmt.Errorf("measure overhead: n must be positive, got %d", n)
	}
	cfg := Config{Workspace: workspace, Spec: platforms.ExecSpec{Argv: []string{"true"}}}
	var launch, wall []time.Duration
	for i := -1; i < n; i++ {
		res, err := l.Run(ctx, cfg, io.Discard, io.Discard)
		if err != nil {
			return Overhead{}, fmt.Errorf("measure overhead: %w", err)
		}
		if res.ExitCode != 0 {
			return Overhead{}, fmt.Errorf("measure overhead: true exited %d", res.ExitCode)
		}
		if i >= 0 {
			launch, wall = append(launch, res.Launch), append(wall, res.Wall)
		}
	}
	return Overhead{
		N:            n,
		LaunchMedian: quantile(launch, 0.5), Launch95: quantile(launch, 0.95),
		WallMedian: quantile(wall, 0.5), Wall95: quantile(wall, 0.95),
	}, nil
}

// quantile returns the q-quantile of ds (nearest rank).
func quantile(ds []time.Duration, q float64) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	i := int(q*float64(len(s))+0.5) - 1
	return s[min(max(i, 0), len(s)-1)]
}
