package engine

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"time"

	"golang.org/x/sys/unix"

	"layerfs.dev/layerfs/internal/account"
	"layerfs.dev/layerfs/internal/commit"
	"layerfs.dev/layerfs/internal/fsids"
	"layerfs.dev/layerfs/internal/store"
	"layerfs.dev/layerfs/internal/textmerge"
	"layerfs.dev/layerfs/wire"
	"layerfs.dev/layerfs/wire/errclass"
)

// prefer parses a wire preference.
func prefer(p string) (textmerge.Prefer, error) {
	switch p {
	case "":
		return textmerge.PreferNone, nil
	case wire.PreferOurs:
		return textmerge.PreferOurs, nil
	case wire.PreferTheirs:
		return textmerge.PreferTheirs, nil
	}
	return 0, fmt.Errorf("%w: prefer %q: want %q or %q", errclass.Invalid, p, wire.PreferOurs, wire.PreferTheirs)
}

// checkRenames checks a merge's rename options: a threshold is a
// percentage, and asks for renames that NoRenames turns off.
func checkRenames(threshold int, none bool) error {
	switch {
	case threshold < 0 || threshold > 100:
		return fmt.Errorf("%w: rename_threshold %d: want a percentage, 1 to 100 (0: %d)", errclass.Invalid, threshold, commit.DefaultRenameThreshold)
	case none && threshold != 0:
		return fmt.Errorf("%w: rename_threshold %d with no_renames: one or the other", errclass.Invalid, threshold)
	}
	return nil
}

func ids(in []store.ID) []string {
	out := make([]string, 0, len(in))
	for _, id := range in {
		out = append(out, id.String())
	}
	return out
}

func wireSide(s commit.ConflictSide) wire.ConflictSide {
	out := wire.ConflictSide{Path: s.Path}
	if e := s.Entry; e != nil {
		out.Type, out.Mode, out.Object, out.Target = e.Type.String(), e.Mode, idString(e.Object), e.Target
	}
	return out
}

func wireConflicts(cs []commit.Conflict) []wire.Conflict {
	out := make([]wire.Conflict, 0, len(cs))
	for _, c := range cs {
		out = append(out, wire.Conflict{Path: c.Path, Kind: string(c.Kind), Base: wireSide(c.Base), Ours: wireSide(c.Ours),
			Theirs: wireSide(c.Theirs), Markers: c.Markers, Moved: c.Moved})
	}
	return out
}

// conflictError is the error of a merge that conflicted: class conflict,
// with the conflicts for the API to send.
func conflictError(what string, cs []wire.Conflict) error {
	paths := make([]string, 0, min(len(cs), 5))
	for i, c := range cs {
		if i == 5 {
			paths = append(paths, "...")
			break
		}
		paths = append(paths, c.Path+" ("+c.Kind+")")
	}
	return &wire.Error{Code: wire.CodeConflict, Conflicts: cs,
		Message: fmt.Sprintf("%s: %d conflicts, nothing published: %v", what, len(cs), paths)}
}

