// Package report is the data model and the rendering of bench results, so
// that the bench runner only fills records.
//
// A Sample is one timed run of one cell on one platform and arm ("layerfs",
// or "native": the same body in a plain directory on the same disk through
// the same sandbox), holding everything CELLS.md asks a sample to record.
// The runner appends each completed sample to a JSON-lines Log, so an
// interrupted run keeps what it measured, and gathers a run in Results.
//
// Summarize reduces Results to one Summary per cell and platform. Medians,
// minima and maxima are taken over Good samples only (ran, exited 0,
// verified on the workspace and on its commit); samples that are not Good
// are counted, their reasons listed, and the cell shows FAIL; a figure with
// no Good sample is null, never zero. The ratio is the LayerFS median over
// the native median, and its range is the fastest and slowest LayerFS
// sample over that same native median, so the range always brackets the
// ratio; the native arm's own spread is reported beside it. Geometric means
// are per cell group, so the twelve cells keep their own figure when
// extended cells run beside them.
//
// Renderings: summary.json (an array, one object per cell and platform),
// a Markdown table and the same table aligned for terminals (cells as rows,
// a column group per platform, a geometric mean row and the fixed exec
// overhead per platform; a platform that did not run shows "not run:
// <reason>" and no numbers), and a PNG chart of the ratios with a 1.0
// reference line (gonum.org/v1/plot, fonts embedded, no system fonts
// needed). Session and scale figures (workspace open/close, warm exec
// latency, throughput, fork + create, idle memory) are SessionFigure
// records with p50/p95 by linear interpolation between closest ranks.
package report
