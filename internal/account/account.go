package account

import (
	"context"
	"sync/atomic"
	"time"
)

// Figure names one count of Store work.
type Figure int

// The Store work an account counts.
const (
	Transactions     Figure = iota // SQL transactions (a batch's dedup probes count as one)
	TxNs                           // time inside them, in nanoseconds
	Statements                     // SQL statements
	Rows                           // rows read plus rows changed
	PackBytesWritten               // pack bytes appended (records, headers included)
	PackSyncs                      // packs made durable (fsynced or uploaded)
	PackBytesRead                  // chunk payload bytes read from packs (files or the bucket)
	ChunksWritten                  // chunks appended to packs
	ChunksReused                   // chunks found stored already (deduplicated)
	ChunksRead                     // chunks read and verified
	TreeCacheHits                  // trees found decoded in the Store's cache
	TreeCacheMisses                // trees read and decoded
	CacheBytes                     // bytes of contents placed in the Store's cache
	numFigures
)

// Account counts what one request cost; see the package comment.
type Account struct {
	parent *Account
	n      [numFigures]atomic.Int64
	fuse   atomic.Pointer[Requests] // made with the first request counted
}

// New returns an empty account whose figures are added to parent's too
// (nil: none).
func New(parent *Account) *Account { return &Account{parent: parent} }

// Add adds n to figure f of a and of its parents.
func (a *Account) Add(f Figure, n int64) {
	for ; a != nil; a = a.parent {
		a.n[f].Add(n)
	}
}

// AddTally adds every figure of t to a and its parents.
func (a *Account) AddTally(t *Tally) {
	for ; a != nil; a = a.parent {
		for f, n := range t {
			if n != 0 {
				a.n[f].Add(n)
			}
		}
	}
}

// Charge adds n to figure f of total, the daemon's (which is never a
// request account's parent), and of the account ctx carries, if any.
func Charge(ctx context.Context, total *Account, f Figure, n int64) {
	total.Add(f, n)
	From(ctx).Add(f, n)
}

// Get returns figure f.
func (a *Account) Get(f Figure) int64 {
	if a == nil {
		return 0
	}
	return a.n[f].Load()
}

// RecordRequest counts one FUSE request of kind (the server's opcode)
// served in d, in a and its parents.
func (a *Account) RecordRequest(kind int, d time.Duration) {
	for ; a != nil; a = a.parent {
		r := a.fuse.Load()
		if r == nil {
			a.fuse.CompareAndSwap(nil, new(Requests))
			r = a.fuse.Load()
		}
		r.Record(kind, d)
	}
}

// FUSE returns a snapshot of the FUSE requests counted.
func (a *Account) FUSE() RequestStats {
	if a == nil {
		return RequestStats{}
	}
	r := a.fuse.Load()
	if r == nil {
		return RequestStats{}
	}
	return r.Snapshot()
}

// Figures are an account's counts of Store work at one moment.
type Figures struct {
	Transactions     int64
	TxTime           time.Duration
	Statements       int64
	Rows             int64
	PackBytesWritten int64
	PackSyncs        int64
	PackBytesRead    int64
	ChunksWritten    int64
	ChunksReused     int64
	ChunksRead       int64
	TreeCacheHits    int64
	TreeCacheMisses  int64
	CacheBytes       int64
}

// Figures returns the Store work counted so far.
func (a *Account) Figures() Figures {
	return Figures{
		Transactions:     a.Get(Transactions),
		TxTime:           time.Duration(a.Get(TxNs)),
		Statements:       a.Get(Statements),
		Rows:             a.Get(Rows),
		PackBytesWritten: a.Get(PackBytesWritten),
		PackSyncs:        a.Get(PackSyncs),
		PackBytesRead:    a.Get(PackBytesRead),
		ChunksWritten:    a.Get(ChunksWritten),
		ChunksReused:     a.Get(ChunksReused),
		ChunksRead:       a.Get(ChunksRead),
		TreeCacheHits:    a.Get(TreeCacheHits),
		TreeCacheMisses:  a.Get(TreeCacheMisses),
		CacheBytes:       a.Get(CacheBytes),
	}
}

// Tally collects the figures of one unit of work on one goroutine (a
// transaction's statements, say) without atomics, to be added to the
// accounts it belongs to at once (AddTally).
type Tally [numFigures]int64

type contextKey struct{}

// With returns a context that carries a.
func With(ctx context.Context, a *Account) context.Context {
	return context.WithValue(ctx, contextKey{}, a)
}

// From returns the account ctx carries, or nil.
func From(ctx context.Context) *Account {
	a, _ := ctx.Value(contextKey{}).(*Account)
	return a
}

// Open starts the account of a request made with ctx: a new account, under
// the one ctx carries if any, and a context that carries it.
func Open(ctx context.Context) (context.Context, *Account) {
	a := New(From(ctx))
	return With(ctx, a), a
}
