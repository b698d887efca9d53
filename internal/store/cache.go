package store

import (
	"context"

	"layerfs.dev/layerfs/internal/store/cache"
)

// The cache of contents (package cache) as the DB offers it: its paths,
// its bound and its durability. What fills it is Materialize
// (materialize.go), the fills behind captures (fill.go) and Prefetch
// (prefetch.go).

// EvictStats tell what a pass over the cache found and removed.
type EvictStats = cache.EvictStats

// openCache opens the cache of contents, settling what an earlier process
// left unsynced in it.
func (db *DB) openCache(ctx context.Context) (err error) {
	db.cache, err = cache.Open(ctx, db.CacheDir(), db.opts.CacheBytes, db.log)
	if err == nil {
		db.log.Debug("the Store's cache", "fs_verity", db.CacheVerity())
	}
	return err
}

// CacheVerity says whether the cache's files are sealed with fs-verity
// (the kernel then checks every page read from them): "on", or "off: "
// and why (see package cache).
func (db *DB) CacheVerity() string {
	if err := db.cache.Verity(); err != nil {
		return "off: " + err.Error()
	}
	return "on"
}

// CachePath is where Materialize puts the content named by id (ZeroID for
// an empty file): cache/<first two hex digits>/<id>.
func (db *DB) CachePath(id ID) string { return db.cache.Path(id) }

// EvictCache keeps the cache of contents within its bound now, and tells
// what it found and removed.
func (db *DB) EvictCache(ctx context.Context) (EvictStats, error) {
	if err := db.check(); err != nil {
		return EvictStats{}, err
	}
	return db.cache.Evict()
}

// SyncCache makes every cache file this process wrote durable now, instead
// of once writes have paused.
func (db *DB) SyncCache() error { return db.cache.Sync() }
