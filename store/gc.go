package store

import (
	"context"
	"errors"
	"time"
)

// GCOptions tune a collection.
type GCOptions struct {
	// CompactRatio: a pack whose dead bytes exceed this fraction of its
	// size is rewritten with only its live chunks; 0 means 0.25.
	CompactRatio float64
	// DryRun marks and counts but deletes nothing.
	DryRun bool
	// Vacuum rebuilds the SQLite file afterwards to return its free pages.
	Vacuum bool
}

// GCStats report what a collection found and freed.
type GCStats struct {
	LiveCommits, LiveTrees, LiveManifests, LiveChunks int64
	DeadObjects, DeadChunks                           int64 // rows deleted
	DeadChunkBytes                                    int64 // payload bytes of deleted chunks
	PacksRewritten, PacksDeleted                      int
	CacheFilesRemoved                                 int
	DiskBefore, DiskAfter                             int64 // bytes on disk of packs, cache and database
	Reclaimed                                         int64 // DiskBefore - DiskAfter
	Duration                                          time.Duration
}

// GC deletes everything no branch head, layer or workspace (Base and Head)
// reaches, following commit parents, trees, manifests and chunks; rewrites
// packs whose dead bytes exceed the threshold, deleting the old files; and
// removes cache files of unreachable content. It needs the store to itself:
// it fails fast with ErrBusy when another process has the store open or a
// batch of this process holds unflushed work.
func (db *DB) GC(ctx context.Context, opts GCOptions) (GCStats, error) {
	return GCStats{}, errors.New("gc: not implemented yet")
}
