package fill

import (
	"context"
	"log/slog"
	"sync"

	"layerfs.dev/layerfs/internal/account"
	"layerfs.dev/layerfs/internal/serial"
	"layerfs.dev/layerfs/internal/store/cache"
	"layerfs.dev/layerfs/internal/store/object"
)

// Source is what the fills read of the Store (package store's DB).
type Source interface {
	// Manifests calls each with the stored bytes of those of ids that
	// are manifests, unchecked, in any order.
	Manifests(ctx context.Context, ids []object.ID, each func(id object.ID, data []byte) error) error
	// Chunks calls each with the place of those of ids that are indexed
	// chunks (pack num, offset, length), in any order.
	Chunks(ctx context.Context, ids []object.ID, each func(id object.ID, num, off, n int64) error) error
	// ReadRange reads n bytes at off of pack num, unchecked.
	ReadRange(ctx context.Context, num, off, n int64) ([]byte, error)
	// Manifest returns the manifest id, checked.
	Manifest(ctx context.Context, id object.ID) (*object.Manifest, error)
	// ReadLock keeps the packs from being rewritten (by GC) until unlock.
	ReadLock() (unlock func())
	// Contents lists the file contents of the tree root, each once.
	Contents(ctx context.Context, root object.ID) ([]Content, error)
}

// Config is what a Cache is made with.
type Config struct {
	Dir *cache.Dir
	Src Source
	// Total is the DB's totals, counted beside the request's account.
	Total *account.Account
	// Log receives rare events (a full disk, a damaged file); nil is
	// silent.
	Log *slog.Logger
	// Bucket says the packs are a shared Store's objects, read with
	// ranged GETs: the prefetch reads longer spans, more at a time.
	Bucket bool
	// NoFill leaves the cache to be filled on first read only: captures
	// get no Capture.
	NoFill bool
}

// Cache is the policy of one Store's cache of contents: the fills behind
// captures and their queue, the prefetches running, the reads waiting
// for a materialization, and the trust of the cache's files. It is safe
// for concurrent use.
type Cache struct {
	dir    *cache.Dir
	src    Source
	total  *account.Account
	log    *slog.Logger
	spans  spanLimits
	noFill bool

	queue      fillQueue  // the cache fills behind captures (fill.go)
	prefetches prefetches // running (prefetch.go), whose reads Serve may use
	fg         foreground // materializations reads wait for (prefetch.go)
	// behind fetches, one root at a time, the contents captures' fills
	// left out (Behind); bg is its goroutine.
	behind *serial.Queue[object.ID]
	bg     sync.WaitGroup

	runBufs     sync.Pool // *[]byte buffers of Capture's jobs (fill.go)
	contentBufs [len(contentClasses)]sync.Pool
}

// New returns the policy of the cache of contents cfg.Dir.
func New(cfg Config) *Cache {
	fc := &Cache{dir: cfg.Dir, src: cfg.Src, total: cfg.Total, log: cfg.Log, spans: packSpans, noFill: cfg.NoFill}
	if fc.log == nil {
		fc.log = slog.New(slog.DiscardHandler)
	}
	if cfg.Bucket {
		fc.spans = bucketSpans
	}
	fc.behind = serial.New(fc.fetchBehind, serial.Go(fc.bg.Go))
	return fc
}

// Behind fetches into the cache, in the background, the contents of root,
// a tree a capture just stored, that the cache lacks: those the
// capture's fill left out. Roots are fetched one at a time, in order.
func (fc *Cache) Behind(root object.ID) { fc.behind.Add(root) }

func (fc *Cache) fetchBehind(ctx context.Context, root object.ID) {
	contents, err := fc.src.Contents(ctx, root)
	if err == nil {
		_, err = fc.Prefetch(ctx, contents)
	}
	if err != nil && ctx.Err() == nil {
		fc.log.Warn("fetch the contents a capture left out of the cache", "root", root.Short(), "err", err)
	}
}

// Close stops the fetches behind captures and waits until the fill queue
// has written what it holds.
func (fc *Cache) Close() {
	fc.behind.Stop()
	fc.bg.Wait()
	fc.queue.wait(context.Background())
}

// Serve places the content id now from what a capture's fill or a
// running prefetch holds of it, if either does, and reports whether the
// content is in the cache.
func (fc *Cache) Serve(id object.ID) bool {
	return fc.queue.serve(id) || fc.prefetches.serve(id)
}

// Foreground marks a read of a workspace waiting for a materialization
// until done is called: the prefetches let it go first.
func (fc *Cache) Foreground() (done func()) {
	fc.fg.begin()
	return fc.fg.end
}

// countIn adds n to figure f of the totals and of a (a request's
// account, taken from its context when its work was handed over).
func (fc *Cache) countIn(a *account.Account, f account.Figure, n int64) {
	fc.total.Add(f, n)
	a.Add(f, n)
}
