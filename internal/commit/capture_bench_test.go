package commit

import (
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// BenchmarkCapture64MiB captures one 64 MiB random file into a fresh store,
// flush (fsync and index commit) included.
func BenchmarkCapture64MiB(b *testing.B) {
	dir := b.TempDir()
	require.NoError(b, os.WriteFile(filepath.Join(dir, "random"), randBytes(9, 64<<20), 0o644))
	b.SetBytes(64 << 20)
	ctx := b.Context()
	var tcap, tflush time.Duration
	cpu0 := cpuTime()
	for b.Loop() {
		b.StopTimer()
		db := newDB(b)
		b.StartTimer()
		bt, err := db.NewBatch(ctx)
		require.NoError(b, err)
		t0 := time.Now()
		_, _, err = CaptureDir(ctx, bt, db, dir, nil)
		require.NoError(b, err)
		t1 := time.Now()
		require.NoError(b, bt.Flush(ctx))
		tcap += t1.Sub(t0)
		tflush += time.Since(t1)
		bt.Abort()
		// Free the store's page cache for the next round: on a VM, pages
		// the guest never touched cost a slow first fault, which would
		// otherwise dominate every round.
		b.StopTimer()
		require.NoError(b, db.Close())
		require.NoError(b, os.RemoveAll(db.Dir()))
		b.StartTimer()
	}
	b.ReportMetric(float64((cpuTime()-cpu0).Milliseconds())/float64(b.N), "cpu-ms/op")
	b.ReportMetric(float64(tcap.Milliseconds())/float64(b.N), "capture-ms/op")
	b.ReportMetric(float64(tflush.Milliseconds())/float64(b.N), "flush-ms/op")
}

// cpuTime is the process's user and system time so far: on a shared,
// busy machine it says more than wall time.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkCaptureSmallFiles captures 10,000 small files in 100
// directories into a fresh store, flush included.
func BenchmarkCaptureSmallFiles(b *testing.B) {
	dir := b.TempDir()
	for i := range 10000 {
		sub := filepath.Join(dir, "d"+strconv.Itoa(i%100))
		require.NoError(b, os.MkdirAll(sub, 0o755))
		require.NoError(b, os.WriteFile(filepath.Join(sub, "f"+strconv.Itoa(i)), randBytes(uint64(i), 200+i%2000), 0o644))
	}
	ctx := b.Context()
	cpu0 := cpuTime()
	for b.Loop() {
		b.StopTimer()
		db := newDB(b)
		b.StartTimer()
		bt, err := db.NewBatch(ctx)
		require.NoError(b, err)
		_, _, err = CaptureDir(ctx, bt, db, dir, nil)
		require.NoError(b, err)
		require.NoError(b, bt.Flush(ctx))
		bt.Abort()
	}
	b.ReportMetric(float64((cpuTime()-cpu0).Milliseconds())/float64(b.N), "cpu-ms/op")
	b.ReportMetric(10000/b.Elapsed().Seconds()*float64(b.N), "files/s")
}
