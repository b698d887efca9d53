package engine

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"layerfs.dev/layerfs/internal/account"
	"layerfs.dev/layerfs/internal/commit"
	"layerfs.dev/layerfs/internal/store"
	"layerfs.dev/layerfs/wire"
	"layerfs.dev/layerfs/wire/errclass"
)

// classify gives a host file system error that carries no class (a
// missing directory named in a request) the class not found; store and
// commit errors carry their own classes.
func classify(err error) error {
	if err != nil && errors.Is(err, os.ErrNotExist) && errclass.Of(err) == errclass.Internal {
		return fmt.Errorf("%w: %w", errclass.NotFound, err)
	}
	return err
}

func timeOf(ns int64) time.Time { return time.Unix(0, ns).UTC() }

func idString(id store.ID) string {
	if id.IsZero() {
		return ""
	}
	return id.String()
}

func wireProject(p store.Project) wire.Project {
	return wire.Project{Name: p.Name, Created: p.Created, Layers: p.Layers, Branches: p.Branches, Image: p.Image}
}

func wireLayer(l store.Layer) wire.Layer {
	return wire.Layer{Project: l.Project, Index: l.Index, Commit: l.Commit.String(), Created: l.Created}
}

func wireBranch(b store.Branch) wire.Branch {
	return wire.Branch{Project: b.Project, Name: b.Name, Head: b.Head.String(), Created: b.Created, Updated: b.Updated}
}

func wireCommit(id store.ID, c *store.Commit) wire.Commit {
	var parents []string
	for _, p := range c.Parents {
		parents = append(parents, p.String())
	}
	return wire.Commit{
		ID: id.String(), Root: idString(c.Root), Parent: idString(c.Parent()), Parents: parents,
		Message: c.Message, Author: c.Author, Time: timeOf(c.TimeNs),
		Stats: wire.CommitStats(c.Stats),
	}
}

func publishResult(r store.Publish) string {
	switch r {
	case store.PublishCreated:
		return wire.Created
	case store.PublishUpToDate:
		return wire.UpToDate
	}
	return wire.HeadMoved
}

// hostDir checks that a daemon-host path from a request is an absolute
// existing directory.
func hostDir(p, what string) (string, error) {
	if !filepath.IsAbs(p) {
		return "", fmt.Errorf("%w: %s %q must be an absolute path on the daemon's host", errclass.Invalid, what, p)
	}
	st, err := os.Stat(p)
	if err != nil {
		return "", fmt.Errorf("%s: %w", what, classify(err))
	}
	if !st.IsDir() {
		return "", fmt.Errorf("%w: %s %q is not a directory", errclass.Invalid, what, p)
	}
	return filepath.Clean(p), nil
}

func (e *Engine) meta(msg, author string) commit.Meta {
	if author == "" {
		author = e.author
	}
	return commit.Meta{Message: msg, Author: author, TimeNs: e.now().UnixNano()}
}

// CreateProject creates a project, empty or from a directory on this host.
func (e *Engine) CreateProject(ctx context.Context, req wire.CreateProject) (wire.Project, error) {
	from := ""
	if req.FromPath != "" {
		d, err := hostDir(req.FromPath, "from_path")
		if err != nil {
			return wire.Project{}, err
		}
		from = d
	}
	msg := req.Message
	if msg == "" {
		msg = "first layer"
	}
	p, id, _, err := commit.CreateProject(ctx, e.db, req.Name, from, e.meta(msg, ""), nil)
	if err != nil {
		return wire.Project{}, classify(err)
	}
	e.readyImage(ctx, id)
	return wireProject(p), nil
}

// Projects lists every project.
func (e *Engine) Projects(ctx context.Context) ([]wire.Project, error) {
	ps, err := e.db.Projects(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]wire.Project, 0, len(ps))
	for _, p := range ps {
		out = append(out, wireProject(p))
	}
	return out, nil
}

