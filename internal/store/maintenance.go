package store

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"golang.org/x/sys/unix"

	"layerfs.dev/layerfs/internal/flock"
	"layerfs.dev/layerfs/internal/store/maintenance"
)

// The Store's maintenance, GC and fsck, is package maintenance's; these
// are its names in the Store's vocabulary.
type (
	GCOptions   = maintenance.GCOptions
	GCStats     = maintenance.GCStats
	Problem     = maintenance.Problem
	FsckReport  = maintenance.FsckReport
	FsckOptions = maintenance.FsckOptions
)

// Defaults of GCOptions.
const (
	DefaultCompactRatio = maintenance.DefaultCompactRatio
	DefaultGCGrace      = maintenance.DefaultGCGrace
)

// GC deletes everything no root reaches and reclaims its space (package
// maintenance, Store.GC: roots, compaction, what a shared Store keeps).
// On the embedded Store it needs the Store to itself, else it fails fast
// with ErrBusy; it refuses to delete anything when a reachable object is
// missing or corrupt (run Fsck). Every step is crash safe.
func (db *DB) GC(ctx context.Context, opts GCOptions) (GCStats, error) {
	if err := db.check(); err != nil {
		return GCStats{}, err
	}
	return db.maintained().GC(ctx, opts)
}

// Fsck checks the whole Store, every reference, object, chunk, pack range
// and cache file, and reports each problem (package maintenance,
// Store.Fsck); the error is for failures to run the check. progress, if
// not nil, is called with the objects and chunks checked so far and their
// total.
func (db *DB) Fsck(ctx context.Context, progress func(done, total int)) (FsckReport, error) {
	return db.FsckWith(ctx, FsckOptions{Progress: progress})
}

// FsckWith is Fsck with opts.
func (db *DB) FsckWith(ctx context.Context, opts FsckOptions) (FsckReport, error) {
	if err := db.check(); err != nil {
		return FsckReport{}, err
	}
	return db.maintained().FsckWith(ctx, opts)
}

// RepairCache evicts the cache files rep found damaged (problems of kind
// "cache"), so that their contents are made again from the packs on next
// use, and returns how many it evicted.
func (db *DB) RepairCache(rep FsckReport) (int, error) {
	if err := db.check(); err != nil {
		return 0, err
	}
	return db.maintained().RepairCache(rep)
}

// maintained is db as its maintenance sees it.
func (db *DB) maintained() *maintenance.Store {
	return &maintenance.Store{
		Dir: db.dir, Node: db.node, IndexFile: dbFile,
		PacksDir: db.PacksDir(), CacheDir: db.CacheDir(),
		MaxPackSize: db.opts.MaxPackSize, Log: db.log, Total: &db.total,
		Packs: db.packs, Bucket: db.bucket, Cache: db.cache,
		WithTx: db.withTx,
		ExecWriter: func(ctx context.Context, q string) error {
			_, err := db.w.ExecContext(ctx, q)
			return err
		},
		LockExclusive: db.lockExclusive,
		ReadLock: func() func() {
			db.gcMu.RLock()
			return db.gcMu.RUnlock
		},
		ReadChunk: db.readChunk,
		CheckCacheFile: func(ctx context.Context, c maintenance.Content, f *os.File) error {
			return db.checkCacheFile(ctx, Content(c), f)
		},
	}
}

// lockExclusive takes the store for GC: no unflushed batch in this process
// (and none can start until unlock), no other process with the store open.
func (db *DB) lockExclusive(ctx context.Context) (unlock func(), err error) {
	// Readers hold gcMu only briefly; batches hold it until Flush, so a
	// batch in progress makes this fail rather than wait.
	deadline := time.Now().Add(2 * time.Second)
	for !db.gcMu.TryLock() {
		if db.batches.Load() > 0 || time.Now().After(deadline) {
			return nil, fmt.Errorf("a batch of this process has unflushed work: %w", ErrBusy)
		}
		if err := checkContext(ctx); err != nil {
			return nil, err
		}
		time.Sleep(time.Millisecond)
	}
	db.lockMu.Lock()
	fd := int(db.lock.Fd())
	if err := unix.Flock(fd, unix.LOCK_EX|unix.LOCK_NB); err != nil {
		// A failed conversion may have dropped our shared lock: take it back.
		serr := flock.Lock(context.Background(), db.lock, unix.LOCK_SH)
		db.lockMu.Unlock()
		db.gcMu.Unlock()
		if serr != nil {
			return nil, errors.Join(err, serr)
		}
		if errors.Is(err, unix.EWOULDBLOCK) {
			return nil, fmt.Errorf("another process has the store open: %w", ErrBusy)
		}
		return nil, err
	}
	return func() {
		if err := unix.Flock(fd, unix.LOCK_SH); err != nil {
			db.log.Warn("gc: downgrade store lock", "err", err)
		}
		db.lockMu.Unlock()
		db.gcMu.Unlock()
	}, nil
}
