package report

import (
	"encoding/json"
	"math"

	"layerfs.dev/layerfs/internal/stats"
)

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
	s := Stats{N: len(xs), P50: stats.Median(xs), P95: stats.Percentile(xs, 95)}
	s.Min, s.Max = stats.MinMax(xs)
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

// MarshalJSON writes a figure that is NaN (no values, or the spread of one)
// as null: JSON has no NaN.
func (s Stats) MarshalJSON() ([]byte, error) { return json.Marshal(s.nullable()) }

// nullableStats is Stats with its NaN figures as nil.
type nullableStats struct {
	N      int      `json:"n"`
	P50    *float64 `json:"p50"`
	P95    *float64 `json:"p95"`
	Min    *float64 `json:"min"`
	Max    *float64 `json:"max"`
	Mean   *float64 `json:"mean"`
	StdDev *float64 `json:"stddev"`
}

func (s Stats) nullable() nullableStats {
	return nullableStats{s.N, finite(s.P50), finite(s.P95), finite(s.Min), finite(s.Max), finite(s.Mean), finite(s.StdDev)}
}
