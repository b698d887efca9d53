package commit

import (
	"context"
	"fmt"
	"math/rand/v2"
	"time"

	"layerfs.dev/layerfs/internal/store"
	"layerfs.dev/layerfs/internal/textmerge"
	"layerfs.dev/layerfs/wire/errclass"
)

// The outcomes of MergeInto.
const (
	MergeFastForward = "fast-forward" // the branch was an ancestor of the source: its head moved to it
	MergeMerged      = "merged"       // a merge commit of the head and the source is the new head
	MergeUpToDate    = "up-to-date"   // the source already was in the branch's history
	MergeConflicts   = "conflicts"    // nothing was published; see MergeOutcome.Conflicts
)

// Errors of merges.
var (
	// ErrUnrelated: the two commits share no history (they are of
	// different projects, or of unrelated roots).
	ErrUnrelated = errclass.New(errclass.Invalid, "unrelated histories")
	// ErrConflict is what MergeOutcome.Err returns for conflicts: the
	// class errclass.Conflict itself.
	ErrConflict = errclass.Conflict
)

// DefaultMergeTries is how many times MergeInto merges and publishes when
// the branch head keeps moving under it; between tries it waits a random
// time that doubles each try (from 1 to 64 ms at most), so that writers
// racing for one head stop colliding.
const DefaultMergeTries = 32

// MergeRequest says what MergeInto merges.
type MergeRequest struct {
	Project, Branch string   // the branch merged into
	Source          store.ID // the commit merged in
	Meta            Meta     // of the merge commit (its message defaults to one naming the source)
	// SourceName names the source in the default message and in markers;
	// default its short id.
	SourceName string
	Prefer     textmerge.Prefer
	// DryRun says what would happen and publishes nothing: no commit, no
	// head move, nothing written to the Store.
	DryRun bool
	// Tries bounds the merges when the head moves between a merge and its
	// publish (0: DefaultMergeTries).
	Tries int
	// Expect, when not zero, is the head the merge must start from; it
	// has moved (by Tries 1 the merge is refused with errclass.HeadMoved).
	Expect store.ID
	// TextLimit, RenameThreshold and NoRenames: see MergeOptions.
	TextLimit       int64
	RenameThreshold int
	NoRenames       bool
}

// MergeOutcome is what MergeInto did.
type MergeOutcome struct {
	Result string `json:"result"`
	// Commit is the new merge commit (merged), the source (fast-forward),
	// or the head that already holds the source (up-to-date); zero for
	// conflicts and dry runs of merges.
	Commit store.ID `json:"commit"`
	// Head is the branch head after the call (before, for a dry run or
	// conflicts).
	Head store.ID `json:"head"`
	// Tree is the merged tree (merged, and dry runs of merges).
	Tree store.ID `json:"tree"`
	// Bases are the merge bases: several for a criss-cross history, merged
	// into a virtual base (see MergeBase).
	Bases     []store.ID `json:"bases"`
	Conflicts []Conflict `json:"conflicts,omitempty"`
	// Tries is the number of merges made: more than one when the head
	// moved before a publish.
	Tries int        `json:"tries"`
	Stats MergeStats `json:"stats"`
}

// Err is nil unless the merge conflicted.
func (o *MergeOutcome) Err() error {
	if o.Result != MergeConflicts {
		return nil
	}
	return fmt.Errorf("%d conflicts (nothing published): %w", len(o.Conflicts), ErrConflict)
}