// MergeBranch merges the commit req.Source names into the branch req.Into
// of project, publishing by compare-and-swap on its head like a commit
// (commit.MergeInto): fast-forward, merged or up-to-date; a conflict
// publishes nothing and fails with class conflict, listing the paths. The
// source must share history with the branch (a ref of another project
// does not).
func (e *Engine) MergeBranch(ctx context.Context, project string, req wire.MergeRequest) (wire.MergeResult, error) {
	ctx, acct := account.Open(ctx) // the receipt: what this request did
	if err := e.checkOpen(); err != nil {
		return wire.MergeResult{}, err
	}
	pref, err := prefer(req.Prefer)
	if err != nil {
		return wire.MergeResult{}, err
	}
	if req.Source == "" || req.Into == "" {
		return wire.MergeResult{}, fmt.Errorf("%w: a merge needs a source and a branch to merge into", errclass.Invalid)
	}
	if err := checkRenames(req.RenameThreshold, req.NoRenames); err != nil {
		return wire.MergeResult{}, err
	}
	if _, err := e.db.Branch(ctx, project, req.Into); err != nil {
		return wire.MergeResult{}, classify(err)
	}
	src, err := e.db.ResolveRef(ctx, project, req.Source)
	if err != nil {
		return wire.MergeResult{}, classify(err)
	}
	t0 := time.Now()
	out, err := commit.MergeInto(ctx, e.db, commit.MergeRequest{Project: project, Branch: req.Into, Source: src, SourceName: req.Source,
		Meta: e.meta(req.Message, req.Author), Prefer: pref, DryRun: req.DryRun,
		RenameThreshold: req.RenameThreshold, NoRenames: req.NoRenames})
	if err != nil {
		return wire.MergeResult{}, classify(err)
	}
	if out.Result == commit.MergeConflicts {
		return wire.MergeResult{}, conflictError("merge "+req.Source+" into "+req.Into, wireConflicts(out.Conflicts))
	}
	r := storeReceipt(acct, out.Stats.Build)
	r.WallNs = time.Since(t0).Nanoseconds()
	e.log.Info("merge", "project", project, "source", req.Source, "into", req.Into, "result", out.Result, "dry_run", req.DryRun, "tries", out.Tries)
	return wire.MergeResult{Result: out.Result, Commit: idString(out.Commit), Head: out.Head.String(), Tree: idString(out.Tree),
		Bases: ids(out.Bases), Tries: out.Tries, DryRun: req.DryRun, Paths: out.Stats.Paths, Receipt: &r}, nil
}

// catchUpStep is one change of the tree a live workspace shows: the
// difference of two trees made through its mount (commit.Apply), then,
// with Mark, the new tree recorded as what the workspace's last commit
// holds. Steps are recorded in the workspace's record before they are
// made, and a remount makes them again: commit.Apply finishes what a
// killed daemon left half done.
type catchUpStep struct {
	From store.ID `json:"from"`
	To   store.ID `json:"to"`
	Mark bool     `json:"mark,omitempty"`
}

// save writes w's record with its options. w.mu is held.
func (e *Engine) save(ctx context.Context, w *workspace) error {
	w.syncNetwork()
	var err error
	if w.rec.Options, err = json.Marshal(w.opts); err != nil {
		return err
	}
	w.rec.Updated = e.now().UTC()
	if w.rec, err = e.db.UpdateWorkspace(ctx, w.rec); err != nil {
		return fmt.Errorf("record workspace %s: %w", w.rec.ID, err)
	}
	return nil
}

// catchUp makes w's pending steps in its view and clears them: w.mu is
// held and the steps are recorded.
func (e *Engine) catchUp(ctx context.Context, w *workspace) (commit.ApplyStats, error) {
	var total commit.ApplyStats
	for _, s := range w.opts.Pending {
		st, err := e.applyView(ctx, w, s.From, s.To)
		total.Removed += st.Removed
		total.Written += st.Written
		total.Bytes += st.Bytes
		if err != nil {
			return total, fmt.Errorf("bring workspace %s to tree %s: %w", w.rec.ID, s.To.Short(), err)
		}
		if s.Mark {
			if m, ok := w.mnt.(interface{ Settle(context.Context) }); ok {
				m.Settle(ctx) // the files Apply closed, released
			}
			cs, err := w.mnt.Changes(ctx)
			if err != nil {
				return total, fmt.Errorf("list changes of %s: %w", w.rec.ID, err)
			}
			w.mnt.MarkCommitted(s.To, cs)
		}
	}
	w.opts.Pending = nil
	return total, e.save(ctx, w)
}

