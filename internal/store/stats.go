package store

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	"layerfs.dev/layerfs/internal/diskusage"
	"layerfs.dev/layerfs/internal/store/cache"
	"layerfs.dev/layerfs/internal/store/object"
)

// KindStats count the objects of one kind.
type KindStats struct {
	Count int64 `json:"count"`
	Bytes int64 `json:"bytes"` // encoded bytes (chunks: payload bytes)
}

// Stats describe a Store's contents and footprint.
type Stats struct {
	Chunks     KindStats `json:"chunks"`
	Manifests  KindStats `json:"manifests"`
	Trees      KindStats `json:"trees"`
	Commits    KindStats `json:"commits"`
	Projects   int64     `json:"projects"`
	Branches   int64     `json:"branches"`
	Layers     int64     `json:"layers"`
	Workspaces int64     `json:"workspaces"`
	// LogicalBytes is the sum of every stored commit's file bytes (what
	// keeping each snapshot in full would take); StoredBytes is the unique
	// chunk payload actually kept; DedupRatio is their quotient (0 when
	// nothing is stored).
	LogicalBytes int64   `json:"logical_bytes"`
	StoredBytes  int64   `json:"stored_bytes"`
	DedupRatio   float64 `json:"dedup_ratio"`
	DBBytes      int64   `json:"db_bytes"`   // store.db and its WAL, apparent size
	PackBytes    int64   `json:"pack_bytes"` // pack files, apparent size, dead bytes included
	PackFiles    int     `json:"pack_files"`
	CacheBytes   int64   `json:"cache_bytes"` // materialized files and metadata images, on disk
	CacheFiles   int64   `json:"cache_files"` // contents in the cache
	CacheLimit   int64   `json:"cache_limit"` // the bound of its contents' bytes (0: none)
	// CacheTrusted counts the contents in the cache this process has
	// checked against their IDs (or placed from checked bytes) and may
	// give to the kernel; the others are checked on first use.
	CacheTrusted int64 `json:"cache_trusted"`
	// CacheVerity is "on" when the cache's files are sealed with
	// fs-verity, else "off: " and why.
	CacheVerity string `json:"cache_verity"`
}

// Stats counts objects by kind and measures the store on disk. It decodes
// every commit (for LogicalBytes), so it costs O(commits).
func (db *DB) Stats(ctx context.Context) (Stats, error) {
	var st Stats
	err := db.withTx(ctx, txRead, func(tx *tx) error {
		if err := tx.Row(ctx, `SELECT count(*), coalesce(sum(len), 0) FROM chunks`).Scan(&st.Chunks.Count, &st.Chunks.Bytes); err != nil {
			return err
		}
		r, err := tx.Query(ctx, `SELECT kind, count(*), sum(length(data)) FROM objects GROUP BY kind`)
		if err != nil {
			return err
		}
		for r.Next() {
			var k int64
			var ks KindStats
			if err := r.Scan(&k, &ks.Count, &ks.Bytes); err != nil {
				r.Close()
				return err
			}
			switch Kind(k) {
			case KindManifest:
				st.Manifests = ks
			case KindTree:
				st.Trees = ks
			case KindCommit:
				st.Commits = ks
			}
		}
		if err := r.Close(); err != nil {
			return err
		}
		if err := tx.Row(ctx, `SELECT (SELECT count(*) FROM projects), (SELECT count(*) FROM branches),
			(SELECT count(*) FROM layers), (SELECT count(*) FROM workspaces)`).Scan(&st.Projects, &st.Branches, &st.Layers, &st.Workspaces); err != nil {
			return err
		}
		r, err = tx.Query(ctx, `SELECT id, data FROM objects WHERE kind = ?`, int64(KindCommit))
		if err != nil {
			return err
		}
		defer r.Close()
		for r.Next() {
			var id, data []byte
			if err := r.Scan(&id, &data); err != nil {
				return err
			}
			c, err := object.DecodeCommit(data)
			if err != nil {
				return fmt.Errorf("commit %s: %w", toID(id), err)
			}
			st.LogicalBytes += c.Stats.Bytes
		}
		return r.Err()
	})
	if err != nil {
		return st, fmt.Errorf("stats: %w", err)
	}
	st.StoredBytes = st.Chunks.Bytes
	if st.StoredBytes > 0 {
		st.DedupRatio = float64(st.LogicalBytes) / float64(st.StoredBytes)
	}
	if db.bucket != nil {
		return db.sharedStats(ctx, st)
	}
	for _, f := range []string{dbFile, dbFile + "-wal"} {
		if fi, err := os.Stat(filepath.Join(db.dir, f)); err == nil {
			st.DBBytes += fi.Size()
		}
	}
	nums, err := db.packs.List()
	if err != nil {
		return st, fmt.Errorf("stats: %w", err)
	}
	st.PackFiles = len(nums)
	for _, n := range nums {
		if fi, err := os.Stat(db.packs.Path(n)); err == nil {
			st.PackBytes += fi.Size()
		}
	}
	if err := db.cacheStats(&st); err != nil {
		return st, fmt.Errorf("stats: %w", err)
	}
	return st, nil
}

// cacheStats fills in the cache's figures.
func (db *DB) cacheStats(st *Stats) error {
	var err error
	if st.CacheBytes, err = diskusage.Tree(db.CacheDir(), cache.TrustedDir); err != nil {
		return err
	}
	if st.CacheFiles, err = db.cache.Count(); err != nil {
		return err
	}
	st.CacheLimit = db.cache.Limit()
	st.CacheTrusted = min(db.cache.TrustedCount(), st.CacheFiles)
	st.CacheVerity = db.CacheVerity()
	return nil
}

// sharedStats fills in a shared Store's footprint: the database's size,
// the pack objects' (from the packs table) and this host's caches.
func (db *DB) sharedStats(ctx context.Context, st Stats) (Stats, error) {
	var packs int64
	err := db.withTx(ctx, txRead, func(tx *tx) error {
		return tx.Row(ctx, `SELECT pg_database_size(current_database()), count(*), coalesce(sum(size), 0) FROM packs`).
			Scan(&st.DBBytes, &packs, &st.PackBytes)
	})
	if err != nil {
		return st, fmt.Errorf("stats: %w", err)
	}
	st.PackFiles = int(packs)
	if err := db.cacheStats(&st); err != nil {
		return st, fmt.Errorf("stats: %w", err)
	}
	st.CacheBytes += db.bucket.CacheBytes()
	return st, nil
}
