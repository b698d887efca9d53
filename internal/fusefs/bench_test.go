package fusefs_test

import (
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"layerfs.dev/layerfs/internal/commit"
	"layerfs.dev/layerfs/internal/fusefs"
	"layerfs.dev/layerfs/internal/overlay"
	"layerfs.dev/layerfs/internal/store"
	"layerfs.dev/layerfs/internal/testenv"
)

// big100k is a Store holding a committed tree of 100,000 files (100
// directories of 1,000), built once per test binary.
var big100k struct {
	once sync.Once
	db   *store.DB
	root store.ID
	dir  string
	err  error
}

func tree100k(b *testing.B) (*store.DB, store.ID, string) {
	testenv.RequireFUSE(b)
	big100k.once.Do(func() {
		ctx := b.Context()
		dir, err := os.MkdirTemp("", "layerfs-100k-")
		if err != nil {
			big100k.err = err
			return
		}
		big100k.dir = dir
		src := filepath.Join(dir, "src")
		for d := 0; d < 100; d++ {
			sub := filepath.Join(src, fmt.Sprintf("d%03d", d))
			if err := os.MkdirAll(sub, 0o755); err != nil {
				big100k.err = err
				return
			}
			for f := 0; f < 1000; f++ {
				if err := os.WriteFile(filepath.Join(sub, fmt.Sprintf("f%04d", f)), []byte(fmt.Sprint(d, f)), 0o644); err != nil {
					big100k.err = err
					return
				}
			}
		}
		db, err := store.Init(ctx, filepath.Join(dir, "store"), store.Options{})
		if err != nil {
			big100k.err = err
			return
		}
		bt, err := db.NewBatch(ctx)
		if err != nil {
			big100k.err = err
			return
		}
		root, _, err := commit.CaptureDir(ctx, bt, db, src, nil)
		if err == nil {
			err = bt.Flush(ctx)
		}
		bt.Abort()
		big100k.db, big100k.root, big100k.err = db, root, err
		os.RemoveAll(src)
	})
	require.NoError(b, big100k.err)
	return big100k.db, big100k.root, big100k.dir
}

// BenchmarkMount100k measures making a workspace over a 100,000-file tree
// and mounting it (lazy: only the root tree is read).
func BenchmarkMount100k(b *testing.B) {
	db, root, dir := tree100k(b)
	ctx := b.Context()
	mnt := filepath.Join(dir, "mnt")
	os.MkdirAll(mnt, 0o755)
	for i := 0; b.Loop(); i++ {
		ov, err := overlay.Open(ctx, overlay.Config{Lower: db, Root: root, UpperDir: filepath.Join(dir, "ws", fmt.Sprint(i), "upper")})
		require.NoError(b, err)
		m, err := fusefs.Mount(ctx, mnt, ov, fusefs.Options{})
		require.NoError(b, err)
		b.StopTimer()
		require.NoError(b, m.Unmount(ctx))
		b.StartTimer()
	}
}

// BenchmarkCommitOneOf100k measures Changes plus building and flushing the
// commit after one file of a 100,000-file tree changed through the mount.
func BenchmarkCommitOneOf100k(b *testing.B) {
	db, root, dir := tree100k(b)
	ctx := b.Context()
	mnt := filepath.Join(dir, "mnt1")
	os.MkdirAll(mnt, 0o755)
	ov, err := overlay.Open(ctx, overlay.Config{Lower: db, Root: root, UpperDir: filepath.Join(dir, "ws", "c", "upper")})
	require.NoError(b, err)
	m, err := fusefs.Mount(ctx, mnt, ov, fusefs.Options{})
	require.NoError(b, err)
	defer m.Unmount(ctx)
	var tChanges, tBuild, tFlush time.Duration
	for i := 0; b.Loop(); i++ {
		b.StopTimer()
		require.NoError(b, os.WriteFile(filepath.Join(mnt, "d042", "f0042"), []byte(fmt.Sprint("changed ", i)), 0o644))
		b.StartTimer()
		t0 := time.Now()
		cs, err := ov.Changes(ctx)
		tChanges += time.Since(t0)
		require.NoError(b, err)
		bt, err := db.NewBatch(ctx)
		require.NoError(b, err)
		t1 := time.Now()
		id, _, err := commit.Build(ctx, bt, db, cs.Base, cs.Changes, nil)
		t2 := time.Now()
		tBuild += t2.Sub(t1)
		if err == nil {
			err = bt.Flush(ctx)
		}
		tFlush += time.Since(t2)
		bt.Abort()
		require.NoError(b, err)
		ov.MarkCommitted(id, cs)
		if len(cs.Changes) > 2 {
			b.Fatalf("%d changes for one changed file: %+v", len(cs.Changes), cs.Changes)
		}
	}
	n := float64(b.N)
	b.ReportMetric(float64(tChanges.Microseconds())/n, "µs-changes/op")
	b.ReportMetric(float64(tBuild.Microseconds())/n, "µs-build/op")
	b.ReportMetric(float64(tFlush.Microseconds())/n, "µs-flush/op")
}