// Project describes one project.
func (e *Engine) Project(ctx context.Context, name string) (wire.Project, error) {
	p, err := e.db.Project(ctx, name)
	if err != nil {
		return wire.Project{}, classify(err)
	}
	return wireProject(p), nil
}

// Layers lists a project's stack, first layer first.
func (e *Engine) Layers(ctx context.Context, project string) ([]wire.Layer, error) {
	ls, err := e.db.Layers(ctx, project)
	if err != nil {
		return nil, classify(err)
	}
	out := make([]wire.Layer, 0, len(ls))
	for _, l := range ls {
		out = append(out, wireLayer(l))
	}
	return out, nil
}

// AddLayer promotes a branch head to the project's next layer.
func (e *Engine) AddLayer(ctx context.Context, project string, req wire.AddLayer) (wire.Layer, error) {
	l, err := commit.AddLayer(ctx, e.db, project, req.Branch)
	if err != nil {
		return wire.Layer{}, classify(err)
	}
	return wireLayer(l), nil
}

// Branches lists a project's branches.
func (e *Engine) Branches(ctx context.Context, project string) ([]wire.Branch, error) {
	bs, err := e.db.Branches(ctx, project)
	if err != nil {
		return nil, classify(err)
	}
	out := make([]wire.Branch, 0, len(bs))
	for _, b := range bs {
		out = append(out, wireBranch(b))
	}
	return out, nil
}

// Branch describes one branch.
func (e *Engine) Branch(ctx context.Context, project, name string) (wire.Branch, error) {
	b, err := e.db.Branch(ctx, project, name)
	if err != nil {
		return wire.Branch{}, classify(err)
	}
	return wireBranch(b), nil
}

// ForkBranch makes a branch whose head is a layer, a commit or another
// branch's head. It copies nothing.
func (e *Engine) ForkBranch(ctx context.Context, project string, req wire.ForkBranch) (wire.Branch, error) {
	b, err := commit.Fork(ctx, e.db, project, req.Name, req.From)
	if err != nil {
		return wire.Branch{}, classify(err)
	}
	return wireBranch(b), nil
}

// DeleteBranch removes a branch; its commits stay until GC finds them
// unreachable. The Store refuses (errclass.Busy) a branch that a workspace stands
// on, in the same transaction as the delete.
func (e *Engine) DeleteBranch(ctx context.Context, project, name string) error {
	return classify(e.db.DeleteBranch(ctx, project, name))
}

// Commit resolves a ref to its commit.
func (e *Engine) Commit(ctx context.Context, project, ref string) (wire.Commit, error) {
	id, err := e.db.ResolveRef(ctx, project, ref)
	if err != nil {
		return wire.Commit{}, classify(err)
	}
	c, err := e.db.Commit(ctx, id)
	if err != nil {
		return wire.Commit{}, err
	}
	return wireCommit(id, c), nil
}

// Log lists commits reachable from ref through every parent, newest
// first (commit.Log's order), starting after the commit after ("": from
// the first).
func (e *Engine) Log(ctx context.Context, project, ref, after string, limit int) ([]wire.Commit, error) {
	if limit < 0 {
		return nil, fmt.Errorf("%w: negative limit", errclass.Invalid)
	}
	var from store.ID
	if after != "" {
		var err error
		if from, err = e.db.ResolveRef(ctx, project, after); err != nil {
			return nil, classify(err)
		}
	}
	es, err := commit.Log(ctx, e.db, project, ref, from, limit)
	if err != nil {
		return nil, classify(err)
	}
	out := make([]wire.Commit, 0, len(es))
	for i := range es {
		out = append(out, wireCommit(es[i].ID, &es[i].Commit))
	}
	return out, nil
}

