package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io/fs"
	"os"

	"golang.org/x/sys/unix"

	"layerfs.dev/layerfs/internal/account"
	"layerfs.dev/layerfs/internal/writeruns"
)

// Materialize returns the path of a regular, read-only file holding a file
// entry's full content, creating it on first use: written to a temporary
// file (sparse where the manifest has holes), verified chunk by chunk,
// then linked into place (synced with others later: see package cache).
// A file in place never changes (a racing writer's link fails and its copy
// is dropped), so it can back FUSE passthrough opens and be cloned for
// copy-up. The file returned is trusted (trust.go): a file in place that
// this process has not trusted yet is checked first, and a damaged one
// evicted and made again. Concurrent callers for one content in this
// process share one materialization.
func (db *DB) Materialize(ctx context.Context, e *Entry) (string, error) {
	if e.Type != TypeFile {
		return "", fmt.Errorf("materialize %q: a %s has no content", e.Name, e.Type)
	}
	if err := db.check(); err != nil {
		return "", err
	}
	path := db.CachePath(e.Object)
	_, statErr := os.Lstat(path)
	if statErr == nil && db.cache.Trusted(e.Object) {
		return path, nil
	}
	if p, ok := db.cache.InMemory(e.Object); ok {
		return p, nil
	}
	defer db.fc.Foreground()()
	p, err := db.mat.do(e.Object.String(), func() (string, error) {
		err := db.trust(ctx, contentOf(e))
		if err == nil {
			return path, nil
		}
		if !errors.Is(err, fs.ErrNotExist) && !errors.Is(err, ErrDamaged) {
			return "", err
		}
		// From what a capture's fill or a prefetch holds, if they hold it.
		if !db.fc.Serve(e.Object) {
			err = db.materialize(ctx, e, path)
			if errors.Is(err, unix.ENOSPC) || errors.Is(err, unix.EDQUOT) {
				// A full disk must not stop reads of committed data.
				return db.cache.PutInMemory(e.Object, e.Size, func(f *os.File) error { return db.fill(ctx, e, f) }, err)
			}
			if err != nil {
				return "", err
			}
		}
		return path, db.trust(ctx, contentOf(e))
	})
	if err != nil {
		return "", fmt.Errorf("materialize %q (%s): %w", e.Name, e.Object.Short(), err)
	}
	return p, nil
}

func (db *DB) materialize(ctx context.Context, e *Entry, path string) error {
	f, err := db.cache.Create(path)
	if err != nil {
		return err
	}
	defer f.Abort()
	if err := db.fill(ctx, e, f.File()); err != nil {
		return err
	}
	placed, err := f.Place(e.Size)
	if placed {
		db.count(ctx, account.CacheBytes, e.Size)
	}
	return err
}

// fill writes e's content into the empty file f, verified, sparse where
// the manifest has holes.
func (db *DB) fill(ctx context.Context, e *Entry, f *os.File) error {
	var size int64
	switch {
	case e.Object.IsZero():
		if e.Size != 0 {
			return fmt.Errorf("no object for %d bytes: %w", e.Size, ErrCorrupt)
		}
	case e.ObjectKind == KindChunk:
		data, err := db.Chunk(ctx, e.Object)
		if err != nil {
			return err
		}
		if _, err := f.Write(data); err != nil {
			return err
		}
		size = int64(len(data))
	case e.ObjectKind == KindManifest:
		m, err := db.Manifest(ctx, e.Object)
		if err != nil {
			return err
		}
		if err := db.writeManifest(ctx, f, m); err != nil {
			return err
		}
		size = m.Size
	default:
		return fmt.Errorf("object kind %s: %w", e.ObjectKind, ErrCorrupt)
	}
	if size != e.Size {
		return fmt.Errorf("content has %d bytes, entry says %d: %w", size, e.Size, ErrCorrupt)
	}
	// Truncate sets the size even when the file ends in a hole.
	return f.Truncate(size)
}

// writeManifest writes a manifest's chunks at their offsets, leaving holes
// unwritten. The chunk locations are looked up in one transaction.
func (db *DB) writeManifest(ctx context.Context, f *os.File, m *Manifest) error {
	type loc struct{ pack, off, len int64 }
	locs := make(map[ID]loc, len(m.Extents))
	db.gcMu.RLock()
	defer db.gcMu.RUnlock()
	err := db.withTx(ctx, txRead, func(tx *tx) error {
		s, err := tx.Prepare(ctx, `SELECT pack, off, len FROM chunks WHERE id = ?`)
		if err != nil {
			return err
		}
		defer s.Close()
		for _, x := range m.Extents {
			if x.Chunk.IsZero() {
				continue
			}
			if _, ok := locs[x.Chunk]; ok {
				continue
			}
			var l loc
			err := s.Row(ctx, x.Chunk[:]).Scan(&l.pack, &l.off, &l.len)
			if errors.Is(err, sql.ErrNoRows) {
				return fmt.Errorf("chunk %s: %w", x.Chunk, ErrNotFound)
			}
			if err != nil {
				return fmt.Errorf("chunk %s: %w", x.Chunk, err)
			}
			locs[x.Chunk] = l
		}
		return nil
	})
	if err != nil {
		return err
	}
	// In runs, not chunk by chunk: see package writeruns.
	w := writeruns.New(writeruns.Size, func(b []byte, off int64) error {
		_, err := f.WriteAt(b, off)
		return err
	})
	for _, x := range m.Extents {
		if err := checkContext(ctx); err != nil {
			return err
		}
		if x.Chunk.IsZero() {
			if err := w.Skip(x.Length); err != nil {
				return err
			}
			continue
		}
		l := locs[x.Chunk]
		if l.len != x.Length {
			return fmt.Errorf("chunk %s has %d bytes, manifest says %d: %w", x.Chunk, l.len, x.Length, ErrCorrupt)
		}
		data, err := db.readChunk(ctx, x.Chunk, l.pack, l.off, l.len)
		if err != nil {
			return err
		}
		if err := w.Write(data); err != nil {
			return err
		}
	}
	return w.Flush()
}
