package engine

import (
	"context"
	"sync"
	"time"

	"layerfs.dev/layerfs/internal/kerneloverlay"
	"layerfs.dev/layerfs/internal/serial"
	"layerfs.dev/layerfs/internal/store"
)

// readyImage builds the metadata image of the commit id, just published
// from a directory of this host (an import, a commit of a directory), so
// that the first workspace opened on it mounts it at once instead of
// building it (readyOpen). Such a publish is O(tree)
// already; a workspace's commit, O(changes), has its image built in the
// background instead (buildMetaAhead). A host that cannot serve the
// overlay data path builds none; a failure costs only the first open.
// What the capture's fill left out of the Store's cache the Store fetches
// itself (store.Batch.FillBehind).
func (e *Engine) readyImage(ctx context.Context, id store.ID) {
	if id.IsZero() || e.noImageAhead || e.overlayCheck() != nil {
		return
	}
	c, err := e.db.Commit(ctx, id)
	if err == nil {
		err = e.readyOpen(ctx, c.Root)
	}
	if err != nil {
		e.log.Warn("metadata image of a new commit", "commit", id.Short(), "err", err)
	}
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

// prefetchFresh is how long a commit whose contents a prefetch found all
// in the cache is not looked at again.
const prefetchFresh = time.Minute

// prefetcher readies, in the background, the contents a workspace's
// commit needs: those in the Store's cache are checked against their IDs
// and trusted (the kernel then reads them with no daemon in the way),
// those it lacks fetched (store.DB.Ready: in bulk, in pack order, at the
// lowest priority, the workspace's own reads first): a host of a fleet
// opening a commit it never saw, or a commit whose contents were evicted.
// One commit is readied at a time, in the order asked; Shutdown cancels
// what runs.
type prefetcher struct {
	queue *serial.Queue[prefetchJob]
	mu    sync.Mutex
	fresh map[store.ID]time.Time // roots found complete and trusted, and when
}

// prefetchJob is a root whose contents in the cache are to be trusted,
// and those the cache lacks fetched (fetch).
type prefetchJob struct {
	root  store.ID
	fetch bool
}

// startBackground makes the queues of the work the engine does ahead of
// need, which Shutdown waits for.
func (e *Engine) startBackground() {
	e.ahead = serial.New(e.buildMeta, serial.Latest(), serial.Go(e.background.Go))
	e.prefetcher.queue = serial.New(e.prefetchRun, serial.Go(e.background.Go))
}

// prefetch readies the contents of root, the tree of a workspace just
// mounted: trusts those in the cache and, unless prefetching is off,
// fetches the others; unless root was readied lately.
func (e *Engine) prefetch(root store.ID) {
	p := &e.prefetcher
	p.mu.Lock()
	t, ok := p.fresh[root]
	p.mu.Unlock()
	if root.IsZero() || ok && time.Since(t) < prefetchFresh {
		return
	}
	p.queue.Add(prefetchJob{root: root, fetch: !e.noPrefetch})
}

// prefetchRun readies j's root, and remembers it fresh if the cache holds
// and trusts every content of it now.
func (e *Engine) prefetchRun(ctx context.Context, j prefetchJob) {
	if !e.prefetchRoot(ctx, j) {
		return
	}
	p := &e.prefetcher
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.fresh == nil {
		p.fresh = map[store.ID]time.Time{}
	}
	p.fresh[j.root] = time.Now()
}

// prefetchRoot trusts the contents of j's root in the cache, in the order
// the workspace's reads are likely to come, and fetches those missing if
// j says so; it reports whether the cache holds and trusts them all now.
func (e *Engine) prefetchRoot(ctx context.Context, j prefetchJob) bool {
	root := j.root
	contents, err := kerneloverlay.TreeContents(ctx, e.db, root)
	if err != nil {
		e.log.Warn("prefetch: list the commit's contents", "root", root.Short(), "err", err)
		return false
	}
	var st store.ReadyStats
	if j.fetch {
		st, err = e.db.Ready(ctx, contents)
	} else {
		st, err = e.db.Trust(ctx, contents)
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
func (e *Engine) stopPrefetch() { e.prefetcher.queue.Stop() }
