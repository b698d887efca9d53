package storebench

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestDedupTargets runs the dedup part of the bench at full size: its
// figures are deterministic, so a change to chunking that breaks a target
// fails here, not only in a bench run.
func TestDedupTargets(t *testing.T) {
	r := &runner{cfg: Config{Chunking: defaultConfig().Chunking}, dir: t.TempDir()}
	rows, err := r.dedup(t.Context())
	require.NoError(t, err)
	if len(rows) != 3 {
		t.Fatalf("%d rows, want 3", len(rows))
	}
	for _, x := range rows {
		t.Logf("%s: %.4f %s (target %s)", x.Name, x.Value, x.Unit, x.Target)
		if !x.Pass {
			t.Errorf("%s: %.4f %s misses %s", x.Name, x.Value, x.Unit, x.Target)
		}
	}
}

// TestSmallRun exercises the throughput and fork steps at a small scale.
func TestSmallRun(t *testing.T) {
	cfg := defaultConfig()
	cfg.Runs, cfg.Forks, cfg.Merges, cfg.BigTree, cfg.SmallFile = 1, 5, 5, 3000, 300
	r := &runner{cfg: cfg, dir: t.TempDir()}
	rows, err := r.smallFiles(t.Context())
	require.NoError(t, err)
	fr, err := r.forks(t.Context())
	require.NoError(t, err)
	rows = append(rows, fr...)
	mr, err := r.merges(t.Context())
	require.NoError(t, err)
	rows = append(rows, mr...)
	rep := &Report{Chunking: cfg.Chunking, Rows: rows}
	var b strings.Builder
	require.NoError(t, rep.WriteTable(&b))
	if !strings.Contains(b.String(), "fork a branch of a 3000-file tree") || !strings.Contains(b.String(), "capture 300 small files") ||
		!strings.Contains(b.String(), "merge of two branches that each changed one file, 3000-file tree") {
		t.Errorf("table:\n%s", b.String())
	}
}