// applyView makes w's view go from tree from to tree to, through its
// mount, as the workspace's own writes would: on a mount over id-mapped
// layers as the mapping's root, the owners shifted to its host ids.
func (e *Engine) applyView(ctx context.Context, w *workspace, from, to store.ID) (commit.ApplyStats, error) {
	root, err := rootDir(w.data)
	if err != nil {
		return commit.ApplyStats{}, err
	}
	defer unix.Close(root)
	var st commit.ApplyStats
	run := func() error {
		var opts commit.ApplyOptions
		if m := w.idmap(); m != nil {
			opts.IDOffset = m.Root
		}
		st, err = commit.Apply(ctx, e.db, from, to, root, &opts)
		return err
	}
	if m := w.idmap(); m != nil {
		return st, fsids.Do(m.Root, run)
	}
	return st, run()
}

// mergeCommitted merges the workspace's commit own, which lost the race
// to the branch head, with the new head and publishes the merge; the
// workspace then shows and stands on the merge (its own changes are all
// in own: w.mu is held since they were listed).
func (e *Engine) mergeCommitted(ctx context.Context, w *workspace, own store.ID, meta commit.Meta) (wire.CommitResult, commit.MergeStats, error) {
	oc, err := e.db.Commit(ctx, own)
	if err != nil {
		return wire.CommitResult{}, commit.MergeStats{}, err
	}
	if meta.Message == "" {
		meta.Message = fmt.Sprintf("merge workspace %s into %s", w.rec.ID, w.rec.Branch)
	}
	out, err := commit.MergeInto(ctx, e.db, commit.MergeRequest{Project: w.rec.Project, Branch: w.rec.Branch, Source: own,
		SourceName: "workspace " + w.rec.ID, Meta: meta})
	if err != nil {
		return wire.CommitResult{}, out.Stats, classify(err)
	}
	if out.Result == commit.MergeConflicts {
		return wire.CommitResult{}, out.Stats, conflictError(fmt.Sprintf("merge commit %s of workspace %s into %s", own.Short(), w.rec.ID, w.rec.Branch),
			wireConflicts(out.Conflicts))
	}
	mc, err := e.db.Commit(ctx, out.Commit)
	if err != nil {
		return wire.CommitResult{}, out.Stats, err
	}
	w.rec.Head, w.opts.HeadRoot, w.opts.Conflicts = out.Commit, mc.Root, nil
	w.opts.Pending = []catchUpStep{{From: oc.Root, To: mc.Root, Mark: true}}
	if err := e.save(ctx, w); err != nil {
		return wire.CommitResult{}, out.Stats, err
	}
	if _, err := e.catchUp(ctx, w); err != nil {
		return wire.CommitResult{}, out.Stats, err
	}
	e.buildMetaAhead(w, mc.Root)
	result := wire.Merged
	if out.Result == commit.MergeFastForward {
		result = wire.Created
	}
	return wire.CommitResult{Commit: out.Commit.String(), Result: result, Head: out.Head.String(),
		Merge: &wire.MergeInfo{Own: own.String(), Bases: ids(out.Bases), Tries: out.Tries}}, out.Stats, nil
}

