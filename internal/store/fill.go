package store

import (
	"context"
	"fmt"
	"strings"

	"layerfs.dev/layerfs/internal/store/fill"
	"layerfs.dev/layerfs/internal/store/object"
)

// The policy of the cache of contents, its fills behind captures and its
// prefetches, is package fill's; these are its names in the Store's
// vocabulary.
type (
	// CacheFill puts the contents a capture stores into the cache as well
	// (see fill.Capture); a nil *CacheFill places nothing.
	CacheFill = fill.Capture
	// FillWriter writes one content into the cache as a capture reads it.
	FillWriter = fill.Writer
	FillStats  = fill.Stats
	// Content names a file content: its object (a chunk or a manifest),
	// its kind and its size.
	Content       = fill.Content
	PrefetchStats = fill.PrefetchStats
	ReadyStats    = fill.ReadyStats
)

// newFill makes the policy of db's cache, once its packs are open.
func (db *DB) newFill() *fill.Cache {
	return fill.New(fill.Config{Dir: db.cache, Src: fillSource{db}, Total: &db.total, Log: db.log,
		Bucket: db.bucket != nil, NoFill: db.opts.NoCacheFill})
}

// NewCacheFill returns a fill of db's cache for a capture, or nil when
// the Store fills its cache on first read only (Options.NoCacheFill).
func (db *DB) NewCacheFill() *CacheFill { return db.fc.NewCapture() }

// newHeldFill is a batch's fill: its writes wait until the batch is
// flushed (CacheFill.Release).
func (db *DB) newHeldFill() *CacheFill { return db.fc.NewHeldCapture() }

// WaitFill waits until the fill queue has written what captures gave it
// so far, or ctx ends.
func (db *DB) WaitFill(ctx context.Context) error { return db.fc.Wait(ctx) }

// Prefetch puts those of contents the cache lacks in it, ahead of a
// workspace's reads (see fill.Cache.Prefetch). It returns when every
// content is placed or given up on (an error other than the context's is
// reported, and the contents that failed are left to Materialize).
func (db *DB) Prefetch(ctx context.Context, contents []Content) (PrefetchStats, error) {
	if err := db.check(); err != nil {
		return PrefetchStats{}, err
	}
	return db.fc.Prefetch(ctx, contents)
}

// Ready readies the contents a workspace's commit needs ahead of its
// reads: those in the cache are checked and trusted, then those the fill
// behind a capture was still writing, then the others are fetched from
// the packs (Prefetch) and trusted as they are placed. It returns once
// every content is trusted or given up on (left to Materialize).
func (db *DB) Ready(ctx context.Context, contents []Content) (ReadyStats, error) {
	if err := db.check(); err != nil {
		return ReadyStats{}, err
	}
	return db.fc.Ready(ctx, contents)
}

// Trust is Ready without the fetch: the contents the cache lacks are left
// to Materialize (counted in Missing).
func (db *DB) Trust(ctx context.Context, contents []Content) (ReadyStats, error) {
	if err := db.check(); err != nil {
		return ReadyStats{}, err
	}
	return db.fc.Trust(ctx, contents)
}

// fillSource is what the cache's fills read of db (fill.Source).
type fillSource struct{ db *DB }

func (s fillSource) Manifests(ctx context.Context, ids []ID, each func(ID, []byte) error) error {
	q := fmt.Sprintf(`SELECT id, data FROM objects WHERE kind = %d AND id IN `, KindManifest)
	return s.db.inBatches(ctx, ids, q, func(r scanner) error {
		var id, data []byte
		if err := r.Scan(&id, &data); err != nil {
			return err
		}
		return each(toID(id), data)
	})
}

func (s fillSource) Chunks(ctx context.Context, ids []ID, each func(id ID, num, off, n int64) error) error {
	return s.db.inBatches(ctx, ids, `SELECT id, pack, off, len FROM chunks WHERE id IN `, func(r scanner) error {
		var id []byte
		var num, off, n int64
		if err := r.Scan(&id, &num, &off, &n); err != nil {
			return err
		}
		return each(toID(id), num, off, n)
	})
}

func (s fillSource) ReadRange(ctx context.Context, num, off, n int64) ([]byte, error) {
	return s.db.content.ReadRange(ctx, num, off, n)
}

func (s fillSource) Manifest(ctx context.Context, id ID) (*object.Manifest, error) {
	return s.db.Manifest(ctx, id)
}

// Contents walks the tree root, depth first.
func (s fillSource) Contents(ctx context.Context, root ID) ([]Content, error) {
	var out []Content
	seen := map[ID]bool{}
	var walk func(id ID) error
	walk = func(id ID) error {
		t, err := s.db.Tree(ctx, id)
		if err != nil {
			return err
		}
		for i := range t.Entries {
			e := &t.Entries[i]
			switch {
			case e.Type == TypeDir:
				if err := walk(e.Object); err != nil {
					return err
				}
			case e.Type == TypeFile && e.Size > 0 && !seen[e.Object]:
				seen[e.Object] = true
				out = append(out, contentOf(e))
			}
		}
		return nil
	}
	return out, walk(root)
}

func (s fillSource) ReadLock() func() {
	s.db.gcMu.RLock()
	return s.db.gcMu.RUnlock
}

// How many IDs one statement of inBatches looks up: as parameters
// (SQLite), or in one array parameter (PostgreSQL).
const (
	locateBatch = 256
	arrayBatch  = 8192
)

// inBatches runs q (a statement ending in "IN ") with ids, calling each
// for every row. On PostgreSQL a batch is one array parameter (id =
// ANY($1)) of up to arrayBatch IDs: one statement parsed and planned per
// batch, where a list of parameters costs its planning per ID. On SQLite,
// in process, a batch is locateBatch parameters, the last batch padded
// with its first ID so that every batch is one statement text.
func (db *DB) inBatches(ctx context.Context, ids []ID, q string, each func(scanner) error) error {
	if len(ids) == 0 {
		return nil
	}
	size, stmt := locateBatch, q+"("+strings.TrimSuffix(strings.Repeat("?, ", locateBatch), ", ")+")"
	if db.d.Postgres {
		size, stmt = arrayBatch, strings.TrimSuffix(q, "IN ")+"= ANY(?)"
	}
	return db.withTx(ctx, txRead, func(tx *tx) error {
		for i := 0; i < len(ids); i += size {
			batch := ids[i:min(i+size, len(ids))]
			r, err := tx.Query(ctx, stmt, db.batchArgs(batch, size)...)
			if err != nil {
				return err
			}
			for r.Next() {
				if err := each(r); err != nil {
					r.Close()
					return err
				}
			}
			if err := r.Close(); err != nil {
				return err
			}
		}
		return nil
	})
}

// batchArgs are the arguments of one batch of inBatches: an array on
// PostgreSQL, else size IDs, padded with the batch's first.
func (db *DB) batchArgs(batch []ID, size int) []any {
	if db.d.Postgres {
		arr := make([][]byte, len(batch))
		for j := range batch {
			arr[j] = batch[j][:]
		}
		return []any{arr}
	}
	args := make([]any, size)
	for j := range args {
		id := batch[0]
		if j < len(batch) {
			id = batch[j]
		}
		args[j] = id[:]
	}
	return args
}
