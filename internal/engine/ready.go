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
// They are not trusted yet: that is for the first workspace of the commit
// (readyRoot), so that a file damaged in between is found.
func (e *Engine) prefetchLeft(root store.ID, dropped int64) {
	if !e.noPrefetch && (!e.db.FillsCache() || e.db.FillDropped() != dropped) {
		e.queuePrefetch(prefetchJob{root: root, fetch: true})
	}
}

// prefetchFresh is how long a commit whose contents a prefetch found all
// in the cache is not looked at again.
const prefetchFresh = time.Minute

// prefetcher readies, in the background, the contents a workspace's
// commit needs: those in the Store's cache are checked against their IDs
// and trusted (the kernel then reads them with no daemon in the way),
// those it lacks fetched (store.DB.Ready, store.DB.Prefetch: in bulk, in
// pack order, at the lowest priority, the workspace's own reads first): a
// host of a fleet opening a commit it never saw, or a commit whose
// contents were evicted. One commit is readied at a time, in the order
// asked; Shutdown cancels what runs.
type prefetcher struct {
	mu      sync.Mutex
	queue   []prefetchJob // roots to ready
	running bool
	fresh   map[store.ID]time.Time // roots found complete and trusted, and when
	cancel  context.CancelFunc     // of the fetch running
	stopped bool
}

// prefetchJob is a root whose contents the cache lacks are to be fetched
// (fetch), and whose contents in the cache are to be trusted (trust: for
// a workspace mounted on it).
type prefetchJob struct {
	root         store.ID
	trust, fetch bool
}

// prefetch readies the contents of root, the tree of a workspace just
// mounted: trusts those in the cache and, unless prefetching is off,
// fetches the others; unless root was readied lately.
func (e *Engine) prefetch(root store.ID) {
	e.queuePrefetch(prefetchJob{root: root, trust: true, fetch: !e.noPrefetch})
}

// queuePrefetch queues j.
func (e *Engine) queuePrefetch(j prefetchJob) {
	root := j.root
	if root.IsZero() {
		return
	}
	p := &e.prefetcher
	p.mu.Lock()
	defer p.mu.Unlock()
	if t, ok := p.fresh[root]; p.stopped || ok && time.Since(t) < prefetchFresh || slices.Contains(p.queue, j) {
		return
	}
	p.queue = append(p.queue, j)
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
		j := p.queue[0]
		p.queue = p.queue[1:]
		ctx, cancel := context.WithCancel(context.Background())
		p.cancel = cancel
		p.mu.Unlock()

		complete := e.prefetchRoot(ctx, j)
		cancel()
		p.mu.Lock()
		p.cancel = nil
		if complete && j.trust {
			if p.fresh == nil {
				p.fresh = map[store.ID]time.Time{}
			}
			p.fresh[j.root] = time.Now()
		}
		p.mu.Unlock()
	}
}

// prefetchRoot fetches the missing contents of j's root, and trusts its
// contents if j says so; it reports whether the cache holds them all
// now (and trusts them, if asked).
func (e *Engine) prefetchRoot(ctx context.Context, j prefetchJob) bool {
	root := j.root
	list := kerneloverlay.Contents
	if j.trust {
		// In the order the workspace's reads are likely to come.
		list = func(ctx context.Context, l interface {
			Tree(ctx context.Context, id store.ID) (*store.Tree, error)
		}, _ string, root store.ID) ([]store.Content, error) {
			return kerneloverlay.TreeContents(ctx, l, root)
		}
	}
	contents, err := list(ctx, e.db, e.db.CacheDir(), root)
	if err != nil {
		e.log.Warn("prefetch: list the commit's contents", "root", root.Short(), "err", err)
		return false
	}
	var st store.ReadyStats
	switch {
	case j.trust && j.fetch:
		st, err = e.db.Ready(ctx, contents)
	case j.trust:
		st, err = e.db.Trust(ctx, contents)
	default:
		st.PrefetchStats, err = e.db.Prefetch(ctx, contents)
	}
	if err != nil && ctx.Err() == nil {
		e.log.Warn("prefetch the commit's contents", "root", root.Short(), "err", err)
	}
	if st.Missing > 0 || st.Damaged > 0 {
		e.log.Info("prefetched a commit's contents", "root", root.Short(), "contents", st.Contents, "missing", st.Missing,
			"damaged", st.Damaged, "placed", st.Placed, "bytes", st.Bytes, "reads", st.Reads, "read_bytes", st.ReadBytes,
			"ms", st.Took.Milliseconds())
	}
	return err == nil && st.Placed == st.Missing && (j.fetch || st.Missing == 0)
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
