package report

import (
	"fmt"
	"io"
	"math"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
)

// ChartDPI is the resolution of the PNG chart; sizes are given in pixels.
const ChartDPI = 96

// Default chart size in pixels.
const (
	ChartWidth  = 1200
	ChartHeight = 600
)

// WriteChart draws the LayerFS/native ratio of every cell on every platform
// that ran as grouped bars with min-max whiskers and the value on top, a
// dashed reference line at 1.0, and writes it as a width x height PNG. A
// cell with no ratio (failed, ineligible) gets a label instead of a bar; a
// platform that did not run is named in the legend and draws nothing.
func (r Results) WriteChart(w io.Writer, width, height int) error {
	if width <= 0 || height <= 0 {
		return fmt.Errorf("chart size %dx%d: want positive pixels", width, height)
	}
	r = r.complete()
	sums := r.Summarize()
	by := map[[2]string]Summary{}
	for _, s := range sums {
		by[[2]string{s.Platform, s.Cell}] = s
	}
	p := plot.New()
	p.Title.Text = "LayerFS / native command time per cell (bar: medians; whisker: fastest and slowest LayerFS sample)"
	p.Y.Label.Text = "ratio to native"
	p.Y.Min = 0
	p.Legend.Top = true

	ids := make([]string, len(r.Cells))
	for i, c := range r.Cells {
		ids[i] = c.ID
	}
	p.NominalX(ids...)

	var ran []Platform
	for _, pl := range r.Platforms {
		if pl.NotRun == "" {
			ran = append(ran, pl)
		} else {
			p.Legend.Add(pl.Name + ": not run (" + firstLine(pl.NotRun, 60) + ")")
		}
	}
	n := max(1, len(ran))
	// Bars are sized in canvas units; the plot area is roughly 90% of the
	// image, each cell gets a slot and the platforms share 80% of it.
	slot := vg.Length(float64(width)/ChartDPI) * vg.Inch * 0.9 / vg.Length(max(1, len(r.Cells)))
	barW := slot * 0.8 / vg.Length(n)
	step := 0.8 / float64(n) // the same in data units

	ymax := 1.5
	for k, pl := range ran {
		vals := make(plotter.Values, len(r.Cells))
		var whiskers plotter.XYs
		var errs plotter.YErrors
		var labels plotter.XYLabels
		x0 := -0.4 + step*(float64(k)+0.5)
		for i, c := range r.Cells {
			s := by[[2]string{pl.Name, c.ID}]
			x := float64(i) + x0
			if s.Ratio == nil {
				labels.XYs = append(labels.XYs, plotter.XY{X: x, Y: 0.05})
				labels.Labels = append(labels.Labels, missingLabel(s))
				continue
			}
			vals[i] = *s.Ratio
			top := *s.Ratio
			if s.RatioMin != nil && s.RatioMax != nil {
				whiskers = append(whiskers, plotter.XY{X: x, Y: *s.Ratio})
				errs = append(errs, struct{ Low, High float64 }{*s.Ratio - *s.RatioMin, *s.RatioMax - *s.Ratio})
				top = math.Max(top, *s.RatioMax)
			}
			ymax = math.Max(ymax, top)
			labels.XYs = append(labels.XYs, plotter.XY{X: x, Y: top})
			labels.Labels = append(labels.Labels, fmt.Sprintf("%.2f", *s.Ratio))
		}
		bars, err := plotter.NewBarChart(vals, barW)
		if err != nil {
			return fmt.Errorf("chart: %w", err)
		}
		bars.XMin = x0
		bars.LineStyle.Width = 0
		bars.Color = plotutil.Color(k)
		p.Add(bars)
		p.Legend.Add(pl.Name, bars)
		if len(whiskers) > 0 {
			eb, err := plotter.NewYErrorBars(struct {
				plotter.XYs
				plotter.YErrors
			}{whiskers, errs})
			if err != nil {
				return fmt.Errorf("chart: %w", err)
			}
			eb.CapWidth = barW / 3
			p.Add(eb)
		}
		if len(labels.XYs) > 0 {
			lb, err := plotter.NewLabels(labels)
			if err != nil {
				return fmt.Errorf("chart: %w", err)
			}
			for i := range lb.TextStyle {
				lb.TextStyle[i].Font.Size = vg.Points(8)
				lb.TextStyle[i].XAlign = draw.XCenter
			}
			lb.Offset = vg.Point{Y: vg.Points(4)}
			p.Add(lb)
		}
	}
	one := plotter.NewFunction(func(float64) float64 { return 1 })
	one.Dashes = []vg.Length{vg.Points(4), vg.Points(3)}
	one.Width = vg.Points(1)
	p.Add(one)
	p.Legend.Add("1.0 = native", one)
	p.Y.Max = ymax * 1.15
	p.X.Min, p.X.Max = -0.6, float64(len(r.Cells))-0.4

	c := vgimg.NewWith(
		vgimg.UseWH(vg.Length(float64(width)/ChartDPI)*vg.Inch, vg.Length(float64(height)/ChartDPI)*vg.Inch),
		vgimg.UseDPI(ChartDPI),
	)
	p.Draw(draw.New(c))
	if _, err := (vgimg.PngCanvas{Canvas: c}).WriteTo(w); err != nil {
		return fmt.Errorf("write chart: %w", err)
	}
	return nil
}

func missingLabel(s Summary) string {
	total := s.Samples + s.NativeSamples
	switch {
	case total == 0:
		return "not run"
	case s.Ineligible == total:
		return "n/a"
	}
	return "FAIL"
}
