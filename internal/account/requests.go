package account

import (
	"math/bits"
	"sync/atomic"
	"time"
)

// MaxKinds bounds the kinds of request a Requests tells apart.
const MaxKinds = 48

// Latency buckets are log-linear: 4 per power of two of nanoseconds.
const (
	subBuckets = 4
	numBuckets = 64 * subBuckets
)

func bucketOf(ns int64) int {
	if ns < subBuckets {
		return int(max(ns, 0))
	}
	e := bits.Len64(uint64(ns)) - 1 // ns in [2^e, 2^(e+1))
	sub := int(uint64(ns)>>(e-2)) & (subBuckets - 1)
	return e*subBuckets + sub
}

// bucketLow is the smallest latency in bucket b.
func bucketLow(b int) int64 {
	if b < subBuckets {
		return int64(b)
	}
	e, sub := b/subBuckets, b%subBuckets
	return int64(1)<<e + int64(sub)<<(e-2)
}

// Requests count a server's requests by kind (a small integer the server
// defines, below MaxKinds: fusefs's opcodes) with the time the server took
// on each, and a histogram of those times: atomics only, no locks. The
// zero value is ready.
type Requests struct {
	count [MaxKinds]atomic.Uint64
	ns    [MaxKinds]atomic.Uint64
	hist  [numBuckets]atomic.Uint64
}

// Record counts one request of kind served in d.
func (r *Requests) Record(kind int, d time.Duration) {
	ns := d.Nanoseconds()
	r.count[kind].Add(1)
	r.ns[kind].Add(uint64(ns))
	r.hist[bucketOf(ns)].Add(1)
}

// Snapshot returns the counts so far.
func (r *Requests) Snapshot() RequestStats {
	var s RequestStats
	for i := range s.Count {
		s.Count[i] = r.count[i].Load()
		s.Ns[i] = r.ns[i].Load()
	}
	for i := range s.Hist {
		s.Hist[i] = r.hist[i].Load()
	}
	return s
}

// RequestStats is a snapshot of Requests: per-kind counts and service
// time, and a latency histogram over all requests.
type RequestStats struct {
	Count [MaxKinds]uint64
	Ns    [MaxKinds]uint64
	Hist  [numBuckets]uint64
}

// Sub returns the requests made between an earlier snapshot and s.
func (s RequestStats) Sub(earlier RequestStats) RequestStats {
	var d RequestStats
	for i := range s.Count {
		d.Count[i] = s.Count[i] - earlier.Count[i]
		d.Ns[i] = s.Ns[i] - earlier.Ns[i]
	}
	for i := range s.Hist {
		d.Hist[i] = s.Hist[i] - earlier.Hist[i]
	}
	return d
}

// Add adds o's requests to s.
func (s *RequestStats) Add(o RequestStats) {
	for i := range s.Count {
		s.Count[i] += o.Count[i]
		s.Ns[i] += o.Ns[i]
	}
	for i := range s.Hist {
		s.Hist[i] += o.Hist[i]
	}
}

// Requests is the total number of requests.
func (s RequestStats) Requests() uint64 {
	var n uint64
	for _, c := range s.Count {
		n += c
	}
	return n
}

// ServiceTime is the total time spent serving them.
func (s RequestStats) ServiceTime() time.Duration {
	var n uint64
	for _, c := range s.Ns {
		n += c
	}
	return time.Duration(n)
}

// Quantile estimates the q-quantile (0..1) of per-request service time
// from the histogram (to within a quarter octave).
func (s RequestStats) Quantile(q float64) time.Duration {
	total := uint64(0)
	for _, c := range s.Hist {
		total += c
	}
	if total == 0 {
		return 0
	}
	rank := uint64(q * float64(total))
	var seen uint64
	for b, c := range s.Hist {
		seen += c
		if seen > rank {
			lo, hi := bucketLow(b), bucketLow(b+1)
			return time.Duration((lo + hi) / 2)
		}
	}
	return 0
}
