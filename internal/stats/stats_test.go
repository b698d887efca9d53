package stats

import (
	"math"
	"testing"
	"time"
)

func TestMedianPercentile(t *testing.T) {
	tests := []struct {
		name     string
		xs       []float64
		p50, p95 float64
	}{
		{"one", []float64{7}, 7, 7},
		{"odd", []float64{5, 1, 3}, 3, 4.8},
		{"even", []float64{4, 1, 3, 2}, 2.5, 3.85},
		{"five", []float64{10, 20, 30, 40, 50}, 30, 48},
	}
	for _, tc := range tests {
		if got := Median(tc.xs); math.Abs(got-tc.p50) > 1e-9 {
			t.Errorf("%s: Median = %v, want %v", tc.name, got, tc.p50)
		}
		if got := Percentile(tc.xs, 95); math.Abs(got-tc.p95) > 1e-9 {
			t.Errorf("%s: p95 = %v, want %v", tc.name, got, tc.p95)
		}
	}
	if !math.IsNaN(Median(nil)) || !math.IsNaN(GeoMean(nil)) {
		t.Error("no values must give NaN, not zero")
	}
	if got := GeoMean([]float64{1, 4}); math.Abs(got-2) > 1e-9 {
		t.Errorf("GeoMean(1,4) = %v, want 2", got)
	}
	if !math.IsNaN(GeoMean([]float64{1, 0})) {
		t.Error("GeoMean with a zero must be NaN")
	}
	xs := []float64{3, 1, 2}
	Median(xs)
	if xs[0] != 3 {
		t.Error("Median sorted its input")
	}
}

func TestMedianDuration(t *testing.T) {
	for _, tc := range []struct {
		in   []time.Duration
		want time.Duration
	}{
		{nil, 0},
		{[]time.Duration{3}, 3},
		{[]time.Duration{5, 1, 3}, 3},
		{[]time.Duration{40, 10, 30, 20}, 25},
	} {
		if got := MedianDuration(tc.in); got != tc.want {
			t.Errorf("MedianDuration(%v) = %v, want %v", tc.in, got, tc.want)
		}
	}
}
