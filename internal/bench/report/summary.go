package report

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"sort"
	"time"

	"layerfs.dev/layerfs/internal/platforms"
	"layerfs.dev/layerfs/internal/stats"
)

// Results is everything one bench run produced; the runner fills it and the
// writers render it.
type Results struct {
	Machine   string     // the machine, for the notes under the tables
	Command   string     // the command that produced the run
	Date      time.Time  // when it started
	Platforms []Platform // column groups, in order
	Cells     []Cell     // rows, in order
	Samples   []Sample
	Session   []SessionFigure
	// Cold are the platforms' cold figures (ColdRead), printed under
	// the cells.
	Cold []ColdRead
}

// Platform is one platform of the run.
type Platform struct {
	Name     string
	Identity *platforms.Identity // nil when it did not run
	// NotRun, when set, is why the platform did not run; it is shown as
	// "not run: <reason>" and never as numbers.
	NotRun string
	// Against names another column group of the run that this one is
	// compared with: the notes give the ratio of their geometric means.
	Against string
}

// Cell is a table row.
type Cell struct {
	ID    string
	Title string
	Group string // "" for the twelve; each group gets its own geometric mean
}

// Summary is one cell on one platform: the median with min and max of every
// timed figure over the samples that are Good, and the count of those that
// are not. A figure with no Good sample is null in JSON, never zero.
type Summary struct {
	Cell     string `json:"cell"`
	Title    string `json:"title,omitempty"`
	Group    string `json:"group,omitempty"`
	Platform string `json:"platform"`
	NotRun   string `json:"not_run,omitempty"`

	Samples       int  `json:"samples"`        // LayerFS samples, all outcomes
	NativeSamples int  `json:"native_samples"` // native samples, all outcomes
	Failed        int  `json:"failed"`         // of both arms
	Ineligible    int  `json:"ineligible"`     // of both arms
	Verified      bool `json:"verified"`       // every sample of both arms verified
	// Errors are the distinct reasons of samples that are not Good, as
	// "layerfs #2: ...".
	Errors []string `json:"errors,omitempty"`

	NativeMS    *float64 `json:"native_ms"`
	NativeMinMS *float64 `json:"native_min_ms"`
	NativeMaxMS *float64 `json:"native_max_ms"`

	LayerFSMS    *float64 `json:"layerfs_ms"`
	LayerFSMinMS *float64 `json:"layerfs_min_ms"`
	LayerFSMaxMS *float64 `json:"layerfs_max_ms"`

	// Ratio is LayerFSMS / NativeMS. RatioMin and RatioMax are the fastest
	// and slowest LayerFS samples over the same native median, so they
	// always bracket Ratio; the native arm's own spread is in
	// NativeMinMS/NativeMaxMS. (Pairing the i-th samples of the two arms
	// was rejected: with a failed sample the pairs no longer bracket the
	// ratio of medians.)
	Ratio    *float64 `json:"ratio"`
	RatioMin *float64 `json:"ratio_min"`
	RatioMax *float64 `json:"ratio_max"`

	Requests         *float64           `json:"requests"` // median FUSE requests per sample
	RequestsByOpcode map[string]float64 `json:"requests_by_opcode,omitempty"`
	USPerRequest     *float64           `json:"us_per_request"` // median of daemon time / requests
	DaemonMS         *float64           `json:"daemon_ms"`

	MountMS      *float64 `json:"mount_ms"`
	MountMinMS   *float64 `json:"mount_min_ms"`
	MountMaxMS   *float64 `json:"mount_max_ms"`
	UnmountMS    *float64 `json:"unmount_ms"`
	UnmountMinMS *float64 `json:"unmount_min_ms"`
	UnmountMaxMS *float64 `json:"unmount_max_ms"`
	CommitMS     *float64 `json:"commit_ms"`
	CommitMinMS  *float64 `json:"commit_min_ms"`
	CommitMaxMS  *float64 `json:"commit_max_ms"`

	// The fixed exec overhead (exec wall minus command time) of each arm.
	OverheadMS          *float64 `json:"overhead_ms"`
	OverheadMinMS       *float64 `json:"overhead_min_ms"`
	OverheadMaxMS       *float64 `json:"overhead_max_ms"`
	NativeOverheadMS    *float64 `json:"native_overhead_ms"`
	NativeOverheadMinMS *float64 `json:"native_overhead_min_ms"`
	NativeOverheadMaxMS *float64 `json:"native_overhead_max_ms"`

	SQLMountStatements  *float64 `json:"sql_mount_statements"`
	SQLRunStatements    *float64 `json:"sql_run_statements"`
	SQLCommitStatements *float64 `json:"sql_commit_statements"`
	SQLRowsWritten      *float64 `json:"sql_rows_written"`  // all phases
	SQLBytesWritten     *float64 `json:"sql_bytes_written"` // all phases

	OverlayBytes *float64 `json:"overlay_bytes"`
	StoreBytes   *float64 `json:"store_bytes"`
}