// rootOf resolves ref to its commit and that commit's root tree.
func (e *Engine) rootOf(ctx context.Context, project, ref string) (commitID, root store.ID, err error) {
	id, err := e.db.ResolveRef(ctx, project, ref)
	if err != nil {
		return store.ZeroID, store.ZeroID, classify(err)
	}
	c, err := e.db.Commit(ctx, id)
	if err != nil {
		return store.ZeroID, store.ZeroID, classify(err)
	}
	return id, c.Root, nil
}

// Diff compares the trees of two refs, one page at a time.
func (e *Engine) Diff(ctx context.Context, project, from, to, cursor string, limit int) (wire.DiffPage, error) {
	if limit < 0 {
		return wire.DiffPage{}, fmt.Errorf("%w: negative limit", errclass.Invalid)
	}
	_, a, err := e.rootOf(ctx, project, from)
	if err != nil {
		return wire.DiffPage{}, err
	}
	_, b, err := e.rootOf(ctx, project, to)
	if err != nil {
		return wire.DiffPage{}, err
	}
	ds, next, err := commit.Diff(ctx, e.db, a, b, cursor, limit)
	if err != nil {
		return wire.DiffPage{}, classify(err)
	}
	page := wire.DiffPage{Changes: make([]wire.Change, 0, len(ds)), Next: next}
	for _, d := range ds {
		c := wire.Change{Path: d.Path, Kind: string(d.Kind)}
		if d.Old != nil {
			c.OldType = d.Old.Type.String()
		}
		if d.New != nil {
			c.NewType = d.New.Type.String()
		}
		page.Changes = append(page.Changes, c)
	}
	return page, nil
}

// CommitDir captures a directory on this host as a branch's next commit.
func (e *Engine) CommitDir(ctx context.Context, project, branch string, req wire.CommitDir) (wire.CommitResult, error) {
	ctx, acct := account.Open(ctx) // the receipt: what this request did
	dir, err := hostDir(req.FromPath, "from_path")
	if err != nil {
		return wire.CommitResult{}, err
	}
	t0 := time.Now()
	p, st, err := commit.FromDir(ctx, e.db, project, branch, dir, e.meta(req.Message, req.Author), nil)
	if err != nil {
		return wire.CommitResult{}, classify(err)
	}
	if p.Result != store.PublishUpToDate {
		e.readyImage(ctx, p.Commit)
	}
	r := storeReceipt(acct, st)
	r.WallNs = time.Since(t0).Nanoseconds()
	return wire.CommitResult{Commit: p.Commit.String(), Result: publishResult(p.Result), Head: p.Head.String(), Receipt: &r}, nil
}

// Checkout writes a ref's tree into an empty (or new) directory on this
// host, or over what is there with req.Overwrite.
func (e *Engine) Checkout(ctx context.Context, project string, req wire.Checkout) (wire.CheckoutResult, error) {
	if !filepath.IsAbs(req.Path) {
		return wire.CheckoutResult{}, fmt.Errorf("%w: checkout path %q must be absolute on the daemon's host", errclass.Invalid, req.Path)
	}
	id, root, err := e.rootOf(ctx, project, req.Ref)
	if err != nil {
		return wire.CheckoutResult{}, err
	}
	st, err := commit.Checkout(ctx, e.db, root, req.Path, &commit.CheckoutOptions{Overwrite: req.Overwrite})
	if err != nil {
		return wire.CheckoutResult{}, classify(err)
	}
	return wire.CheckoutResult{Commit: id.String(), Path: req.Path, Entries: st.Entries, Files: st.Files, Bytes: st.Bytes}, nil
}

// storeReceipt fills a receipt's Store fields from the request's account
// and the capture's statistics.
func storeReceipt(a *account.Account, st commit.Stats) wire.Receipt {
	d := store.Account(a)
	return wire.Receipt{
		SQL: wire.SQLStats{
			Statements: d.Statements, Rows: d.Rows,
			Transactions: d.Transactions, TxNs: d.TxTime.Nanoseconds(),
		},
		StoreBytesWritten: d.PackBytesWritten,
		StoreBytesRead:    d.PackBytesRead,
		CacheBytesWritten: d.CacheBytes,
		NewObjects:        st.NewChunks,
		ReusedObjects:     st.Chunks - st.NewChunks,
		NewBytes:          st.NewBytes,
		ReusedBytes:       st.Bytes - st.NewBytes,
	}
}

