package sandbox

import (
	"context"
	"fmt"
	"io"
	"slices"
	"strings"
	"testing"
	"time"

	"layerfs.dev/layerfs/internal/testenv"
	"layerfs.dev/layerfs/platforms"
)

// TestPhases prints the median time of each phase of an exec of `true`
// (go test -run Phases -v): where the fixed cost goes.
func TestPhases(t *testing.T) {
	testenv.RequireRoot(t)
	per := map[string][]time.Duration{}
	var order []string
	l := &Launcher{trace: func(ms []mark) {
		for i := 1; i < len(ms); i++ {
			k := ms[i-1].Name + "->" + ms[i].Name
			if _, ok := per[k]; !ok && len(order) < len(ms)-1 {
				order = append(order, k)
			}
			per[k] = append(per[k], time.Duration(ms[i].NS-ms[i-1].NS))
		}
	}}
	cfg := Config{Workspace: t.TempDir(), Spec: platforms.ExecSpec{Argv: []string{"true"}}}
	for range 40 {
		if _, err := l.Run(context.Background(), cfg, io.Discard, io.Discard); err != nil {
			t.Fatal(err)
		}
	}
	var b strings.Builder
	for _, k := range order {
		fmt.Fprintf(&b, "%-16s %8.3f ms\n", k, float64(quantile(per[k], 0.5))/1e6)
	}
	t.Log("\n" + b.String())
	_ = slices.Clone[[]string]
}
