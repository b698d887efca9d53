package store

import (
	"context"
	"errors"
	"fmt"

	"layerfs.dev/layerfs/internal/store/bucketpack"
	"layerfs.dev/layerfs/internal/store/pack"
)

// packStore is where chunk payloads are written and read: pack files in
// the store directory (pack.Set) or pack objects in a bucket
// (bucketpack.Set). A Batch appends through a pack.Appender and indexes
// what it appended only after Sync has made it durable.
type packStore interface {
	Acquire(ctx context.Context) (pack.Appender, error)
	// Release takes back a writer whose unit was flushed or rolled back.
	Release(w pack.Appender) error
	// Discard drops a writer after an error it could not roll back.
	Discard(w pack.Appender)
	// Read returns chunk id's payload at off/length in pack num, verified.
	Read(ctx context.Context, id ID, num, off, length int64) ([]byte, error)
	// ReadRange returns length bytes of pack num at off, as they are: a
	// span of records, whose payloads the caller verifies (package fill's
	// prefetch).
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
	seen := map[*bucketpack.Writer]bool{}
	for _, u := range used {
		w := u.w.(*bucketpack.Writer)
		if seen[w] {
			continue
		}
		seen[w] = true
		if _, err := tx.Exec(ctx, `INSERT OR IGNORE INTO packs(num, key, size, created) VALUES (?, ?, ?, ?)`,
			w.Number(), w.Key(), w.End(), nowNs()); err != nil {
			return fmt.Errorf("index pack %d: %w", w.Number(), err)
		}
		db.bucket.Remember(w.Number(), w.Key())
	}
	return nil
}

// packIndex is a shared Store's packs table, which numbers its pack
// objects (a sequence, so that chunk rows can name a pack before it is
// uploaded) and maps each number to its object's key.
type packIndex struct{ db *DB }

func (ix packIndex) NextNumber(ctx context.Context) (int64, error) {
	var num int64
	err := ix.db.withTx(ctx, txInsert, func(tx *tx) error {
		return tx.Row(ctx, `SELECT nextval('pack_numbers')`).Scan(&num)
	})
	return num, err
}

func (ix packIndex) Key(ctx context.Context, num int64) (string, error) {
	key, err := readOne(ctx, ix.db, func(s scanner) (string, error) {
		var k string
		return k, s.Scan(&k)
	}, `SELECT key FROM packs WHERE num = ?`, num)
	if errors.Is(err, ErrNotFound) {
		return "", fmt.Errorf("pack %d is not indexed: %w", num, ErrCorrupt)
	}
	if err != nil {
		return "", fmt.Errorf("pack %d: %w", num, err)
	}
	return key, nil
}