// GC removes what no branch, layer or workspace reaches (counts it only,
// with req.DryRun).
func (e *Engine) GC(ctx context.Context, req wire.GCRequest) (wire.GCResult, error) {
	t0 := time.Now()
	st, err := e.db.GC(ctx, store.GCOptions{DryRun: req.DryRun, Vacuum: req.Vacuum})
	if err != nil {
		return wire.GCResult{}, classify(err)
	}
	return wire.GCResult{
		ObjectsRemoved: st.DeadObjects + st.DeadChunks,
		BytesReclaimed: st.Reclaimed,
		PacksRewritten: st.PacksRewritten,
		PacksDeleted:   st.PacksDeleted,
		DurationNs:     time.Since(t0).Nanoseconds(),
		DryRun:         req.DryRun,
		LiveCommits:    st.LiveCommits,
		LiveChunks:     st.LiveChunks,
		DeadChunkBytes: st.DeadChunkBytes,
	}, nil
}

// Fsck checks the whole Store, its cache of contents included; with
// req.Repair it evicts the cache files it found damaged.
func (e *Engine) Fsck(ctx context.Context, req wire.FsckRequest) (wire.FsckReport, error) {
	r, err := e.db.FsckWith(ctx, store.FsckOptions{SkipCache: req.SkipCache})
	if err != nil {
		return wire.FsckReport{}, classify(err)
	}
	out := wire.FsckReport{OK: r.OK(), Checked: r.Objects + r.Chunks, Problems: []wire.FsckProblem{},
		Refs: r.Refs, Objects: r.Objects, Chunks: r.Chunks, Bytes: r.Bytes, Packs: r.Packs,
		CacheFiles: r.CacheFiles, CacheBytes: r.CacheBytes}
	if req.Repair {
		n, err := e.db.RepairCache(r)
		out.Repaired = int64(n)
		if err != nil {
			return out, classify(fmt.Errorf("fsck: repair the cache: %w", err))
		}
	}
	for _, p := range r.Problems {
		out.Problems = append(out.Problems, wire.FsckProblem{Object: idString(p.Object), Where: p.Where, Problem: p.Kind + ": " + p.Detail})
	}
	return out, nil
}

// Stats summarises what the Store holds.
func (e *Engine) Stats(ctx context.Context) (wire.StoreStats, error) {
	s, err := e.db.Stats(ctx)
	if err != nil {
		return wire.StoreStats{}, err
	}
	return wire.StoreStats{
		Objects: map[string]int64{
			"chunk": s.Chunks.Count, "manifest": s.Manifests.Count,
			"tree": s.Trees.Count, "commit": s.Commits.Count,
		},
		LogicalBytes:    s.LogicalBytes,
		StoredBytes:     s.StoredBytes,
		DedupRatio:      s.DedupRatio,
		DBBytes:         s.DBBytes,
		PackBytes:       s.PackBytes,
		PackFiles:       int64(s.PackFiles),
		CacheBytes:      s.CacheBytes,
		CacheFiles:      s.CacheFiles,
		CacheLimit:      s.CacheLimit,
		CacheVerified:   s.CacheTrusted,
		CacheUnverified: s.CacheFiles - s.CacheTrusted,
		CacheVerity:     s.CacheVerity,
		ObjectBytes: map[string]int64{
			"chunk": s.Chunks.Bytes, "manifest": s.Manifests.Bytes,
			"tree": s.Trees.Bytes, "commit": s.Commits.Bytes,
		},
		Projects: s.Projects, Branches: s.Branches, Layers: s.Layers, Workspaces: s.Workspaces,
	}, nil
}
