package commit

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"layerfs.dev/layerfs/internal/store"
)

// Meta is what a person or agent says about a commit.
type Meta struct {
	Message string
	Author  string
	TimeNs  int64 // 0: now
}

func (m Meta) time() int64 {
	if m.TimeNs == 0 {
		return time.Now().UnixNano()
	}
	return m.TimeNs
}

// captureCommit captures dir (or, when dir is "", the empty tree) into a
// stored, flushed root tree.
func captureRoot(ctx context.Context, db *store.DB, dir string, opts *Options) (store.ID, Stats, error) {
	b, err := db.NewBatch(ctx)
	if err != nil {
		return store.ZeroID, Stats{}, err
	}
	defer b.Abort()
	var root store.ID
	var st Stats
	if dir == "" {
		root, st, err = Build(ctx, b, db, store.ZeroID, nil, opts)
	} else {
		root, st, err = CaptureDir(ctx, b, db, dir, opts)
	}
	if err != nil {
		return root, st, err
	}
	b.FillBehind(root)
	if err := b.Flush(ctx); err != nil {
		return root, st, err
	}
	return root, st, nil
}

// CreateProject creates a project whose first layer, and the head of its
// branch main, is a commit of the directory from (empty when from is "").
// A bad name, an existing project or a missing directory fail before
// anything is written.
func CreateProject(ctx context.Context, db *store.DB, name, from string, meta Meta, opts *Options) (store.Project, store.ID, Stats, error) {
	fail := func(err error) (store.Project, store.ID, Stats, error) {
		return store.Project{}, store.ZeroID, Stats{}, fmt.Errorf("create project %q: %w", name, err)
	}
	if err := store.ValidName(name); err != nil {
		return fail(err)
	}
	if _, err := db.Project(ctx, name); err == nil {
		return fail(store.ErrExists)
	} else if !errors.Is(err, store.ErrNotFound) {
		return fail(err)
	}
	if from != "" {
		fi, err := os.Stat(from)
		if err != nil {
			return fail(err)
		}
		if !fi.IsDir() {
			return fail(fmt.Errorf("%s: not a directory", from))
		}
	}
	root, st, err := captureRoot(ctx, db, from, opts)
	if err != nil {
		return fail(err)
	}
	if meta.Message == "" {
		meta.Message = "create project " + name
	}
	c := &store.Commit{Root: root, Message: meta.Message, Author: meta.Author, TimeNs: meta.time(), Stats: st.Delta}
	c.Stats.Changed = st.Delta.Files + st.Delta.Dirs
	id, err := writeCommit(ctx, db, c)
	if err != nil {
		return fail(err)
	}
	p, err := db.CreateProject(ctx, name, id)
	if err != nil {
		return store.Project{}, id, st, err
	}
	return p, id, st, nil
}

// FromDir captures dir as the next commit on a branch, published by
// compare-and-swap against the head it read first. The commit's stats
// count the whole tree and the paths that differ from the parent.
func FromDir(ctx context.Context, db *store.DB, project, branch, dir string, meta Meta, opts *Options) (Published, Stats, error) {
	fail := func(err error) (Published, Stats, error) {
		return Published{}, Stats{}, fmt.Errorf("commit %s to %s/%s: %w", dir, project, branch, err)
	}
	b, err := db.Branch(ctx, project, branch)
	if err != nil {
		return fail(err)
	}
	fi, err := os.Stat(dir)
	if err != nil {
		return fail(err)
	}
	if !fi.IsDir() {
		return fail(fmt.Errorf("%s: not a directory", dir))
	}
	root, st, err := captureRoot(ctx, db, dir, opts)
	if err != nil {
		return fail(err)
	}
	var parentRoot store.ID
	if !b.Head.IsZero() {
		pc, err := db.Commit(ctx, b.Head)
		if err != nil {
			return fail(err)
		}
		parentRoot = pc.Root
	}
	diffs, _, err := Diff(ctx, db, parentRoot, root, "", 0)
	if err != nil {
		return fail(err)
	}
	c := &store.Commit{Root: root, Message: meta.Message, Author: meta.Author, TimeNs: meta.time(), Stats: st.Delta}
	c.Stats.Changed = int64(len(diffs))
	p, err := Publish(ctx, db, project, branch, b.Head, c)
	if err != nil {
		return p, st, fmt.Errorf("commit %s to %s/%s: %w", dir, project, branch, err)
	}
	return p, st, nil
}

