package report

import (
	"fmt"
	"time"

	"layerfs.dev/layerfs/internal/stats"
)

// ColdRead is a platform's cold figure, printed with the cells: the first
// read of every file of a committed tree by a new workspace against a
// native read of the same tree, the page cache dropped before each. The
// cells themselves run warm (each sample's body runs once, untimed, before
// the timed run), so they cannot show what a first read costs.
type ColdRead struct {
	Platform string          `json:"platform"`
	Files    int             `json:"files"`
	LayerFS  []time.Duration `json:"layerfs_ns"`
	Native   []time.Duration `json:"native_ns"`
	// NotRun, when set, is why the figure was not measured.
	NotRun string `json:"not_run,omitempty"`
}

// row is the cold figure's row of the cells table, in its columns.
func (c ColdRead) row() []string {
	cols := make([]string, len(cellColumns))
	if c.NotRun != "" {
		cols[0] = "not run: " + c.NotRun
		return cols
	}
	cols[0] = spreadText(c.Native)
	cols[1] = spreadText(c.LayerFS)
	var rs []float64
	for i := range min(len(c.LayerFS), len(c.Native)) {
		if c.Native[i] > 0 {
			rs = append(rs, float64(c.LayerFS[i])/float64(c.Native[i]))
		}
	}
	if len(rs) > 0 {
		lo, hi := stats.MinMax(rs)
		cols[2] = fmt.Sprintf("%s [%.2f-%.2f]", ratio(stats.Median(rs)), lo, hi)
	}
	return cols
}

// spreadText is the median of ds in milliseconds with their range.
func spreadText(ds []time.Duration) string {
	if len(ds) == 0 {
		return "–"
	}
	v := make([]float64, len(ds))
	for i, d := range ds {
		v[i] = ms(d)
	}
	lo, hi := stats.MinMax(v)
	return fmt.Sprintf("%s [%s-%s]", msText(stats.Median(v)), msText(lo), msText(hi))
}