// MergeInto merges the commit req.Source into a branch and publishes the
// result by compare-and-swap on the branch head, like a commit: up-to-date
// when the source is already in the branch's history, a fast-forward when
// the branch head is an ancestor of the source, else a merge commit whose
// parents are the head and the source. A merge that conflicts publishes
// nothing (Result MergeConflicts, Err wraps errclass.Conflict). When the
// head moves between the merge and its publish, the merge is made again on
// the new head, req.Tries times at most (then errclass.HeadMoved).
func MergeInto(ctx context.Context, db *store.DB, req MergeRequest) (MergeOutcome, error) {
	tries := req.Tries
	if tries <= 0 {
		tries = DefaultMergeTries
	}
	name := req.SourceName
	if name == "" {
		name = req.Source.Short()
	}
	var out MergeOutcome
	for out.Tries < tries {
		b, err := db.Branch(ctx, req.Project, req.Branch)
		if err != nil {
			return out, fmt.Errorf("merge into %s: %w", req.Branch, err)
		}
		if !req.Expect.IsZero() && b.Head != req.Expect {
			return out, fmt.Errorf("merge into %s: its head is %s, not %s: %w", req.Branch, b.Head.Short(), req.Expect.Short(), errclass.HeadMoved)
		}
		out.Tries++
		done, err := mergeOnce(ctx, db, req, name, b.Head, &out)
		if err != nil || done {
			return out, err
		}
		req.Expect = store.ZeroID
		if err := backoff(ctx, out.Tries); err != nil {
			return out, err
		}
	}
	return out, fmt.Errorf("merge into %s: the head moved %d times: %w", req.Branch, tries, errclass.HeadMoved)
}

// mergeOnce merges the source into the head and publishes it; done is
// false when the head moved before the publish.
func mergeOnce(ctx context.Context, db *store.DB, req MergeRequest, name string, head store.ID, out *MergeOutcome) (done bool, err error) {
	*out = MergeOutcome{Tries: out.Tries, Head: head}
	up, err := IsAncestor(ctx, db, req.Source, head)
	if err != nil {
		return false, fmt.Errorf("merge: %w", err)
	}
	if up {
		out.Result, out.Commit = MergeUpToDate, head
		return true, nil
	}
	ff, err := IsAncestor(ctx, db, head, req.Source)
	if err != nil {
		return false, fmt.Errorf("merge: %w", err)
	}
	if ff {
		out.Result, out.Commit, out.Bases = MergeFastForward, req.Source, []store.ID{head}
		if req.DryRun {
			return true, nil
		}
		res, err := db.SetBranchHead(ctx, req.Project, req.Branch, head, req.Source)
		if err != nil {
			return false, fmt.Errorf("merge: %w", err)
		}
		out.Head = req.Source
		return res != store.PublishHeadMoved, nil
	}
	bases, err := MergeBases(ctx, db, head, req.Source)
	if err != nil {
		return false, fmt.Errorf("merge: %w", err)
	}
	if len(bases) == 0 {
		return false, fmt.Errorf("merge %s into %s: %w", name, req.Branch, ErrUnrelated)
	}
	out.Bases = bases
	hc, err := db.Commit(ctx, head)
	if err != nil {
		return false, err
	}
	sc, err := db.Commit(ctx, req.Source)
	if err != nil {
		return false, err
	}
	batch, err := db.NewBatch(ctx)
	if err != nil {
		return false, err
	}
	defer batch.Abort()
	res, err := MergeTrees(ctx, batch, db, bases, hc.Root, sc.Root, &MergeOptions{Prefer: req.Prefer, OursLabel: req.Branch, TheirsLabel: name, TextLimit: req.TextLimit,
		RenameThreshold: req.RenameThreshold, NoRenames: req.NoRenames})
	if err != nil {
		return false, fmt.Errorf("merge: %w", err)
	}
	out.Stats = res.Stats
	if !res.Clean {
		out.Result, out.Conflicts = MergeConflicts, res.Conflicts
		return true, nil
	}
	out.Result, out.Tree = MergeMerged, res.Tree
	if req.DryRun {
		return true, nil
	}
	meta := req.Meta
	if meta.Message == "" {
		meta.Message = fmt.Sprintf("merge %s into %s", name, req.Branch)
	}
	delta := res.Stats.Build.Delta
	c := &store.Commit{Root: res.Tree, Parents: []store.ID{head, req.Source}, Message: meta.Message, Author: meta.Author, TimeNs: meta.time(),
		Stats: store.CommitStats{Files: hc.Stats.Files + delta.Files, Dirs: hc.Stats.Dirs + delta.Dirs, Bytes: hc.Stats.Bytes + delta.Bytes, Changed: res.Stats.Build.Changes}}
	if c.Generation, err = Generation(ctx, db, c.Parents); err != nil {
		return false, fmt.Errorf("merge: %w", err)
	}
	// The commit goes with the trees it names: one flush, then the head.
	id, err := batch.PutCommit(c)
	if err == nil {
		err = batch.Flush(ctx)
	}
	if err != nil {
		return false, fmt.Errorf("merge: %w", err)
	}
	pub, err := db.SetBranchHead(ctx, req.Project, req.Branch, head, id)
	if err != nil {
		return false, fmt.Errorf("merge: %w", err)
	}
	if pub == store.PublishHeadMoved {
		return false, nil
	}
	out.Commit, out.Head = id, id
	return true, nil
}

