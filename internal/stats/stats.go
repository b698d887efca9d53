package stats

import (
	"math"
	"slices"
	"time"
)

// Median is the middle of xs, or the mean of the two middle values for an
// even count; NaN for none.
func Median(xs []float64) float64 { return Percentile(xs, 50) }

// Percentile is the p-th percentile (0..100) of xs by linear interpolation
// between the closest ranks, so p50 is the median and p100 the maximum;
// NaN for none.
func Percentile(xs []float64, p float64) float64 {
	if len(xs) == 0 {
		return math.NaN()
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	pos := p / 100 * float64(len(s)-1)
	lo := min(max(int(math.Floor(pos)), 0), len(s)-1)
	hi := min(max(int(math.Ceil(pos)), 0), len(s)-1)
	return s[lo] + (s[hi]-s[lo])*(pos-float64(lo))
}

// MedianDuration is Median for durations; 0 for none.
func MedianDuration(ds []time.Duration) time.Duration { return PercentileDuration(ds, 50) }

// PercentileDuration is Percentile for durations; 0 for none.
func PercentileDuration(ds []time.Duration, p float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	xs := make([]float64, len(ds))
	for i, d := range ds {
		xs[i] = float64(d)
	}
	return time.Duration(math.Round(Percentile(xs, p)))
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
