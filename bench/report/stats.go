package report

import (
	"math"
	"slices"
)

// Median is the middle of xs, or the mean of the two middle values for an
// even count; NaN for none.
func Median(xs []float64) float64 { return Percentile(xs, 50) }

// Percentile is the p-th percentile (0..100) of xs by linear interpolation
// between the closest ranks (the R-7 / spreadsheet definition), so p50 is
// the median and p100 the maximum; NaN for none.
func Percentile(xs []float64, p float64) float64 {
	if len(xs) == 0 {
		return math.NaN()
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	pos := p / 100 * float64(len(s)-1)
	lo := int(math.Floor(pos))
	hi := int(math.Ceil(pos))
	if lo < 0 {
		lo = 0
	}
	if hi >= len(s) {
		hi = len(s) - 1
	}
	return s[lo] + (s[hi]-s[lo])*(pos-float64(lo))
}

// MinMax returns the smallest and largest of xs; NaN, NaN for none.
func MinMax(xs []float64) (lo, hi float64) {
	if len(xs) == 0 {
		return math.NaN(), math.NaN()
	}
	return slices.Min(xs), slices.Max(xs)
}

// GeoMean is the geometric mean of positive xs; NaN for none or for any
// value that is not positive.
func GeoMean(xs []float64) float64 {
	if len(xs) == 0 {
		return math.NaN()
	}
	var sum float64
	for _, x := range xs {
		if !(x > 0) {
			return math.NaN()
		}
		sum += math.Log(x)
	}
	return math.Exp(sum / float64(len(xs)))
}

// Stats describes a set of values.
type Stats struct {
	N      int     `json:"n"`
	P50    float64 `json:"p50"`
	P95    float64 `json:"p95"`
	Min    float64 `json:"min"`
	Max    float64 `json:"max"`
	Mean   float64 `json:"mean"`
	StdDev float64 `json:"stddev"` // sample standard deviation (n-1)
}

// Describe computes Stats; with no values every figure is NaN.
func Describe(xs []float64) Stats {
	s := Stats{N: len(xs), P50: Median(xs), P95: Percentile(xs, 95)}
	s.Min, s.Max = MinMax(xs)
	s.Mean, s.StdDev = math.NaN(), math.NaN()
	if len(xs) > 0 {
		var sum float64
		for _, x := range xs {
			sum += x
		}
		s.Mean = sum / float64(len(xs))
	}
	if len(xs) > 1 {
		var ss float64
		for _, x := range xs {
			ss += (x - s.Mean) * (x - s.Mean)
		}
		s.StdDev = math.Sqrt(ss / float64(len(xs)-1))
	}
	return s
}
