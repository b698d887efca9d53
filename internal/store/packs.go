package store

import (
	"context"

	"layerfs.dev/layerfs/internal/store/pack"
)

// packStore is where chunk payloads are written and read: pack files in
// the store directory (pack.Set) or pack objects in a bucket
// (bucketPacks). A Batch appends through a pack.Appender and indexes what
// it appended only after Sync has made it durable.
type packStore interface {
	Acquire(ctx context.Context) (pack.Appender, error)
	// Release takes back a writer whose unit was flushed or rolled back.
	Release(w pack.Appender) error
	// Discard drops a writer after an error it could not roll back.
	Discard(w pack.Appender)
	// Read returns chunk id's payload at off/length in pack num, verified.
	Read(ctx context.Context, id ID, num, off, length int64) ([]byte, error)
	// ReadRange returns length bytes of pack num at off, as they are: a
	// span of records, whose payloads the caller verifies (prefetch.go).
	ReadRange(ctx context.Context, num, off, length int64) ([]byte, error)
	Close() error
}

// readChunk reads and verifies the payload of chunk id at off/length in
// pack num, wherever the packs are.
func (db *DB) readChunk(ctx context.Context, id ID, num, off, length int64) ([]byte, error) {
	return db.content.Read(ctx, id, num, off, length)
}

// recordPacks indexes, in a flush's transaction, the packs the unit's
// writers made durable: a bucket's pack objects. A pack file is found by
// its number and needs no row.
func (db *DB) recordPacks(ctx context.Context, tx *tx, used []packUse) error {
	if db.bucket == nil {
		return nil
	}
	return db.bucket.record(ctx, tx, used)
}
