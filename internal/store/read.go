package store

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"

	"layerfs.dev/layerfs/internal/account"
	"layerfs.dev/layerfs/internal/store/object"
)

// Chunk returns a chunk's bytes, verified against id.
func (db *DB) Chunk(ctx context.Context, id ID) ([]byte, error) {
	db.gcMu.RLock()
	defer db.gcMu.RUnlock()
	var pack, off, length int64
	err := db.withTx(ctx, txRead, func(tx *tx) error {
		return tx.Row(ctx, `SELECT pack, off, len FROM chunks WHERE id = ?`, id[:]).Scan(&pack, &off, &length)
	})
	if errors.Is(err, sql.ErrNoRows) {
		return nil, fmt.Errorf("chunk %s: %w", id, ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("chunk %s: %w", id, err)
	}
	return db.readChunk(ctx, id, pack, off, length)
}

// object reads the canonical bytes of a manifest, tree or commit and
// verifies them against id.
func (db *DB) object(ctx context.Context, k Kind, id ID) ([]byte, error) {
	var data []byte
	var kind int64
	err := db.withTx(ctx, txRead, func(tx *tx) error {
		return tx.Row(ctx, `SELECT kind, data FROM objects WHERE id = ?`, id[:]).Scan(&kind, &data)
	})
	if errors.Is(err, sql.ErrNoRows) {
		return nil, fmt.Errorf("%s %s: %w", k, id, ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("%s %s: %w", k, id, err)
	}
	if Kind(kind) != k {
		return nil, fmt.Errorf("%s %s: %w", k, id, ErrNotFound)
	}
	if got := Hash(k, data); got != id {
		return nil, fmt.Errorf("%s %s in %s (objects table): content hashes to %s: %w", k, id, dbFile, got, ErrCorrupt)
	}
	return data, nil
}

// Manifest returns a chunked file's manifest, verified against id.
func (db *DB) Manifest(ctx context.Context, id ID) (*Manifest, error) {
	data, err := db.object(ctx, KindManifest, id)
	if err != nil {
		return nil, err
	}
	m, err := object.DecodeManifest(data)
	if err != nil {
		return nil, fmt.Errorf("manifest %s: %w", id, err)
	}
	return m, nil
}

// Tree returns a directory, verified against id. Trees are cached by id
// and shared between callers: the result must not be modified.
func (db *DB) Tree(ctx context.Context, id ID) (*Tree, error) {
	if t := db.trees.get(id); t != nil {
		db.count(ctx, account.TreeCacheHits, 1)
		return t, nil
	}
	db.count(ctx, account.TreeCacheMisses, 1)
	data, err := db.object(ctx, KindTree, id)
	if err != nil {
		return nil, err
	}
	t, err := object.DecodeTree(data)
	if err != nil {
		return nil, fmt.Errorf("tree %s: %w", id, err)
	}
	db.trees.put(id, t, int64(len(data)))
	return t, nil
}

// Commit returns a commit, verified against id.
func (db *DB) Commit(ctx context.Context, id ID) (*Commit, error) {
	data, err := db.object(ctx, KindCommit, id)
	if err != nil {
		return nil, err
	}
	c, err := object.DecodeCommit(data)
	if err != nil {
		return nil, fmt.Errorf("commit %s: %w", id, err)
	}
	return c, nil
}

// HasCommit reports whether the store holds commit id.
func (db *DB) HasCommit(ctx context.Context, id ID) (bool, error) {
	var n int
	err := db.withTx(ctx, txRead, func(tx *tx) error {
		return tx.Row(ctx, `SELECT count(*) FROM objects WHERE id = ? AND kind = ?`, id[:], int64(KindCommit)).Scan(&n)
	})
	if err != nil {
		return false, fmt.Errorf("has commit %s: %w", id, err)
	}
	return n > 0, nil
}

// OpenContent returns a reader of a file entry's content: holes read as
// zeros and every chunk is verified as it is read. The content must add up
// to e.Size, else reading fails with ErrCorrupt.
func (db *DB) OpenContent(ctx context.Context, e *Entry) (io.ReadCloser, error) {
	if e.Type != TypeFile {
		return nil, fmt.Errorf("open content of %q: a %s has no content", e.Name, e.Type)
	}
	switch {
	case e.Object.IsZero():
		if e.Size != 0 {
			return nil, fmt.Errorf("open content of %q: no object for %d bytes: %w", e.Name, e.Size, ErrCorrupt)
		}
		return io.NopCloser(bytes.NewReader(nil)), nil
	case e.ObjectKind == KindChunk:
		data, err := db.Chunk(ctx, e.Object)
		if err != nil {
			return nil, fmt.Errorf("open content of %q: %w", e.Name, err)
		}
		if int64(len(data)) != e.Size {
			return nil, fmt.Errorf("open content of %q: chunk %s has %d bytes, entry says %d: %w", e.Name, e.Object, len(data), e.Size, ErrCorrupt)
		}
		return io.NopCloser(bytes.NewReader(data)), nil
	case e.ObjectKind == KindManifest:
		m, err := db.Manifest(ctx, e.Object)
		if err != nil {
			return nil, fmt.Errorf("open content of %q: %w", e.Name, err)
		}
		if m.Size != e.Size {
			return nil, fmt.Errorf("open content of %q: manifest %s has %d bytes, entry says %d: %w", e.Name, e.Object, m.Size, e.Size, ErrCorrupt)
		}
		return &contentReader{ctx: ctx, db: db, m: m}, nil
	}
	return nil, fmt.Errorf("open content of %q: object kind %s: %w", e.Name, e.ObjectKind, ErrCorrupt)
}

// contentReader streams a manifest's extents.
type contentReader struct {
	ctx  context.Context
	db   *DB
	m    *Manifest
	next int    // next extent
	cur  []byte // unread bytes of the current chunk
	hole int64  // unread zeros of the current hole
}

var zeros [64 << 10]byte

func (r *contentReader) Read(p []byte) (int, error) {
	for len(r.cur) == 0 && r.hole == 0 {
		if r.next >= len(r.m.Extents) {
			return 0, io.EOF
		}
		x := r.m.Extents[r.next]
		r.next++
		if x.Chunk.IsZero() {
			r.hole = x.Length
			continue
		}
		data, err := r.db.Chunk(r.ctx, x.Chunk)
		if err != nil {
			return 0, err
		}
		if int64(len(data)) != x.Length {
			return 0, fmt.Errorf("chunk %s has %d bytes, manifest says %d: %w", x.Chunk, len(data), x.Length, ErrCorrupt)
		}
		r.cur = data
	}
	if r.hole > 0 {
		n := int(min(int64(len(p)), r.hole, int64(len(zeros))))
		copy(p[:n], zeros[:n])
		r.hole -= int64(n)
		return n, nil
	}
	n := copy(p, r.cur)
	r.cur = r.cur[n:]
	return n, nil
}

func (r *contentReader) Close() error { return nil }

// LoadTrees puts the trees ids in the tree cache, reading those it lacks
// in a few statements (a shared Store's round trips cost more than the
// trees' bytes: a walk that knows a level of directories ahead loads it at
// once, then finds each in the cache).
func (db *DB) LoadTrees(ctx context.Context, ids []ID) error {
	var missing []ID
	for _, id := range ids {
		if !id.IsZero() && db.trees.get(id) == nil {
			missing = append(missing, id)
		}
	}
	q := fmt.Sprintf(`SELECT id, data FROM objects WHERE kind = %d AND id IN `, KindTree)
	err := db.inBatches(ctx, missing, q, func(s scanner) error {
		var idb, data []byte
		if err := s.Scan(&idb, &data); err != nil {
			return err
		}
		id := toID(idb)
		if got := Hash(KindTree, data); got != id {
			return fmt.Errorf("tree %s in %s (objects table): content hashes to %s: %w", id, dbFile, got, ErrCorrupt)
		}
		t, err := object.DecodeTree(data)
		if err != nil {
			return fmt.Errorf("tree %s: %w", id, err)
		}
		db.count(ctx, account.TreeCacheMisses, 1)
		db.trees.put(id, t, int64(len(data)))
		return nil
	})
	if err != nil {
		return fmt.Errorf("load trees: %w", err)
	}
	return nil
}
