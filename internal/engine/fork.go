package engine

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"layerfs.dev/layerfs/internal/account"
	"layerfs.dev/layerfs/internal/commit"
	"layerfs.dev/layerfs/internal/store"
	"layerfs.dev/layerfs/wire"
	"layerfs.dev/layerfs/wire/errclass"
)

// ForkWorkspace opens req.Count new workspaces (default 1) holding
// everything the workspace id holds now, committed or not. The source's
// tree is captured as a commit captures it (no exec runs meanwhile, so it
// is one consistent state) and stored as a commit on its head that no
// branch names, each fork's base; each fork is mounted on the source's
// head, like a new workspace (the head's metadata image is the source's
// or built ahead at its commit), and the source's changes are made in it,
// so that its status and its next commit are the source's uncommitted
// changes. A source on an image gives its forks its root too: the root's
// changes are stored as a tree (and a commit on the image's) that each
// fork's root stands on, with an upper of its own. Forks stand on the source's branch with its platform, network,
// data path and quota, and with its conflicts, if an update left any. The
// source is not changed. The forks are mounted in parallel.
func (e *Engine) ForkWorkspace(ctx context.Context, id string, req wire.ForkRequest) (wire.ForkResult, error) {
	ctx, acct := account.Open(ctx) // the receipt: what this request did
	if err := e.checkOpen(); err != nil {
		return wire.ForkResult{}, err
	}
	n := req.Count
	if n == 0 {
		n = 1
	}
	if n < 0 || n > wire.MaxForkCount {
		return wire.ForkResult{}, fmt.Errorf("%w: count %d: want 1 to %d", errclass.Invalid, n, wire.MaxForkCount)
	}
	w, err := e.get(ctx, id)
	if err != nil {
		return wire.ForkResult{}, err
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.opts.Native {
		return wire.ForkResult{}, fmt.Errorf("%w: workspace %s is native: it has no history to fork", errclass.Invalid, id)
	}
	t0 := time.Now()
	tree, base, st, err := e.snapshot(ctx, w)
	if err != nil {
		return wire.ForkResult{}, fmt.Errorf("fork %s: %w", id, err)
	}
	root, rst, err := e.rootSnapshot(ctx, w)
	if err != nil {
		return wire.ForkResult{}, fmt.Errorf("fork %s: root: %w", id, err)
	}
	st.Chunks, st.NewChunks, st.Bytes, st.NewBytes = st.Chunks+rst.Chunks, st.NewChunks+rst.NewChunks, st.Bytes+rst.Bytes, st.NewBytes+rst.NewBytes
	forks := make([]*workspace, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range forks {
		wg.Go(func() { forks[i], errs[i] = e.forkOne(ctx, w, tree, base, root) })
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		for _, f := range forks {
			if f != nil {
				e.EndWorkspace(context.WithoutCancel(ctx), f.rec.ID, true)
			}
		}
		return wire.ForkResult{}, fmt.Errorf("fork %s: %w", id, err)
	}
	out := wire.ForkResult{Workspaces: make([]wire.Workspace, 0, n)}
	for _, f := range forks {
		out.Workspaces = append(out.Workspaces, f.info())
	}
	r := storeReceipt(acct, st)
	r.WallNs, r.Platform = time.Since(t0).Nanoseconds(), w.opts.Platform
	out.Receipt = &r
	e.log.Info("workspace forked", "id", id, "count", n, "ms", float64(r.WallNs)/1e6)
	return out, nil
}

// snapshot stores w's tree (its head's with its changes) and a commit of it
// on its head (w.mu held): the head itself when nothing changed.
func (e *Engine) snapshot(ctx context.Context, w *workspace) (tree, c store.ID, st commit.Stats, err error) {
	cs, err := w.mnt.Changes(ctx)
	if err != nil {
		return tree, c, st, fmt.Errorf("list changes: %w", err)
	}
	if len(cs.Changes) == 0 {
		return w.opts.HeadRoot, w.rec.Head, st, nil
	}
	b, err := e.db.NewBatch(ctx)
	if err != nil {
		return tree, c, st, err
	}
	defer b.Abort()
	if tree, st, err = commit.Build(ctx, b, e.db, w.opts.HeadRoot, cs.Changes, nil); err != nil {
		return tree, c, st, classify(err)
	}
	if err := b.Flush(ctx); err != nil {
		return tree, c, st, err
	}
	c, err = commit.StoreCommit(ctx, e.db, &store.Commit{Root: tree, Parents: []store.ID{w.rec.Head},
		Message: "workspace " + w.rec.ID + " as it was forked"})
	return tree, c, st, err
}

// rootSnapshot stores the tree of w's root (w.mu held) as it stands with
// its changes, and a commit of it on the commit the root stands on: the
// rootImage of w's forks (w's own when its root has no changes; nil when
// w has no image).
func (e *Engine) rootSnapshot(ctx context.Context, w *workspace) (*rootImage, commit.Stats, error) {
	var st commit.Stats
	if w.opts.Image == nil || w.root == nil {
		return w.opts.Image, st, nil
	}
	cs, err := w.root.Changes(ctx)
	if err != nil {
		return nil, st, fmt.Errorf("list changes: %w", err)
	}
	changes := rootChanges(cs.Changes)
	if len(changes) == 0 {
		return w.opts.Image, st, nil
	}
	on, err := e.db.Commit(ctx, w.opts.Image.base())
	if err != nil {
		return nil, st, err
	}
	b, err := e.db.NewBatch(ctx)
	if err != nil {
		return nil, st, err
	}
	defer b.Abort()
	tree, st, err := commit.Build(ctx, b, e.db, on.Root, changes, nil)
	if err != nil {
		return nil, st, classify(err)
	}
	if err := b.Flush(ctx); err != nil {
		return nil, st, err
	}
	c := &store.Commit{Root: tree, Parents: []store.ID{w.opts.Image.base()}, Author: on.Author,
		Message: "root of workspace " + w.rec.ID + " as it was forked", Stats: store.CommitStats{
			Files: on.Stats.Files + st.Delta.Files, Dirs: on.Stats.Dirs + st.Delta.Dirs,
			Bytes: on.Stats.Bytes + st.Delta.Bytes, Changed: st.Changes}}
	id, err := commit.StoreCommit(ctx, e.db, c)
	if err != nil {
		return nil, st, err
	}
	r := *w.opts.Image
	r.Env = slices.Clone(r.Env)
	r.On, r.OnRoot = id, tree
	return &r, st, nil
}

// forkOne makes, records and serves one fork of w (held): a workspace on
// w's head that then takes in w's changes (tree, stored as the commit
// base), its root standing on root (rootSnapshot).
func (e *Engine) forkOne(ctx context.Context, w *workspace, tree, base store.ID, root *rootImage) (*workspace, error) {
	id := newID()
	dir := e.workspaceDir(id)
	f := &workspace{rec: store.Workspace{ID: id, Project: w.rec.Project, Branch: w.rec.Branch, Base: base, Head: w.rec.Head,
		MountPath: filepath.Join(dir, "mnt"), UpperDir: filepath.Join(dir, "upper"), State: wire.StateMounted, Created: e.now().UTC(),
		// The same image; its root stands on w's root as it is now.
		Image: w.rec.Image}}
	f.opts = w.opts
	if mode, rules := w.net.now(); mode != "" {
		f.opts.Network, f.opts.Egress = mode, rules // the source's network now, recorded or not
	}
	if root != nil {
		f.opts.Image, f.rec.Image = root, root.base()
	}
	f.opts.Root, f.opts.Pending = w.opts.HeadRoot, nil
	if tree != f.opts.HeadRoot {
		// Recorded with the record: a daemon that dies before the fork
		// holds the source's changes makes them when it remounts it.
		f.opts.Pending = []catchUpStep{{From: f.opts.HeadRoot, To: tree}}
	}
	f.opts.Conflicts = append([]wire.Conflict(nil), w.opts.Conflicts...)
	if err := e.overlayKeepsLinks(ctx, &f.opts); err != nil {
		return nil, err
	}
	var err error
	if f.rec.Options, err = json.Marshal(f.opts); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	if f.rec, err = e.db.CreateWorkspace(ctx, f.rec); err != nil {
		os.RemoveAll(dir)
		return nil, classify(err)
	}
	if err := e.serve(ctx, f, true); err != nil {
		e.db.DeleteWorkspace(context.WithoutCancel(ctx), id)
		return nil, errors.Join(err, e.dropQuota(id), os.RemoveAll(dir), e.removeQuotaImage(id))
	}
	e.mu.Lock()
	e.live[id] = f
	e.mu.Unlock()
	e.metrics.workspacesCreated.Add(1)
	if len(f.opts.Pending) > 0 {
		f.mu.Lock()
		defer f.mu.Unlock()
		if _, err := e.catchUp(ctx, f); err != nil {
			return f, err
		}
	}
	return f, nil
}
