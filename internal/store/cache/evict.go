package cache

import (
	"cmp"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"

	"golang.org/x/sys/unix"

	"layerfs.dev/layerfs/internal/store/object"
)

// The cache of contents is bounded (Open's limit): once this process
// has placed a twentieth of the bound since the last look, a pass walks the
// cache and, if it holds more than the bound, removes the contents read
// least recently (their access time, which the kernel keeps as the overlay
// reads them, at relatime's once-a-day grain) until it holds
// evictTarget of the bound. Removing a content is always safe: a
// workspace that has it open keeps reading the inode, and the next open of
// it goes to the daemon's view (or Materialize), which makes it again.
// Metadata images, the write-back markers and unplaced temporary files are
// not contents and are left to the gc.

// evictTarget is the share of the bound a pass evicts down to, so that a
// pass does not follow every write.
const evictTarget = 0.9

// defaultCacheShare is the share of its file system's size the cache may
// take when Open's limit is 0.
const defaultCacheShare = 4

// bound keeps the cache within its bytes.
type bound struct {
	d     *Dir
	max   int64        // the bound; <= 0: none
	added atomic.Int64 // bytes placed since the last pass
	mu    sync.Mutex   // held by a pass
	busy  atomic.Bool  // a pass runs or is starting
	wg    sync.WaitGroup
}

// boundOf is the bound limit (as Open takes it) asks for in the cache
// directory dir.
func boundOf(dir string, opt int64) int64 {
	switch {
	case opt < 0:
		return 0
	case opt > 0:
		return opt
	}
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		return 0
	}
	return int64(st.Blocks) * st.Bsize / defaultCacheShare
}

// placed counts size bytes placed in the cache and starts a pass in the
// background when enough were since the last one.
func (b *bound) placed(size int64) {
	if b.max <= 0 || b.added.Add(size) < max(b.max/20, 1) {
		return
	}
	if b.busy.Swap(true) {
		return
	}
	b.added.Store(0)
	b.wg.Add(1)
	go func() {
		defer b.wg.Done()
		defer b.busy.Store(false)
		if _, err := b.pass(); err != nil {
			b.d.log.Warn("evict from the Store's cache", "err", err)
		}
	}()
}

// EvictStats tell what a pass over the cache found and removed.
type EvictStats struct {
	Files        int64 `json:"files"` // contents in the cache before the pass
	Bytes        int64 `json:"bytes"` // their bytes on disk
	Limit        int64 `json:"limit"` // the bound (0: none)
	Evicted      int64 `json:"evicted"`
	EvictedBytes int64 `json:"evicted_bytes"`
}

// Evict keeps the cache within its bound now, and tells what it found and
// removed.
func (d *Dir) Evict() (EvictStats, error) { return d.bound.pass() }

// WaitEvict waits for a pass that placed contents started in the
// background.
func (d *Dir) WaitEvict() { d.bound.wait() }

// Limit is the bound of the contents' bytes (0: none).
func (d *Dir) Limit() int64 { return max(d.bound.max, 0) }

// Count is how many contents the cache holds.
func (d *Dir) Count() (int64, error) {
	files, err := d.contents()
	return int64(len(files)), err
}

// pass walks the cache and evicts down to evictTarget of the bound if it
// holds more than the bound.
func (b *bound) pass() (EvictStats, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	st := EvictStats{Limit: max(b.max, 0)}
	files, err := b.d.contents()
	if err != nil {
		return st, err
	}
	for _, f := range files {
		st.Files++
		st.Bytes += f.bytes
	}
	if b.max <= 0 || st.Bytes <= b.max {
		return st, nil
	}
	slices.SortFunc(files, func(a, b contentFile) int { return cmp.Compare(a.atime, b.atime) })
	left := st.Bytes
	for _, f := range files {
		if float64(left) <= evictTarget*float64(b.max) {
			break
		}
		if b.d.verityErr == nil && b.d.trustedPath(f.path) {
			// An overlay that checks digests cannot read a content
			// through the daemon's view (seal.go): what this process
			// trusts stays until it stops.
			continue
		}
		if err := os.Remove(f.path); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return st, err
		}
		if id, err := object.ParseID(filepath.Base(f.path)); err == nil {
			b.d.forget(id)
		}
		left -= f.bytes
		st.Evicted++
		st.EvictedBytes += f.bytes
	}
	b.d.log.Info("evicted from the Store's cache", "contents", st.Evicted, "bytes", st.EvictedBytes, "limit", b.max)
	return st, nil
}

// wait waits for a pass started in the background.
func (b *bound) wait() { b.wg.Wait() }

type contentFile struct {
	path  string
	atime int64
	bytes int64 // on disk
}

// contents lists the contents in the cache.
func (d *Dir) contents() ([]contentFile, error) {
	var out []contentFile
	err := eachEntry(d.root, isPrefixDir, func(sub string, e os.DirEntry) error {
		if _, err := object.ParseID(e.Name()); err != nil {
			return nil
		}
		p := filepath.Join(sub, e.Name())
		var st unix.Stat_t
		if err := unix.Lstat(p, &st); err != nil {
			return nil // evicted or swept meanwhile
		}
		out = append(out, contentFile{path: p, atime: st.Atim.Nano(), bytes: st.Blocks * 512})
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}
