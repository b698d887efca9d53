package report

import (
	"fmt"
	"io"
	"math"
	"strings"
	"unicode/utf8"

	"layerfs.dev/layerfs/internal/stats"
)

// grid is a rendered table before it is written as Markdown or text.
type grid struct {
	groups []span // column groups (one per platform when there are several)
	header []string
	rows   [][]string
	notes  []string
}

// span labels columns [from, to) of a grid.
type span struct {
	label    string
	from, to int
}

// The per-platform columns of the cells table.
var cellColumns = []string{"native ms", "LayerFS ms", "ratio [min-max]", "requests", "µs/req", "commit ms", "overlay", "Store", "verified"}

func (r Results) cellGrid() grid {
	r = r.complete()
	sums := r.Summarize()
	by := map[[2]string]Summary{}
	for _, s := range sums {
		by[[2]string{s.Platform, s.Cell}] = s
	}
	g := grid{header: []string{"cell"}}
	multi := len(r.Platforms) > 1
	for _, p := range r.Platforms {
		from := len(g.header)
		if p.NotRun != "" {
			g.header = append(g.header, p.Name)
		} else {
			for _, c := range cellColumns {
				if multi {
					c = p.Name + " " + c
				}
				g.header = append(g.header, c)
			}
		}
		g.groups = append(g.groups, span{p.Name, from, len(g.header)})
	}
	for _, c := range r.Cells {
		row := []string{strings.TrimSpace(c.ID + " " + c.Title)}
		for _, p := range r.Platforms {
			row = append(row, cellRow(p, by[[2]string{p.Name, c.ID}])...)
		}
		g.rows = append(g.rows, row)
	}

	// One geometric mean row per cell group, then the fixed exec overhead.
	for _, grp := range r.groups() {
		label := "geometric mean"
		if grp != "" {
			label += " (" + grp + ")"
		}
		row := []string{label}
		for _, p := range r.Platforms {
			if p.NotRun != "" {
				row = append(row, "not run")
				continue
			}
			gm := GeoMeans(sums, p.Name)[grp]
			cols := make([]string, len(cellColumns))
			switch {
			case gm.Value == nil:
				cols[2] = "–" // no cell of the group has a ratio; the rows say why
			case gm.Cells < gm.Of:
				cols[2] = fmt.Sprintf("%s (%d of %d cells)", ratio(*gm.Value), gm.Cells, gm.Of)
			default:
				cols[2] = ratio(*gm.Value)
			}
			row = append(row, cols...)
		}
		g.rows = append(g.rows, row)
	}
	row := []string{"fixed exec overhead ms"}
	for _, p := range r.Platforms {
		if p.NotRun != "" {
			row = append(row, "not run")
			continue
		}
		cols := make([]string, len(cellColumns))
		cols[0] = overhead(r.Samples, p.Name, Native)
		cols[1] = overhead(r.Samples, p.Name, LayerFS)
		row = append(row, cols...)
	}
	g.rows = append(g.rows, row)
	coldNote := ""
	if len(r.Cold) > 0 {
		files := 0
		row := []string{"cold first read ms"}
		for _, p := range r.Platforms {
			cols := make([]string, len(cellColumns))
			for _, c := range r.Cold {
				if c.Platform == p.Name {
					cols, files = c.row(), max(files, c.Files)
				}
			}
			if p.NotRun != "" {
				cols = []string{"not run"}
			}
			row = append(row, cols...)
		}
		g.rows = append(g.rows, row)
		coldNote = fmt.Sprintf("Cold first read: every file of a committed %s-file tree read (find | xargs cat) by a new workspace, against the same tree checked out into a plain directory, the page cache dropped before each; the cells run warm.", count(float64(files)))
	}

	g.notes = r.notes(sums)
	if coldNote != "" {
		g.notes = append(g.notes, coldNote)
	}
	return g
}

func cellRow(p Platform, s Summary) []string {
	if p.NotRun != "" {
		return []string{"not run: " + p.NotRun}
	}
	cols := make([]string, len(cellColumns))
	total := s.Samples + s.NativeSamples
	switch {
	case total == 0:
		cols[0] = "not run"
		for i := 1; i < len(cols); i++ {
			cols[i] = "–"
		}
		return cols
	case s.Ineligible == total:
		cols[0] = "ineligible" // the reason is in the notes
		return cols
	}
	cols[0] = msOrFail(s.NativeMS)
	cols[1] = msOrFail(s.LayerFSMS)
	switch {
	case s.Ratio == nil:
		cols[2] = "FAIL"
	case s.RatioMin != nil && s.RatioMax != nil:
		cols[2] = fmt.Sprintf("%s [%.2f-%.2f]", ratio(*s.Ratio), *s.RatioMin, *s.RatioMax)
	default:
		cols[2] = ratio(*s.Ratio)
	}
	cols[3] = orDash(s.Requests, func(v float64) string { return count(v) })
	cols[4] = orDash(s.USPerRequest, func(v float64) string { return fmt.Sprintf("%.1f", v) })
	cols[5] = orDash(s.CommitMS, msText)
	cols[6] = orDash(s.OverlayBytes, bytesText)
	cols[7] = orDash(s.StoreBytes, bytesText)
	if s.Verified {
		cols[8] = "yes"
	} else {
		cols[8] = fmt.Sprintf("FAIL %d/%d", s.Failed+s.Ineligible, total)
	}
	return cols
}

