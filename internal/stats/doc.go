// Package stats holds the one definition of each summary figure every
// bench prints: the median and percentiles (linear interpolation between
// the closest ranks, the R-7 definition, so the median of an even count is
// the mean of the two middle values), the geometric mean of ratios, and the
// range. Machines are noisy, so benches quote these, never single times.
package stats
