//go:build linux

package sandbox

import (
	"testing"
	"time"
)

func TestQuantile(t *testing.T) {
	ds := []int{5, 1, 4, 2, 3, 10, 9, 8, 7, 6}
	var in []time.Duration
	for _, d := range ds {
		in = append(in, time.Duration(d))
	}
	if got := quantile(in, 0.5); got != 5 {
		t.Errorf("median = %v, want 5", got)
	}
	if got := quantile(in, 0.95); got != 10 {
		t.Errorf("p95 = %v, want 10", got)
	}
	if got := quantile(in, 0.1); got != 1 {
		t.Errorf("p10 = %v, want 1", got)
	}
}