// overhead is the median fixed exec overhead of an arm's Good samples on a
// platform, over all cells.
func overhead(samples []Sample, platform string, arm Arm) string {
	var v []float64
	for _, x := range samples {
		if x.Platform == platform && x.Arm == arm && x.Good() {
			v = append(v, ms(x.Overhead))
		}
	}
	if len(v) == 0 {
		return "–"
	}
	lo, hi := stats.MinMax(v)
	return fmt.Sprintf("%s [%s-%s]", msText(stats.Median(v)), msText(lo), msText(hi))
}

// notes are the lines under a table: what ran where, and why anything failed.
func (r Results) notes(sums []Summary) []string {
	var n []string
	if r.Machine != "" {
		n = append(n, "Machine: "+r.Machine)
	}
	if r.Command != "" {
		n = append(n, "Command: "+r.Command)
	}
	if !r.Date.IsZero() {
		n = append(n, "Date: "+r.Date.UTC().Format("2006-01-02 15:04 MST"))
	}
	for _, p := range r.Platforms {
		switch {
		case p.NotRun != "":
			n = append(n, fmt.Sprintf("%s: not run: %s", p.Name, p.NotRun))
		case p.Identity != nil:
			id := p.Identity
			line := fmt.Sprintf("%s: kernel %s, %d CPUs, %s memory", p.Name, id.Kernel, id.CPUs, bytesText(float64(id.MemoryBytes)))
			if id.Runtime != "" {
				line += ", " + id.Runtime
			}
			if id.Details != "" {
				line += ", " + id.Details
			}
			n = append(n, line)
		}
	}
	n = append(n, r.comparisons(sums)...)
	for _, s := range sums {
		for _, e := range s.Errors {
			n = append(n, fmt.Sprintf("%s on %s: %s", s.Cell, s.Platform, firstLine(e, 200)))
		}
	}
	return n
}

// comparisons are the notes of column groups compared with another
// (Platform.Against), per cell group: the ratio of their geometric means;
// then the geometric mean, over the cells, of the ratio of the two
// groups' LayerFS medians, and of their native medians. The native arms do
// the same work in both groups, so how far apart they are gauges the noise
// of the comparison; the LayerFS medians compared directly leave it out.
func (r Results) comparisons(sums []Summary) []string {
	var n []string
	for _, p := range r.Platforms {
		if p.Against == "" || p.NotRun != "" {
			continue
		}
		mine, theirs := GeoMeans(sums, p.Name), GeoMeans(sums, p.Against)
		other := map[string]Summary{}
		for _, s := range sums {
			if s.Platform == p.Against {
				other[s.Cell] = s
			}
		}
		for _, grp := range r.groups() {
			var layerfs, native []float64
			for _, s := range sums {
				o, ok := other[s.Cell]
				if s.Platform != p.Name || s.Group != grp || !ok {
					continue
				}
				if s.LayerFSMS != nil && o.LayerFSMS != nil {
					layerfs = append(layerfs, *s.LayerFSMS / *o.LayerFSMS)
				}
				if s.NativeMS != nil && o.NativeMS != nil {
					native = append(native, *s.NativeMS / *o.NativeMS)
				}
			}
			a, b := mine[grp], theirs[grp]
			label := "geometric mean"
			if grp != "" {
				label += " (" + grp + ")"
			}
			line := fmt.Sprintf("%s against %s, %s: ", p.Name, p.Against, label)
			switch {
			case a.Value == nil || b.Value == nil:
				line += "not comparable (no ratio on one side)"
			default:
				q := *a.Value / *b.Value
				line += fmt.Sprintf("%s against %s, ratio %.3f (%+.1f%%)", ratio(*a.Value), ratio(*b.Value), q, (q-1)*100)
				if a.Cells != b.Cells {
					line += fmt.Sprintf(" over %d and %d cells", a.Cells, b.Cells)
				}
			}
			n = append(n, line)
			if len(layerfs) > 0 && len(native) > 0 {
				n = append(n, fmt.Sprintf("%s over %s, %s of the medians' ratios: LayerFS %.3f over %d cells; native %.3f over %d cells (the same work in both: the noise)",
					p.Name, p.Against, label, stats.GeoMean(layerfs), len(layerfs), stats.GeoMean(native), len(native)))
			}
		}
	}
	return n
}

// groups are the cell groups of the run in the order of its cells.
func (r Results) groups() []string {
	var groups []string
	seen := map[string]bool{}
	for _, c := range r.Cells {
		if !seen[c.Group] {
			seen[c.Group] = true
			groups = append(groups, c.Group)
		}
	}
	return groups
}

// WriteMarkdown writes the cells table as GitHub Markdown, with its notes as
// a list below it.
func (r Results) WriteMarkdown(w io.Writer) error { return r.cellGrid().markdown(w) }

