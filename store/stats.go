package store

import (
	"context"
	"errors"
)

// KindStats count the objects of one kind.
type KindStats struct {
	Count int64 `json:"count"`
	Bytes int64 `json:"bytes"` // encoded (chunks: payload) bytes
}

// StoreStats describe a store's contents and footprint.
type StoreStats struct {
	Chunks     KindStats `json:"chunks"`
	Manifests  KindStats `json:"manifests"`
	Trees      KindStats `json:"trees"`
	Commits    KindStats `json:"commits"`
	Projects   int64     `json:"projects"`
	Branches   int64     `json:"branches"`
	Layers     int64     `json:"layers"`
	Workspaces int64     `json:"workspaces"`
	// LogicalBytes is the sum of every commit's file bytes (what storing
	// each snapshot in full would take); StoredBytes the unique chunk
	// payload actually kept; DedupRatio their quotient.
	LogicalBytes int64   `json:"logical_bytes"`
	StoredBytes  int64   `json:"stored_bytes"`
	DedupRatio   float64 `json:"dedup_ratio"`
	DBBytes      int64   `json:"db_bytes"`   // store.db and its WAL
	PackBytes    int64   `json:"pack_bytes"` // pack files, including dead bytes
	PackFiles    int     `json:"pack_files"`
	CacheBytes   int64   `json:"cache_bytes"` // materialized files on disk
}

// Stats counts objects by kind and measures the store on disk.
func (db *DB) Stats(ctx context.Context) (StoreStats, error) {
	return StoreStats{}, errors.New("stats: not implemented yet")
}
