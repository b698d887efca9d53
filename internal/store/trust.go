package store

import (
	"context"
	"fmt"
	"os"

	"layerfs.dev/layerfs/internal/fsverity"
	"layerfs.dev/layerfs/internal/store/cache"
)

// Trusting the cache of contents.
//
// The kernel reads the cache's files with no check (package cache: the
// overlay's data layer, FUSE passthrough), so a file is handed to it only
// once this process has checked it against its content's ID: its size,
// and its bytes hashed as the ID was made (a content of one chunk: the
// chunk's hash; a chunked one: each extent against its chunk's ID, holes
// read as zeros). Materialize checks the file it returns; Ready checks a
// commit's contents ahead of a workspace's reads. A damaged file is
// evicted, logged with its content and path, and made again from the
// packs. See package cache for what is trusted without a second read.

// ErrDamaged is a cache file whose bytes are not its content's.
var ErrDamaged = cache.ErrDamaged

// CacheLayer is the directory of the contents this process trusts, laid
// out as the cache (<xx>/<id>): the directory the kernel may read
// contents from with no check (the overlay's data layer).
func (db *DB) CacheLayer() string { return db.cache.Layer() }

// trust makes the cache file of c one the kernel may be given (see
// above). A damaged file is evicted and the error wraps ErrDamaged; a
// missing one wraps fs.ErrNotExist.
func (db *DB) trust(ctx context.Context, c Content) error { return db.fc.TrustFile(ctx, c) }

// checkCacheFile checks that the open file f holds the content c; a
// mismatch wraps ErrDamaged.
func (db *DB) checkCacheFile(ctx context.Context, c Content, f *os.File) error {
	return db.fc.CheckFile(ctx, c, f)
}

// contentOf is the content a file entry names.
func contentOf(e *Entry) Content { return Content{ID: e.Object, Kind: e.ObjectKind, Size: e.Size} }

// Sealed reports whether the cache seals its files with fs-verity (see
// package cache): the overlay can then check each content's digest.
func (db *DB) Sealed() bool { return db.cache.Verity() == nil }

// ContentDigest returns the fs-verity digest of content c, as the kernel
// measures its sealed cache file: it materializes c first (so the file
// is in the cache, checked against c's ID, trusted and sealed). A
// content's digest is a function of its bytes, remembered once known.
func (db *DB) ContentDigest(ctx context.Context, c Content) ([fsverity.DigestSize]byte, error) {
	if d, ok := db.digests.Load(c.ID); ok {
		return d.([fsverity.DigestSize]byte), nil
	}
	var d [fsverity.DigestSize]byte
	if err := db.cache.Verity(); err != nil {
		return d, fmt.Errorf("content digest: %w", err)
	}
	e := Entry{Name: c.ID.String(), Type: TypeFile, Mode: 0o444, Size: c.Size, Object: c.ID, ObjectKind: c.Kind}
	p, err := db.Materialize(ctx, &e)
	if err != nil {
		return d, err
	}
	f, err := os.Open(p)
	if err != nil {
		return d, err
	}
	defer f.Close()
	if d, err = fsverity.Measure(int(f.Fd())); err != nil {
		return d, fmt.Errorf("content digest of %s: %w", c.ID.Short(), err)
	}
	db.digests.Store(c.ID, d)
	return d, nil
}
