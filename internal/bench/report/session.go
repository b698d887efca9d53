package report

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"strconv"
)

// Names of the session and scale figures the bench measures (issue 5).
const (
	FigOpen         = "workspace open"
	FigClose        = "workspace close"
	FigWarmExec     = "warm exec latency"
	FigThroughput1  = "throughput, 1 worker"
	FigThroughput4  = "throughput, 4 workers"
	FigThroughput16 = "throughput, 16 workers"
	FigForkCreate   = "fork + workspace create"
)

// FigIdleMemory names the figure of the daemon's memory (its live heap)
// per idle workspace, measured with open of them open.
func FigIdleMemory(open int) string {
	return "memory per idle workspace (" + strconv.Itoa(open) + " open)"
}

// SessionFigure is one session or scale figure on one platform: every
// measured value (failed attempts are listed, not averaged in).
type SessionFigure struct {
	Platform string    `json:"platform"`
	Name     string    `json:"name"`
	Unit     string    `json:"unit"` // "ms", "execs/s", "MiB"
	Values   []float64 `json:"values"`
	Failures []string  `json:"failures,omitempty"`
	NotRun   string    `json:"not_run,omitempty"`
}

// Stats describes the figure's values.
func (f SessionFigure) Stats() Stats { return Describe(f.Values) }

// sessionJSON is a figure with its statistics; NaN becomes null.
type sessionJSON struct {
	SessionFigure
	nullableStats
}

func finite(v float64) *float64 {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return nil
	}
	return &v
}

// WriteSessionJSON writes the figures with their statistics as a JSON array.
func WriteSessionJSON(w io.Writer, figs []SessionFigure) error {
	out := make([]sessionJSON, 0, len(figs))
	for _, f := range figs {
		s := f.Stats()
		if f.Values == nil {
			f.Values = []float64{}
		}
		out = append(out, sessionJSON{SessionFigure: f, nullableStats: s.nullable()})
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(out)
}

var sessionColumns = []string{"p50", "p95", "min-max", "n"}

// sessionGrid has one row per figure name and one column group per
// platform (the platforms of r, then any others the figures name).
func (r Results) sessionGrid() grid {
	var names []string
	seenName := map[string]bool{}
	unit := map[string]string{}
	by := map[[2]string]SessionFigure{}
	var plats []Platform
	seenPlat := map[string]bool{}
	for _, p := range r.Platforms {
		plats = append(plats, p)
		seenPlat[p.Name] = true
	}
	for _, f := range r.Session {
		if !seenName[f.Name] {
			seenName[f.Name] = true
			names = append(names, f.Name)
			unit[f.Name] = f.Unit
		}
		if !seenPlat[f.Platform] {
			seenPlat[f.Platform] = true
			plats = append(plats, Platform{Name: f.Platform})
		}
		by[[2]string{f.Platform, f.Name}] = f
	}
	g := grid{header: []string{"figure", "unit"}}
	multi := len(plats) > 1
	for _, p := range plats {
		from := len(g.header)
		if p.NotRun != "" {
			g.header = append(g.header, p.Name)
		} else {
			for _, c := range sessionColumns {
				if multi {
					c = p.Name + " " + c
				}
				g.header = append(g.header, c)
			}
		}
		g.groups = append(g.groups, span{p.Name, from, len(g.header)})
	}
	for _, name := range names {
		row := []string{name, unit[name]}
		for _, p := range plats {
			if p.NotRun != "" {
				row = append(row, "not run: "+p.NotRun)
				continue
			}
			f, ok := by[[2]string{p.Name, name}]
			row = append(row, sessionCells(f, ok)...)
		}
		g.rows = append(g.rows, row)
	}
	for _, f := range r.Session {
		if f.NotRun != "" {
			g.notes = append(g.notes, fmt.Sprintf("%s on %s: not run: %s", f.Name, f.Platform, f.NotRun))
		}
		for _, e := range f.Failures {
			g.notes = append(g.notes, fmt.Sprintf("%s on %s: failed: %s", f.Name, f.Platform, firstLine(e, 200)))
		}
	}
	return g
}

func sessionCells(f SessionFigure, ok bool) []string {
	cols := make([]string, len(sessionColumns))
	switch {
	case !ok:
		cols[0] = "not run"
		return cols
	case f.NotRun != "":
		cols[0] = "not run"
		return cols
	case len(f.Values) == 0:
		cols[0] = "FAIL"
		return cols
	}
	s := f.Stats()
	cols[0] = figure(s.P50)
	cols[1] = figure(s.P95)
	cols[2] = figure(s.Min) + "-" + figure(s.Max)
	cols[3] = fmt.Sprintf("%d", s.N)
	if len(f.Failures) > 0 {
		cols[3] += fmt.Sprintf(" (%d FAIL)", len(f.Failures))
	}
	return cols
}

func figure(v float64) string {
	if v >= 100 {
		return count(v)
	}
	return msText(v)
}

// WriteSessionMarkdown writes the session figures table as Markdown.
func (r Results) WriteSessionMarkdown(w io.Writer) error { return r.sessionGrid().markdown(w) }

// WriteSessionText writes the session figures table for a terminal.
func (r Results) WriteSessionText(w io.Writer) error { return r.sessionGrid().text(w) }