// maxVirtualDepth bounds the recursion of virtual bases (criss-crosses of
// criss-crosses); deeper, the first base by id is used as it is.
const maxVirtualDepth = 4

// MergeBase returns the tree to merge against for the merge bases bases
// (MergeBases): the root of the one base, or, for several (a criss-cross
// history, where each side merged the other's earlier work), a virtual
// base: the bases merged together in the order of their ids, each merge
// against their own merge base (found the same way, recursively), as git
// does. Where the bases conflict with each other, the virtual base holds
// the conflict markers (a text) or the first base's entry: a later merge
// against it then conflicts there too, rather than take either base's
// version silently. Its objects go to w (and are read back through r).
func MergeBase(ctx context.Context, w Writer, r Reader, cr History, bases []store.ID) (store.ID, error) {
	return mergeBase(ctx, w, r, cr, bases, 0)
}

func mergeBase(ctx context.Context, w Writer, r Reader, cr History, bases []store.ID, depth int) (store.ID, error) {
	if len(bases) == 0 {
		return store.ZeroID, nil
	}
	first, err := cr.Commit(ctx, bases[0])
	if err != nil {
		return store.ZeroID, err
	}
	if len(bases) == 1 || depth >= maxVirtualDepth {
		return first.Root, nil
	}
	g := newGraph(cr)
	tree, merged := first.Root, []store.ID{bases[0]}
	for _, b := range bases[1:] {
		bc, err := cr.Commit(ctx, b)
		if err != nil {
			return store.ZeroID, err
		}
		cands, err := g.paint(ctx, merged, []store.ID{b})
		if err != nil {
			return store.ZeroID, err
		}
		inner, err := g.removeRedundant(ctx, cands)
		if err != nil {
			return store.ZeroID, err
		}
		innerTree, err := mergeBase(ctx, w, r, cr, inner, depth+1)
		if err != nil {
			return store.ZeroID, err
		}
		res, err := Merge(ctx, w, r, innerTree, tree, bc.Root, &MergeOptions{Markers: true, OursLabel: "merge base " + bases[0].Short(), TheirsLabel: "merge base " + b.Short()})
		if err != nil {
			return store.ZeroID, fmt.Errorf("virtual merge base: %w", err)
		}
		tree = res.Tree
		merged = append(merged, b)
	}
	return tree, nil
}

// MergeTrees merges the trees ours and theirs against the merge base of
// the commits bases (see MergeBase), writing the new objects to w; the
// Store must hold ours, theirs and the bases.
func MergeTrees(ctx context.Context, w Writer, db *store.DB, bases []store.ID, ours, theirs store.ID, opts *MergeOptions) (MergeResult, error) {
	p := newPending(w, db)
	base, err := MergeBase(ctx, p, p, db, bases)
	if err != nil {
		return MergeResult{}, err
	}
	return Merge(ctx, p, p, base, ours, theirs, opts)
}

// StoreCommit stores c durably, with the generation its parents give it,
// and names it on no branch: a commit that keeps a tree alive for a
// workspace (see the engine's update).
func StoreCommit(ctx context.Context, db *store.DB, c *store.Commit) (store.ID, error) {
	if c.TimeNs == 0 {
		c.TimeNs = Meta{}.time()
	}
	return writeCommit(ctx, db, c)
}

// backoff waits before try n+1 of a publish that lost the race: a random
// time up to 2^(n-1) ms, 64 ms at most.
func backoff(ctx context.Context, n int) error {
	limit := time.Millisecond << min(n-1, 6)
	t := time.NewTimer(rand.N(limit) + time.Millisecond/4)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