// Summarize returns one Summary per platform and cell, platforms outermost,
// in the order of r.Platforms and r.Cells.
func (r Results) Summarize() []Summary {
	r = r.complete()
	var out []Summary
	for _, p := range r.Platforms {
		for _, c := range r.Cells {
			out = append(out, summarize(p, c, r.Samples))
		}
	}
	return out
}

// complete fills Platforms and Cells, when empty, from the samples in order
// of first appearance, so that a sample log alone can be rendered again.
func (r Results) complete() Results {
	if len(r.Platforms) == 0 {
		seen := map[string]bool{}
		for _, x := range r.Samples {
			if !seen[x.Platform] {
				seen[x.Platform] = true
				id := x.Identity
				r.Platforms = append(r.Platforms, Platform{Name: x.Platform, Identity: &id})
			}
		}
	}
	if len(r.Cells) == 0 {
		seen := map[string]bool{}
		for _, x := range r.Samples {
			if !seen[x.Cell] {
				seen[x.Cell] = true
				r.Cells = append(r.Cells, Cell{ID: x.Cell})
			}
		}
	}
	return r
}

func summarize(p Platform, c Cell, all []Sample) Summary {
	s := Summary{Cell: c.ID, Title: c.Title, Group: c.Group, Platform: p.Name, NotRun: p.NotRun}
	if p.NotRun != "" {
		return s
	}
	var lfs, nat []Sample
	for _, x := range all {
		if x.Cell != c.ID || x.Platform != p.Name {
			continue
		}
		switch x.Arm {
		case LayerFS:
			lfs = append(lfs, x)
		case Native:
			nat = append(nat, x)
		}
	}
	sort.SliceStable(lfs, func(i, j int) bool { return lfs[i].Index < lfs[j].Index })
	sort.SliceStable(nat, func(i, j int) bool { return nat[i].Index < nat[j].Index })
	s.Samples, s.NativeSamples = len(lfs), len(nat)
	s.Verified = len(lfs) > 0 && len(nat) > 0
	seen := map[string]bool{}
	for _, x := range slicesConcat(lfs, nat) {
		if x.Good() {
			continue
		}
		s.Verified = false
		if x.Status == Ineligible {
			s.Ineligible++
		} else {
			s.Failed++
		}
		msg := fmt.Sprintf("%s #%d: %s", x.Arm, x.Index, x.Reason())
		if !seen[x.Reason()] {
			seen[x.Reason()] = true
			s.Errors = append(s.Errors, msg)
		}
	}
	good := func(xs []Sample) []Sample {
		var g []Sample
		for _, x := range xs {
			if x.Good() {
				g = append(g, x)
			}
		}
		return g
	}
	gl, gn := good(lfs), good(nat)

	s.NativeMS, s.NativeMinMS, s.NativeMaxMS = spread(gn, func(x Sample) float64 { return ms(x.Command) })
	s.LayerFSMS, s.LayerFSMinMS, s.LayerFSMaxMS = spread(gl, func(x Sample) float64 { return ms(x.Command) })
	if s.NativeMS != nil && s.LayerFSMS != nil && *s.NativeMS > 0 {
		s.Ratio = ptr(*s.LayerFSMS / *s.NativeMS)
		s.RatioMin = ptr(*s.LayerFSMinMS / *s.NativeMS)
		s.RatioMax = ptr(*s.LayerFSMaxMS / *s.NativeMS)
	}

	s.Requests = median(gl, func(x Sample) float64 { return float64(x.TotalRequests()) })
	ops := map[string]bool{}
	for _, x := range gl {
		for op := range x.Requests {
			ops[op] = true
		}
	}
	if len(ops) > 0 {
		s.RequestsByOpcode = map[string]float64{}
		for op := range ops {
			s.RequestsByOpcode[op] = *median(gl, func(x Sample) float64 { return float64(x.Requests[op]) })
		}
	}
	var withReqs []Sample
	for _, x := range gl {
		if x.TotalRequests() > 0 {
			withReqs = append(withReqs, x)
		}
	}
	s.USPerRequest = median(withReqs, func(x Sample) float64 {
		return float64(x.DaemonTime) / float64(time.Microsecond) / float64(x.TotalRequests())
	})
	s.DaemonMS = median(gl, func(x Sample) float64 { return ms(x.DaemonTime) })

	s.MountMS, s.MountMinMS, s.MountMaxMS = spread(gl, func(x Sample) float64 { return ms(x.Mount) })
	s.UnmountMS, s.UnmountMinMS, s.UnmountMaxMS = spread(gl, func(x Sample) float64 { return ms(x.Unmount) })
	s.CommitMS, s.CommitMinMS, s.CommitMaxMS = spread(gl, func(x Sample) float64 { return ms(x.Commit) })
	s.OverheadMS, s.OverheadMinMS, s.OverheadMaxMS = spread(gl, func(x Sample) float64 { return ms(x.Overhead) })
	s.NativeOverheadMS, s.NativeOverheadMinMS, s.NativeOverheadMaxMS = spread(gn, func(x Sample) float64 { return ms(x.Overhead) })

	s.SQLMountStatements = median(gl, func(x Sample) float64 { return float64(x.SQLMount.Statements) })
	s.SQLRunStatements = median(gl, func(x Sample) float64 { return float64(x.SQLRun.Statements) })
	s.SQLCommitStatements = median(gl, func(x Sample) float64 { return float64(x.SQLCommit.Statements) })
	s.SQLRowsWritten = median(gl, func(x Sample) float64 {
		return float64(x.SQLMount.RowsWritten + x.SQLRun.RowsWritten + x.SQLCommit.RowsWritten)
	})
	s.SQLBytesWritten = median(gl, func(x Sample) float64 {
		return float64(x.SQLMount.BytesWritten + x.SQLRun.BytesWritten + x.SQLCommit.BytesWritten)
	})
	s.OverlayBytes = median(gl, func(x Sample) float64 { return float64(x.OverlayBytes) })
	s.StoreBytes = median(gl, func(x Sample) float64 { return float64(x.StoreBytes) })
	return s
}

