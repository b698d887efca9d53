package account

import (
	"context"
	"testing"
	"time"
)

// BenchmarkOpen: what a request pays to open its account and read its
// figures for the receipt.
func BenchmarkOpen(b *testing.B) {
	ctx := context.Background()
	for b.Loop() {
		_, a := Open(ctx)
		_ = a.Figures()
		_ = a.FUSE()
	}
}

// BenchmarkCharge: one count of Store work, in the totals and in the
// account of a request's context (a context a few values deep, as an
// HTTP request's is).
func BenchmarkCharge(b *testing.B) {
	var total Account
	ctx := context.Background()
	for i := range 6 {
		ctx = context.WithValue(ctx, struct{ n int }{i}, i)
	}
	ctx, _ = Open(ctx)
	for b.Loop() {
		Charge(ctx, &total, Statements, 1)
	}
}

// BenchmarkRecordRequest: one FUSE request counted in an account.
func BenchmarkRecordRequest(b *testing.B) {
	a := New(nil)
	for b.Loop() {
		a.RecordRequest(3, 20*time.Microsecond)
	}
}