// WriteText writes the cells table aligned for a terminal.
func (r Results) WriteText(w io.Writer) error { return r.cellGrid().text(w) }

func (g grid) markdown(w io.Writer) error {
	var b strings.Builder
	b.WriteString("| " + strings.Join(mdEscape(g.header), " | ") + " |\n|")
	for i := range g.header {
		if i == 0 {
			b.WriteString("---|")
		} else {
			b.WriteString("---:|")
		}
	}
	b.WriteString("\n")
	for _, row := range g.rows {
		b.WriteString("| " + strings.Join(mdEscape(row), " | ") + " |\n")
	}
	if len(g.notes) > 0 {
		b.WriteString("\n")
		for _, n := range g.notes {
			b.WriteString("- " + strings.ReplaceAll(n, "\n", " ") + "\n")
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}

func (g grid) text(w io.Writer) error {
	width := make([]int, len(g.header))
	measure := func(row []string) {
		for i, c := range row {
			width[i] = max(width[i], utf8.RuneCountInString(c))
		}
	}
	multi := len(g.groups) > 1
	header := g.header
	if multi {
		// The group line names the platform; strip it from each column.
		header = append([]string(nil), g.header...)
		for _, s := range g.groups {
			for i := s.from; i < s.to; i++ {
				header[i] = strings.TrimPrefix(header[i], s.label+" ")
			}
		}
	}
	measure(header)
	for _, row := range g.rows {
		measure(row)
	}
	const gap = "  "
	var b strings.Builder
	if multi {
		// Widen the last column of a group when its label is wider than it.
		for _, s := range g.groups {
			w := 0
			for i := s.from; i < s.to; i++ {
				w += width[i] + len(gap)
			}
			w -= len(gap)
			if d := utf8.RuneCountInString(s.label) - w; d > 0 {
				width[s.to-1] += d
			}
		}
		lead := 0
		for i := 0; i < g.groups[0].from; i++ {
			lead += width[i] + len(gap)
		}
		line := pad("", lead-len(gap), false)
		for _, s := range g.groups {
			w := 0
			for i := s.from; i < s.to; i++ {
				w += width[i] + len(gap)
			}
			label := s.label + " " + strings.Repeat("─", max(0, w-len(gap)-utf8.RuneCountInString(s.label)-1))
			line += gap + pad(label, w-len(gap), false)
		}
		b.WriteString(strings.TrimRight(line, " ") + "\n")
	}
	writeRow := func(row []string) {
		var parts []string
		for i, c := range row {
			parts = append(parts, pad(c, width[i], i > 0))
		}
		b.WriteString(strings.TrimRight(strings.Join(parts, gap), " ") + "\n")
	}
	writeRow(header)
	total := 0
	for _, wd := range width {
		total += wd
	}
	b.WriteString(strings.Repeat("─", total+len(gap)*(len(width)-1)) + "\n")
	for _, row := range g.rows {
		writeRow(row)
	}
	if len(g.notes) > 0 {
		b.WriteString("\n")
		for _, n := range g.notes {
			b.WriteString(n + "\n")
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}

func pad(s string, w int, right bool) string {
	n := w - utf8.RuneCountInString(s)
	if n <= 0 {
		return s
	}
	if right {
		return strings.Repeat(" ", n) + s
	}
	return s + strings.Repeat(" ", n)
}

func mdEscape(row []string) []string {
	out := make([]string, len(row))
	for i, c := range row {
		out[i] = strings.ReplaceAll(strings.ReplaceAll(c, "|", `\|`), "\n", " ")
	}
	return out
}

func msOrFail(v *float64) string {
	if v == nil {
		return "FAIL"
	}
	return msText(*v)
}

func orDash(v *float64, f func(float64) string) string {
	if v == nil || math.IsNaN(*v) {
		return "–"
	}
	return f(*v)
}

// msText shows three significant figures at most, and no fake precision.
func msText(v float64) string {
	switch {
	case v < 10:
		return fmt.Sprintf("%.2f", v)
	case v < 100:
		return fmt.Sprintf("%.1f", v)
	}
	return count(v)
}

func ratio(v float64) string { return fmt.Sprintf("%.2fx", v) }

// count is v rounded, with thousands separators.
func count(v float64) string {
	n := int64(math.Round(v))
	neg := n < 0
	if neg {
		n = -n
	}
	s := fmt.Sprintf("%d", n)
	var b strings.Builder
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	if neg {
		return "-" + b.String()
	}
	return b.String()
}

// bytesText is a byte count in binary units.
func bytesText(v float64) string {
	units := []string{"B", "KiB", "MiB", "GiB", "TiB"}
	i := 0
	for v >= 1024 && i < len(units)-1 {
		v /= 1024
		i++
	}
	if i == 0 {
		return fmt.Sprintf("%.0f B", v)
	}
	return fmt.Sprintf("%.1f %s", v, units[i])
}

func firstLine(s string, limit int) string {
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		s = s[:i] + " …"
	}
	if utf8.RuneCountInString(s) > limit {
		r := []rune(s)
		s = string(r[:limit]) + "…"
	}
	return s
}