func slicesConcat(a, b []Sample) []Sample { return append(append([]Sample(nil), a...), b...) }

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

func ptr(f float64) *float64 { return &f }

func values(xs []Sample, f func(Sample) float64) []float64 {
	v := make([]float64, 0, len(xs))
	for _, x := range xs {
		v = append(v, f(x))
	}
	return v
}

func median(xs []Sample, f func(Sample) float64) *float64 {
	if len(xs) == 0 {
		return nil
	}
	return ptr(stats.Median(values(xs, f)))
}

func spread(xs []Sample, f func(Sample) float64) (med, lo, hi *float64) {
	if len(xs) == 0 {
		return nil, nil, nil
	}
	v := values(xs, f)
	l, h := stats.MinMax(v)
	return ptr(stats.Median(v)), ptr(l), ptr(h)
}

// GeoMeans returns, for one platform's summaries, the geometric mean of the
// ratios per cell group and how many cells of the group it covers.
func GeoMeans(sums []Summary, platform string) map[string]GeoMeanOf {
	ratios := map[string][]float64{}
	cells := map[string]int{}
	for _, s := range sums {
		if s.Platform != platform || s.NotRun != "" {
			continue
		}
		cells[s.Group]++
		if s.Ratio != nil {
			ratios[s.Group] = append(ratios[s.Group], *s.Ratio)
		}
	}
	out := map[string]GeoMeanOf{}
	for g, n := range cells {
		gm := stats.GeoMean(ratios[g])
		var v *float64
		if !math.IsNaN(gm) {
			v = ptr(gm)
		}
		out[g] = GeoMeanOf{Value: v, Cells: len(ratios[g]), Of: n}
	}
	return out
}

// GeoMeanOf is a geometric mean over Cells of the Of cells in a group.
type GeoMeanOf struct {
	Value *float64
	Cells int
	Of    int
}

// WriteSummaryJSON writes summaries as an indented JSON array.
func WriteSummaryJSON(w io.Writer, sums []Summary) error {
	if sums == nil {
		sums = []Summary{}
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(sums)
}