// UpdateWorkspace brings the head of a branch (req.Ref; default the
// workspace's) into a live workspace, its uncommitted changes kept: the
// workspace's tree (its last commit and its changes) is merged with the
// ref's commit against their merge base, the difference made in the view
// through the mount, and the workspace then stands on the ref's commit
// with its changes rebased on it, still uncommitted. Refused (busy) while
// an exec runs in the workspace. A conflict changes nothing and fails with
// class conflict; with req.ConflictMarkers the workspace takes the merge
// with git-style markers in the conflicted files (other conflicts keep the
// workspace's entry), and the conflicts stay listed in its status, a
// commit refused, until they are resolved (ResolveConflicts, or the
// markers removed).
func (e *Engine) UpdateWorkspace(ctx context.Context, id string, req wire.UpdateRequest) (wire.UpdateResult, error) {
	ctx, acct := account.Open(ctx) // the receipt: what this request did
	if err := e.checkOpen(); err != nil {
		return wire.UpdateResult{}, err
	}
	pref, err := prefer(req.Prefer)
	if err != nil {
		return wire.UpdateResult{}, err
	}
	w, err := e.get(ctx, id)
	if err != nil {
		return wire.UpdateResult{}, err
	}
	if n := w.execs.Load(); n > 0 {
		return wire.UpdateResult{}, fmt.Errorf("%w: %d execs run in workspace %s: update it when they are done", errclass.Busy, n, id)
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.opts.Native {
		return wire.UpdateResult{}, fmt.Errorf("%w: workspace %s is native: it has no history", errclass.Invalid, id)
	}
	if open := e.unresolved(w); len(open) > 0 {
		return wire.UpdateResult{}, conflictError("workspace "+id+" has conflicts of its last update to resolve first", open)
	}
	t0 := time.Now()
	ref := req.Ref
	if ref == "" {
		ref = w.rec.Branch
	}
	target, err := e.db.ResolveRef(ctx, w.rec.Project, ref)
	if err != nil {
		return wire.UpdateResult{}, classify(err)
	}
	if up, err := commit.IsAncestor(ctx, e.db, target, w.rec.Head); err != nil || up {
		return wire.UpdateResult{Result: wire.UpToDate, Head: w.rec.Head.String()}, err
	}
	bases, err := commit.MergeBases(ctx, e.db, w.rec.Head, target)
	if err != nil {
		return wire.UpdateResult{}, err
	}
	if len(bases) == 0 {
		return wire.UpdateResult{}, fmt.Errorf("update %s to %s: %w", id, ref, commit.ErrUnrelated)
	}
	tc, err := e.db.Commit(ctx, target)
	if err != nil {
		return wire.UpdateResult{}, err
	}
	u := &update{e: e, w: w, ref: ref, target: target, targetRoot: tc.Root, bases: bases}
	res, err := u.merge(ctx, req.ConflictMarkers, pref)
	if err != nil {
		return wire.UpdateResult{}, err
	}
	st, err := u.take(ctx, res)
	if err != nil {
		return wire.UpdateResult{}, err
	}
	r := storeReceipt(acct, res.Stats.Build)
	r.WallNs = time.Since(t0).Nanoseconds()
	e.log.Info("workspace update", "id", id, "ref", ref, "head", target.Short(), "conflicts", len(res.Conflicts), "written", st.Written, "removed", st.Removed)
	return wire.UpdateResult{Result: wire.Updated, Head: target.String(), Bases: ids(bases), Changed: st.Written + st.Removed,
		Conflicts: wireConflicts(res.Conflicts), Receipt: &r}, nil
}

// update is one UpdateWorkspace: the workspace, the commit it goes to and
// what the merge made.
type update struct {
	e          *Engine
	w          *workspace
	ref        string
	target     store.ID
	targetRoot store.ID
	bases      []store.ID
	own        store.ID // the workspace's tree: its head's with its changes
	ownCommit  store.ID // a commit of it (the head itself when nothing changed)
}

// merge stores the workspace's tree and merges it with the target's.
func (u *update) merge(ctx context.Context, markers bool, pref textmerge.Prefer) (commit.MergeResult, error) {
	e, w := u.e, u.w
	cs, err := w.mnt.Changes(ctx)
	if err != nil {
		return commit.MergeResult{}, fmt.Errorf("list changes of %s: %w", w.rec.ID, err)
	}
	b, err := e.db.NewBatch(ctx)
	if err != nil {
		return commit.MergeResult{}, err
	}
	defer b.Abort()
	u.own, u.ownCommit = w.opts.HeadRoot, w.rec.Head
	if len(cs.Changes) > 0 {
		if u.own, _, err = commit.Build(ctx, b, e.db, w.opts.HeadRoot, cs.Changes, nil); err != nil {
			return commit.MergeResult{}, classify(err)
		}
		if err := b.Flush(ctx); err != nil {
			return commit.MergeResult{}, err
		}
	}
	res, err := commit.MergeTrees(ctx, b, e.db, u.bases, u.own, u.targetRoot, &commit.MergeOptions{Markers: markers, Prefer: pref,
		OursLabel: "workspace " + w.rec.ID, TheirsLabel: u.ref})
	if err != nil {
		return res, err
	}
	if !res.Clean && !markers {
		return res, conflictError(fmt.Sprintf("update workspace %s to %s", w.rec.ID, u.ref), wireConflicts(res.Conflicts))
	}
	if err := b.Flush(ctx); err != nil {
		return res, err
	}
	if len(cs.Changes) > 0 {
		u.ownCommit, err = commit.StoreCommit(ctx, e.db, &store.Commit{Root: u.own, Parents: []store.ID{w.rec.Head},
			Message: "uncommitted changes of workspace " + w.rec.ID + " before an update"})
	}
	return res, err
}

// take makes the workspace stand on the target with the merged tree in
// its view: the record first (the steps, and a commit of the merged tree
// on the target, the workspace's and the old base, which keeps all of it
// from GC), then the view, in two steps: back to the target's tree,
// recorded as the last commit, then on to the merged tree, whose
// difference is the workspace's changes.
func (u *update) take(ctx context.Context, res commit.MergeResult) (commit.ApplyStats, error) {
	e, w := u.e, u.w
	parents := []store.ID{u.target}
	for _, p := range []store.ID{u.ownCommit, w.rec.Base} {
		if !p.IsZero() && !slices.Contains(parents, p) {
			parents = append(parents, p)
		}
	}
	keep, err := commit.StoreCommit(ctx, e.db, &store.Commit{Root: res.Tree, Parents: parents,
		Message: fmt.Sprintf("workspace %s updated to %s", w.rec.ID, u.ref)})
	if err != nil {
		return commit.ApplyStats{}, err
	}
	w.rec.Base, w.rec.Head, w.opts.HeadRoot = keep, u.target, u.targetRoot
	w.opts.Conflicts = wireConflicts(res.Conflicts)
	w.opts.Pending = []catchUpStep{{From: u.own, To: u.targetRoot, Mark: true}, {From: u.targetRoot, To: res.Tree}}
	if err := e.save(ctx, w); err != nil {
		return commit.ApplyStats{}, err
	}
	return e.catchUp(ctx, w)
}

// unresolved are w's recorded conflicts not resolved yet: all but those
// with markers whose file no longer holds any (or is gone). w.mu is held.
func (e *Engine) unresolved(w *workspace) []wire.Conflict {
	if len(w.opts.Conflicts) == 0 {
		return nil
	}
	root, err := rootDir(w.data)
	if err != nil {
		return w.opts.Conflicts
	}
	defer unix.Close(root)
	var out []wire.Conflict
	for _, c := range w.opts.Conflicts {
		if c.Markers {
			f, size, err := openRegular(root, c.Path)
			if err != nil {
				continue // gone, or no longer a file: settled
			}
			b := make([]byte, min(size, commit.DefaultTextLimit))
			n, _ := f.ReadAt(b, 0)
			f.Close()
			if !textmerge.HasMarkers(b[:n]) {
				continue
			}
		}
		out = append(out, c)
	}
	return out
}

// ResolveConflicts marks conflicts an update left in a workspace resolved,
// its files as they are (req.Paths; none: all), and returns those left.
func (e *Engine) ResolveConflicts(ctx context.Context, id string, req wire.ResolveRequest) ([]wire.Conflict, error) {
	if err := e.checkOpen(); err != nil {
		return nil, err
	}
	w, err := e.get(ctx, id)
	if err != nil {
		return nil, err
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, p := range req.Paths {
		if !slices.ContainsFunc(w.opts.Conflicts, func(c wire.Conflict) bool { return c.Path == p }) {
			return nil, fmt.Errorf("%w: workspace %s has no conflict at %q", errclass.NotFound, id, p)
		}
	}
	var left []wire.Conflict
	for _, c := range w.opts.Conflicts {
		if len(req.Paths) > 0 && !slices.Contains(req.Paths, c.Path) {
			left = append(left, c)
		}
	}
	w.opts.Conflicts = left
	if err := e.save(ctx, w); err != nil {
		return nil, err
	}
	if out := e.unresolved(w); out != nil {
		return out, nil
	}
	return []wire.Conflict{}, nil
}
