package fill

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"layerfs.dev/layerfs/internal/store/cache"
	"layerfs.dev/layerfs/internal/store/object"
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

// TrustFile makes the cache file of c one the kernel may be given (see
// above). A damaged file is evicted and the error wraps cache.ErrDamaged; a
// missing one wraps fs.ErrNotExist.
func (fc *Cache) TrustFile(ctx context.Context, c Content) error {
	err := fc.dir.Trust(c.ID, func(f *os.File) error { return fc.CheckFile(ctx, c, f) })
	if errors.Is(err, cache.ErrDamaged) {
		fc.log.Warn("damaged cache file evicted: it will be made again from the packs",
			"content", c.ID.String(), "path", fc.dir.Path(c.ID), "err", err)
	}
	return err
}

// CheckFile checks that the open file f holds the content c; a
// mismatch wraps cache.ErrDamaged.
func (fc *Cache) CheckFile(ctx context.Context, c Content, f *os.File) error {
	fi, err := f.Stat()
	if err != nil {
		return err
	}
	damaged := func(format string, args ...any) error {
		return fmt.Errorf("%w: content %s: %s", cache.ErrDamaged, c.ID, fmt.Sprintf(format, args...))
	}
	if fi.Size() != c.Size {
		return damaged("the file has %d bytes, the content %d", fi.Size(), c.Size)
	}
	switch {
	case c.ID.IsZero() && c.Size == 0:
		return nil // the empty content
	case c.Kind == object.KindChunk:
		data := make([]byte, c.Size)
		if _, err := io.ReadFull(f, data); err != nil {
			return err
		}
		if got := object.Hash(object.KindChunk, data); got != c.ID {
			return damaged("the file hashes to %s", got)
		}
		return nil
	case c.Kind == object.KindManifest:
		m, err := fc.src.Manifest(ctx, c.ID)
		if err != nil {
			return err
		}
		if m.Size != c.Size {
			return fmt.Errorf("manifest %s has %d bytes, the tree says %d: %w", c.ID, m.Size, c.Size, object.ErrCorrupt)
		}
		var buf []byte
		var off int64
		for i, x := range m.Extents {
			if err := ctx.Err(); err != nil {
				return err
			}
			if int64(cap(buf)) < x.Length {
				buf = make([]byte, x.Length)
			}
			b := buf[:x.Length]
			if _, err := f.ReadAt(b, off); err != nil {
				return err
			}
			if x.Chunk.IsZero() {
				if !isZeros(b) {
					return damaged("extent %d at offset %d is a hole but holds data", i, off)
				}
			} else if got := object.Hash(object.KindChunk, b); got != x.Chunk {
				return damaged("extent %d at offset %d hashes to %s, its chunk is %s", i, off, got, x.Chunk)
			}
			off += x.Length
		}
		return nil
	}
	return fmt.Errorf("content %s: object kind %s: %w", c.ID, c.Kind, object.ErrCorrupt)
}

var zeroBlock [64 << 10]byte

func isZeros(b []byte) bool {
	for len(b) > 0 {
		n := min(len(b), len(zeroBlock))
		if !bytes.Equal(b[:n], zeroBlock[:n]) {
			return false
		}
		b = b[n:]
	}
	return true
}

// ReadyStats tell what Ready did.
type ReadyStats struct {
	PrefetchStats
	Trusted int `json:"trusted"` // contents in the cache checked and trusted
	Damaged int `json:"damaged"` // of them, damaged: evicted, and fetched again
}

// trustWorkers check a commit's contents in parallel: the reads of a new
// workspace wait for what they reach first, and the checks of small
// files wait on the disk more than on the CPU.
const trustWorkers = 4

// readyFillPoll is how soon Ready first looks again for contents the fill
// behind a capture placed meanwhile, while it runs (then less and less
// often).
const readyFillPoll = 50 * time.Millisecond