// FromChanges applies changes to the tree of the commit base and
// publishes the result on a branch whose head is expected to be base: what
// a workspace does when it commits. Only changed paths are visited.
func FromChanges(ctx context.Context, db *store.DB, project, branch string, base store.ID, changes []Change, meta Meta, opts *Options) (Published, Stats, error) {
	fail := func(err error) (Published, Stats, error) {
		return Published{}, Stats{}, fmt.Errorf("commit to %s/%s: %w", project, branch, err)
	}
	var baseRoot store.ID
	var totals store.CommitStats
	if !base.IsZero() {
		bc, err := db.Commit(ctx, base)
		if err != nil {
			return fail(err)
		}
		baseRoot, totals = bc.Root, bc.Stats
	}
	b, err := db.NewBatch(ctx)
	if err != nil {
		return fail(err)
	}
	defer b.Abort()
	root, st, err := Build(ctx, b, db, baseRoot, changes, opts)
	if err == nil {
		b.FillBehind(root)
		err = b.Flush(ctx)
	}
	if err != nil {
		return fail(err)
	}
	c := &store.Commit{Root: root, Message: meta.Message, Author: meta.Author, TimeNs: meta.time(), Stats: store.CommitStats{
		Files:   totals.Files + st.Delta.Files,
		Dirs:    totals.Dirs + st.Delta.Dirs,
		Bytes:   totals.Bytes + st.Delta.Bytes,
		Changed: st.Changes,
	}}
	p, err := Publish(ctx, db, project, branch, base, c)
	if err != nil {
		return p, st, fmt.Errorf("commit to %s/%s: %w", project, branch, err)
	}
	return p, st, nil
}

// Fork creates branch name in project with its head at ref (a layer
// "layer:N", a branch, or a commit id or prefix). It copies nothing.
func Fork(ctx context.Context, db *store.DB, project, name, ref string) (store.Branch, error) {
	if err := store.ValidName(name); err != nil {
		return store.Branch{}, fmt.Errorf("fork: %w", err)
	}
	id, err := db.ResolveRef(ctx, project, ref)
	if err != nil {
		return store.Branch{}, fmt.Errorf("fork: %w", err)
	}
	return db.CreateBranch(ctx, project, name, id)
}

// AddLayer makes a branch's head the project's next layer.
func AddLayer(ctx context.Context, db *store.DB, project, branch string) (store.Layer, error) {
	b, err := db.Branch(ctx, project, branch)
	if err != nil {
		return store.Layer{}, fmt.Errorf("add layer: %w", err)
	}
	return db.AddLayer(ctx, project, b.Head)
}

// LogEntry is one commit of a history walk.
type LogEntry struct {
	ID store.ID `json:"id"`
	store.Commit
}

// Log lists the commits reachable from ref through every parent, newest
// first (a commit before its ancestors: by generation, then time, then id),
// starting after the commit after (ZeroID: from the first) and returning at
// most limit commits (0: all). The order is fixed, so a caller pages by
// passing the last commit of a page as after.
func Log(ctx context.Context, db *store.DB, project, ref string, after store.ID, limit int) ([]LogEntry, error) {
	id, err := db.ResolveRef(ctx, project, ref)
	if err != nil {
		return nil, fmt.Errorf("log: %w", err)
	}
	var out []LogEntry
	skipping := !after.IsZero()
	err = Walk(ctx, db, []store.ID{id}, func(id store.ID, c *store.Commit) bool {
		if skipping {
			skipping = id != after
			return true
		}
		out = append(out, LogEntry{ID: id, Commit: *c})
		return limit <= 0 || len(out) < limit
	})
	if err != nil {
		return out, fmt.Errorf("log: %w", err)
	}
	if skipping {
		return nil, fmt.Errorf("log: commit %s is not reachable from %q: %w", after.Short(), ref, store.ErrNotFound)
	}
	return out, nil
}
