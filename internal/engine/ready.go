package engine

import (
	"context"
	"slices"
	"sync"
	"time"

	"layerfs.dev/layerfs/internal/kerneloverlay"
	"layerfs.dev/layerfs/internal/store"
)

// readyImage builds the metadata image of the commit id, just published
// from a directory of this host (an import, a commit of a directory), so
// that the first workspace opened on it mounts it at once instead of
// building it (readyOpen). Such a publish is O(tree)
// already; a workspace's commit, O(changes), has its image built in the
// background instead (buildMetaAhead). A host that cannot serve the
// overlay data path builds none; a failure costs only the first open.
// Then the commit's contents are prefetched from their packs if the
// capture's fill of the Store's cache left some out (dropped counts them
// before the capture: store.DB.FillDropped).
func (e *Engine) readyImage(ctx context.Context, id store.ID, dropped int64) {
	if id.IsZero() {
		return
	}
	c, err := e.db.Commit(ctx, id)
	if err == nil && !e.noImageAhead && e.overlayCheck() == nil {
		err = e.readyOpen(ctx, c.Root)
	}
	if err != nil {
		e.log.Warn("metadata image of a new commit", "commit", id.Short(), "err", err)
		return
	}
	e.prefetchLeft(c.Root, dropped)
}

// readyOpen does ahead what the first overlay workspace opened on root
// would otherwise do on its way: build root's metadata image and count
// its hard links (overlayKeepsLinks), each a walk of the whole tree the
// first time (the count is remembered per subtree, so a commit's costs
// what it changed).
func (e *Engine) readyOpen(ctx context.Context, root store.ID) error {
	if _, err := kerneloverlay.MetaImage(ctx, e.db, e.db.CacheDir(), root); err != nil {
		return err
	}
	_, err := e.links.Count(ctx, e.db, root)
	return err
}

// prefetchLeft prefetches the contents of root, a commit just captured,
// unless the capture's fill placed them all (none dropped since dropped).
func (e *Engine) prefetchLeft(root store.ID, dropped int64) {
	if !e.db.FillsCache() || e.db.FillDropped() != dropped {
		e.prefetch(root)
	}
}

// prefetchFresh is how long a commit whose contents a prefetch found all
// in the cache is not looked at again.
const prefetchFresh = time.Minute

// prefetcher fetches, in the background, the contents a workspace's
// commit needs that the Store's cache lacks (store.DB.Prefetch: in bulk,
// in pack order, at the lowest priority, the workspace's own reads
// first): a host of a fleet opening a commit it never saw, or a commit
// whose contents were evicted. One commit is fetched at a time, in the
// order asked; Shutdown cancels what runs.
type prefetcher struct {
	mu      sync.Mutex
	queue   []store.ID // roots to fetch
	running bool
	fresh   map[store.ID]time.Time // roots found complete, and when
	cancel  context.CancelFunc     // of the fetch running
	stopped bool
}

// prefetch queues the contents of root, the tree of a workspace just
// mounted, unless prefetching is off or root was found complete lately.
func (e *Engine) prefetch(root store.ID) {
	if e.noPrefetch || root.IsZero() {
		return
	}
	p := &e.prefetcher
	p.mu.Lock()
	defer p.mu.Unlock()
	if t, ok := p.fresh[root]; p.stopped || ok && time.Since(t) < prefetchFresh || slices.Contains(p.queue, root) {
		return
	}
	p.queue = append(p.queue, root)
	if p.running {
		return
	}
	p.running = true
	e.background.Go(e.prefetchLoop)
}

// prefetchLoop fetches the queued roots until none is left.
func (e *Engine) prefetchLoop() {
	p := &e.prefetcher
	for {
		p.mu.Lock()
		if len(p.queue) == 0 || p.stopped {
			p.running = false
			p.mu.Unlock()
			return
		}
		root := p.queue[0]
		p.queue = p.queue[1:]
		ctx, cancel := context.WithCancel(context.Background())
		p.cancel = cancel
		p.mu.Unlock()

		complete := e.prefetchRoot(ctx, root)
		cancel()
		p.mu.Lock()
		p.cancel = nil
		if complete {
			if p.fresh == nil {
				p.fresh = map[store.ID]time.Time{}
			}
			p.fresh[root] = time.Now()
		}
		p.mu.Unlock()
	}
}

// prefetchRoot fetches root's missing contents and reports whether the
// cache holds them all now.
func (e *Engine) prefetchRoot(ctx context.Context, root store.ID) bool {
	contents, err := kerneloverlay.Contents(ctx, e.db, e.db.CacheDir(), root)
	if err != nil {
		e.log.Warn("prefetch: list the commit's contents", "root", root.Short(), "err", err)
		return false
	}
	st, err := e.db.Prefetch(ctx, contents)
	if err != nil && ctx.Err() == nil {
		e.log.Warn("prefetch the commit's contents", "root", root.Short(), "err", err)
	}
	if st.Missing > 0 {
		e.log.Info("prefetched a commit's contents", "root", root.Short(), "contents", st.Contents, "missing", st.Missing,
			"placed", st.Placed, "bytes", st.Bytes, "reads", st.Reads, "read_bytes", st.ReadBytes, "ms", st.Took.Milliseconds())
	}
	return err == nil && st.Placed == st.Missing
}

// stopPrefetch cancels the fetch running and drops the queue.
func (e *Engine) stopPrefetch() {
	p := &e.prefetcher
	p.mu.Lock()
	defer p.mu.Unlock()
	p.stopped = true
	p.queue = nil
	if p.cancel != nil {
		p.cancel()
	}
}
