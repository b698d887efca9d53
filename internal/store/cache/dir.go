package cache

import (
	"context"
	"errors"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"time"

	"layerfs.dev/layerfs/internal/store/object"
)

// Dir is a Store's cache of contents: the directory, its write-back
// window, its bound and the contents held in memory. It is safe for
// concurrent use.
type Dir struct {
	root   string
	log    *slog.Logger
	dirs   dirs
	wb     writeback
	bound  bound
	mem    memFiles
	trust  trust
	placed atomic.Int64 // bytes placed, ever
	// verityErr is why the cache's files are not sealed with fs-verity;
	// nil: they are (seal.go).
	verityErr error
}

// Open opens the cache in root, which must exist, bounded by limit bytes
// of contents (0: a quarter of its file system's size; negative: no
// bound). It first settles what an earlier process left unsynced (see
// writeback.go) and waits for another open doing so, or until ctx ends.
// log receives rare events (evictions, a full disk).
func Open(ctx context.Context, root string, limit int64, log *slog.Logger) (*Dir, error) {
	d := &Dir{root: root, log: log}
	d.wb = writeback{dir: root, log: log}
	d.bound = bound{d: d, max: boundOf(root, limit)}
	if err := recoverCache(ctx, root, log); err != nil {
		return nil, err
	}
	if err := d.openTrust(); err != nil {
		return nil, err
	}
	d.probeVerity()
	return d, nil
}

// Root is the cache's directory.
func (d *Dir) Root() string { return d.root }

// Path is where the content named id (ZeroID for an empty file) is
// placed: <root>/<first two hex digits>/<id>.
func (d *Dir) Path(id object.ID) string {
	s := id.String()
	return filepath.Join(d.root, s[:2], s)
}

// Placed is the bytes of the contents placed in the cache since Open.
func (d *Dir) Placed() int64 { return d.placed.Load() }

// Sync makes every cache file this process wrote durable now, instead of
// once writes have paused.
func (d *Dir) Sync() error { return d.wb.sync() }

// Close waits for an eviction under way, lets go of the write-back window
// without a sync (the next Open syncs it, or after a stop of the host
// removes what it covers) and releases the contents held in memory.
func (d *Dir) Close() {
	d.bound.wait()
	d.wb.close()
	d.dirs.closeAll()
	d.mem.close()
	d.closeTrust()
}

// Sweep removes the contents keep refuses, anything else in the cache's
// content directories that is not a content, and temporary files a
// crashed writer left more than an hour ago; it returns how many files it
// removed (temporary files not counted). The write-back markers and the
// trusted layers stay, but for the links to what was removed.
func (d *Dir) Sweep(keep func(object.ID) bool) (int, error) {
	removed := 0
	err := eachEntry(d.root, func(dir string) bool { return dir != UnsyncedDir && dir != TrustedDir }, func(sub string, e os.DirEntry) error {
		name := e.Name()
		p := filepath.Join(sub, name)
		if strings.HasPrefix(name, ".tmp-") {
			if fi, err := e.Info(); err == nil && time.Since(fi.ModTime()) > time.Hour {
				os.Remove(p)
			}
			return nil
		}
		if id, err := object.ParseID(name); err == nil && keep(id) {
			return nil
		}
		if err := os.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return err
		}
		if id, err := object.ParseID(name); err == nil {
			d.forget(id)
		}
		removed++
		return nil
	})
	if err != nil {
		return removed, err
	}
	return removed, d.sweepLayer()
}

// eachEntry calls fn for every entry of the directories of root whose
// names dir accepts (the cache's layout: <root>/<dir>/<entry>), with the
// directory's path; it stops at the first error.
func eachEntry(root string, dir func(name string) bool, fn func(sub string, e os.DirEntry) error) error {
	dirs, err := os.ReadDir(root)
	if err != nil {
		return err
	}
	for _, sd := range dirs {
		if !sd.IsDir() || !dir(sd.Name()) {
			continue
		}
		sub := filepath.Join(root, sd.Name())
		ents, err := os.ReadDir(sub)
		if err != nil {
			return err
		}
		for _, e := range ents {
			if err := fn(sub, e); err != nil {
				return err
			}
		}
	}
	return nil
}