// Ready readies the contents a workspace's commit needs ahead of its
// reads: those in the cache are checked and trusted (see above), then
// those the fill behind a capture was still writing, then the others,
// damaged ones included, are fetched from the packs (Prefetch) and
// trusted as they are placed. It returns once every content is trusted
// or given up on (left to Materialize, which a read then reaches).
func (fc *Cache) Ready(ctx context.Context, contents []Content) (ReadyStats, error) {
	return fc.ready(ctx, contents, true)
}

// Trust is Ready without the fetch: the contents the cache lacks are left
// to Materialize (counted in Missing).
func (fc *Cache) Trust(ctx context.Context, contents []Content) (ReadyStats, error) {
	return fc.ready(ctx, contents, false)
}

func (fc *Cache) ready(ctx context.Context, contents []Content, fetch bool) (ReadyStats, error) {
	t0 := time.Now()
	var st ReadyStats
	st.Contents = len(contents)
	var todo []Content
	seen := make(map[object.ID]bool, len(contents))
	for _, c := range contents {
		if c.Size == 0 || c.ID.IsZero() || seen[c.ID] || fc.dir.Trusted(c.ID) {
			continue
		}
		seen[c.ID] = true
		todo = append(todo, c)
	}
	r := &readying{fc: fc}
	missing := r.trustAll(ctx, todo)
	if len(missing) > 0 {
		// Trusted as soon as placed (by the fill, the prefetch below).
		ids := make([]object.ID, len(missing))
		for i, c := range missing {
			ids[i] = c.ID
		}
		defer fc.dir.Want(ids)()
	}
	// What captures are writing into the cache is not missing: trusted as
	// the fill places it, until the fill is done.
	for done, poll := false, readyFillPoll; len(missing) > 0 && !done; poll = min(2*poll, 16*readyFillPoll) {
		wait, cancel := context.WithTimeout(ctx, poll)
		err := fc.Wait(wait)
		cancel()
		if err := ctx.Err(); err != nil {
			return st, err
		}
		done = err == nil
		missing = r.trustAll(ctx, missing)
	}
	if err := ctx.Err(); err != nil {
		return st, err
	}
	st.Missing = len(missing)
	if len(missing) > 0 && fetch {
		var err error
		st.PrefetchStats, err = fc.Prefetch(ctx, missing)
		st.Contents = len(contents)
		if err != nil {
			r.errs = append(r.errs, err)
		}
		// What the prefetch placed was written from checked chunks.
		for _, c := range missing {
			if err := fc.TrustFile(ctx, c); err == nil {
				r.trusted.Add(1)
			}
		}
	}
	st.Trusted, st.Damaged = int(r.trusted.Load()), int(r.damaged.Load())
	st.Took = time.Since(t0)
	if err := errors.Join(r.errs...); err != nil {
		return st, fmt.Errorf("ready: %w", err)
	}
	return st, nil
}

// readying is one run of Ready.
type readying struct {
	fc               *Cache
	trusted, damaged atomic.Int64
	mu               sync.Mutex
	errs             []error
}

// trustAll trusts the contents of todo in the cache, trustWorkers at a
// time, and returns those it did not find there (a damaged one is
// evicted, so not there either).
func (r *readying) trustAll(ctx context.Context, todo []Content) []Content {
	var next atomic.Int64
	var missing []Content
	var wg sync.WaitGroup
	for range min(trustWorkers, len(todo)) {
		wg.Go(func() {
			for {
				i := int(next.Add(1)) - 1
				if i >= len(todo) || ctx.Err() != nil {
					return
				}
				c := todo[i]
				err := r.fc.TrustFile(ctx, c)
				switch {
				case err == nil:
					r.trusted.Add(1)
					continue
				case errors.Is(err, cache.ErrDamaged):
					r.damaged.Add(1)
				case !errors.Is(err, fs.ErrNotExist):
					r.mu.Lock()
					r.errs = append(r.errs, err)
					r.mu.Unlock()
					continue
				}
				r.mu.Lock()
				missing = append(missing, c)
				r.mu.Unlock()
			}
		})
	}
	wg.Wait()
	return missing
}
