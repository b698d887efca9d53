//go:build linux

package sandbox

import (
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"layerfs.dev/layerfs/internal/platforms"
	"layerfs.dev/layerfs/internal/seccomp"
	"layerfs.dev/layerfs/internal/stats"
	"layerfs.dev/layerfs/internal/testenv"
)

// TestPhases logs the median time of each phase of an exec of `true`
// (go test -run Phases -v): where the fixed cost goes. LAYERFS_SANDBOX_EXES
// (colon-separated) adds other init binaries, measured interleaved with the
// test binary itself; LAYERFS_SANDBOX_WARM=n keeps n inits started ahead,
// LAYERFS_SANDBOX_GAP (a duration) idles between execs, and
// LAYERFS_SANDBOX_FILTER=1 measures each binary with and without the
// seccomp filter (the name gets "+seccomp"); LAYERFS_SANDBOX_USERNS=1 adds,
// for each of those with the filter, one with the default user namespace
// too ("+seccomp+userns").
func TestPhases(t *testing.T) {
	testenv.RequireRoot(t)
	exes := []string{""}
	if v := os.Getenv("LAYERFS_SANDBOX_EXES"); v != "" {
		exes = append(exes, strings.Split(v, ":")...)
	}
	var filter [][]byte
	if os.Getenv("LAYERFS_SANDBOX_FILTER") == "1" {
		var err error
		filter, err = seccomp.BPF()
		require.NoError(t, err)
		for _, exe := range exes {
			exes = append(exes, exe+"+seccomp")
		}
		if os.Getenv("LAYERFS_SANDBOX_USERNS") == "1" {
			for _, exe := range exes {
				if strings.HasSuffix(exe, "+seccomp") {
					exes = append(exes, exe+"+userns")
				}
			}
		}
	}
	type acc struct {
		order  []string
		per    map[string][]time.Duration
		launch []time.Duration
		wall   []time.Duration
		cpu    []time.Duration
	}
	accs := make([]*acc, len(exes))
	var mu sync.Mutex // traces arrive from the launchers' reaping goroutines
	ls := make([]*Launcher, len(exes))
	for i, exe := range exes {
		a := &acc{per: map[string][]time.Duration{}}
		accs[i] = a
		warm, _ := strconv.Atoi(os.Getenv("LAYERFS_SANDBOX_WARM"))
		bin, _, _ := strings.Cut(exe, "+")
		ls[i] = &Launcher{Exe: bin, Warm: warm, trace: func(ms []mark, cpu time.Duration) {
			mu.Lock()
			defer mu.Unlock()
			a.cpu = append(a.cpu, cpu)
			for j := 1; j < len(ms); j++ {
				k := ms[j-1].Name + "->" + ms[j].Name
				if _, ok := a.per[k]; !ok {
					a.order = append(a.order, k)
				}
				a.per[k] = append(a.per[k], time.Duration(ms[j].NS-ms[j-1].NS))
			}
		}}
	}
	for i, exe := range exes {
		if strings.Contains(exe, "+seccomp") {
			ls[i].SyscallFilter = filter
		}
		if strings.Contains(exe, "+userns") {
			r := DefaultIDRange
			ls[i].UserNamespace = &r
		}
	}
	cfg := Config{Workspace: t.TempDir(), Spec: platforms.ExecSpec{Argv: []string{"true"}}}
	cfg.Network = os.Getenv("LAYERFS_SANDBOX_NETWORK") == "1"
	n := 40
	if testing.Short() {
		n = 5
	}
	gap, _ := time.ParseDuration(os.Getenv("LAYERFS_SANDBOX_GAP")) // idle time between execs
	for range n {
		for i, l := range ls {
			time.Sleep(gap)
			res, err := l.Run(t.Context(), cfg, io.Discard, io.Discard)
			require.NoError(t, err)
			mu.Lock()
			accs[i].launch = append(accs[i].launch, res.Launch)
			accs[i].wall = append(accs[i].wall, res.Wall)
			mu.Unlock()
		}
	}
	for _, l := range ls {
		l.Settle(t.Context())
	}
	mu.Lock()
	defer mu.Unlock()
	for i, a := range accs {
		var b strings.Builder
		fmt.Fprintf(&b, "exe %q: launch median %.3f ms, p10 %.3f ms; wall median %.3f ms, p10 %.3f ms; init CPU median %.3f ms\n", exes[i],
			float64(stats.MedianDuration(a.launch))/1e6, float64(stats.PercentileDuration(a.launch, 10))/1e6,
			float64(stats.MedianDuration(a.wall))/1e6, float64(stats.PercentileDuration(a.wall, 10))/1e6, float64(stats.MedianDuration(a.cpu))/1e6)
		for _, k := range a.order {
			fmt.Fprintf(&b, "  %-16s %8.3f ms (p10 %.3f)\n", k, float64(stats.MedianDuration(a.per[k]))/1e6, float64(stats.PercentileDuration(a.per[k], 10))/1e6)
		}
		t.Log("\n" + b.String())
	}
}
