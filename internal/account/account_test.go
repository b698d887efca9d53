package account

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestChargeCountsOnceInEach: work charged under a request's context is in
// the totals once and in the request's account (and its parents) once,
// and in no other request's; work of no request is in the totals only.
func TestChargeCountsOnceInEach(t *testing.T) {
	var total Account
	ctxA, a := Open(context.Background())
	ctxInner, inner := Open(ctxA) // an operation A makes
	ctxB, b := Open(context.Background())

	var wg sync.WaitGroup
	for range 100 {
		wg.Go(func() { Charge(ctxA, &total, Statements, 1) })
		wg.Go(func() { Charge(ctxInner, &total, Statements, 2) })
		wg.Go(func() { Charge(ctxB, &total, Statements, 3) })
		wg.Go(func() { Charge(context.Background(), &total, Statements, 4) })
	}
	wg.Wait()
	assert.EqualValues(t, 200, inner.Get(Statements), "the inner operation")
	assert.EqualValues(t, 300, a.Get(Statements), "A: its own and its inner operation's")
	assert.EqualValues(t, 300, b.Get(Statements), "B")
	assert.EqualValues(t, 1000, total.Get(Statements), "the totals: A, B and the work of none")
	assert.Zero(t, a.Get(Rows), "a figure nothing added to")
}

// TestNilAccount: a context without an account yields nil, which counts
// nothing and reads as zero.
func TestNilAccount(t *testing.T) {
	a := From(context.Background())
	require.Nil(t, a)
	a.Add(Rows, 5)
	a.RecordRequest(1, time.Millisecond)
	var tally Tally
	tally[Rows] = 3
	a.AddTally(&tally)
	assert.Zero(t, a.Get(Rows))
	assert.Equal(t, Figures{}, a.Figures())
	assert.Zero(t, a.FUSE().Requests())
}

// TestTally: a tally adds every figure at once, to the account and its
// parent.
func TestTally(t *testing.T) {
	parent := New(nil)
	a := New(parent)
	var tally Tally
	tally[Transactions], tally[Statements], tally[TxNs] = 1, 7, int64(time.Millisecond)
	a.AddTally(&tally)
	for _, acc := range []*Account{a, parent} {
		f := acc.Figures()
		assert.Equal(t, Figures{Transactions: 1, Statements: 7, TxTime: time.Millisecond}, f)
	}
}

// TestRequests: counts and service time by kind, and the median from the
// histogram to within a quarter octave.
func TestRequests(t *testing.T) {
	a := New(nil)
	for range 90 {
		a.RecordRequest(3, 10*time.Microsecond)
	}
	for range 10 {
		a.RecordRequest(5, time.Millisecond)
	}
	s := a.FUSE()
	assert.EqualValues(t, 100, s.Requests())
	assert.EqualValues(t, 90, s.Count[3])
	assert.Equal(t, 900*time.Microsecond+10*time.Millisecond, s.ServiceTime())
	p50 := s.Quantile(0.5)
	assert.InDelta(t, float64(10*time.Microsecond), float64(p50), float64(10*time.Microsecond)/4, "p50 %v", p50)
	d := s.Sub(RequestStats{})
	d.Add(s)
	assert.EqualValues(t, 200, d.Requests())
	assert.Zero(t, RequestStats{}.Quantile(0.5))
}
