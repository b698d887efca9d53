package commit

import (
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"layerfs.dev/layerfs/internal/store"
	"layerfs.dev/layerfs/wire/errclass"
)

// commitOf stores a commit of the tree spec on parents.
func commitOf(t *testing.T, db *store.DB, msg string, spec map[string]ent, parents ...store.ID) store.ID {
	t.Helper()
	ctx := t.Context()
	b, err := db.NewBatch(ctx)
	require.NoError(t, err)
	defer b.Abort()
	ch, err := NewChunker(DefaultParams)
	require.NoError(t, err)
	root := treeOf(t, b, ch, spec)
	require.NoError(t, b.Flush(ctx))
	st, err := TreeTotals(ctx, db, root, nil)
	require.NoError(t, err)
	id, err := writeCommit(ctx, db, &store.Commit{Root: root, Parents: parents, Message: msg, TimeNs: 1, Stats: st})
	require.NoError(t, err)
	return id
}

func withFile(spec map[string]ent, p, data string) map[string]ent {
	out := map[string]ent{}
	for k, v := range spec {
		out[k] = v
	}
	out[p] = ent{data: data}
	return out
}

func objectCount(t *testing.T, db *store.DB) int64 {
	st, err := db.Stats(t.Context())
	require.NoError(t, err)
	return st.Chunks.Count + st.Manifests.Count + st.Trees.Count + st.Commits.Count
}

func TestMergeInto(t *testing.T) {
	ctx := t.Context()
	db := newDB(t)
	base := map[string]ent{"shared": {data: "1\n2\n3\n4\n5\n"}}
	root := commitOf(t, db, "root", base)
	_, err := db.CreateProject(ctx, "p", root)
	require.NoError(t, err)
	feature := commitOf(t, db, "feature", withFile(base, "f", "feature"), root)
	_, err = db.CreateBranch(ctx, "p", "feature", feature)
	require.NoError(t, err)

	// main has not moved: a fast-forward.
	out, err := MergeInto(ctx, db, MergeRequest{Project: "p", Branch: "main", Source: feature, DryRun: true})
	require.NoError(t, err)
	require.Equal(t, MergeFastForward, out.Result)
	b, _ := db.Branch(ctx, "p", "main")
	require.Equal(t, root, b.Head, "a dry run moves nothing")
	out, err = MergeInto(ctx, db, MergeRequest{Project: "p", Branch: "main", Source: feature})
	require.NoError(t, err)
	require.Equal(t, MergeFastForward, out.Result)
	require.Equal(t, feature, out.Head)
	out, err = MergeInto(ctx, db, MergeRequest{Project: "p", Branch: "main", Source: root})
	require.NoError(t, err)
	require.Equal(t, MergeUpToDate, out.Result, "an ancestor is already merged")

	// Both moved: a merge commit with both parents.
	onMain := commitOf(t, db, "main", withFile(withFile(base, "f", "feature"), "shared", "1\n2\n3\n4\nfive\n"), feature)
	_, err = db.SetBranchHead(ctx, "p", "main", feature, onMain)
	require.NoError(t, err)
	onFeature := commitOf(t, db, "feature 2", withFile(withFile(base, "f", "feature"), "shared", "one\n2\n3\n4\n5\n"), feature)
	out, err = MergeInto(ctx, db, MergeRequest{Project: "p", Branch: "main", Source: onFeature, SourceName: "feature", Meta: Meta{Author: "a"}})
	require.NoError(t, err)
	require.Equal(t, MergeMerged, out.Result)
	require.Equal(t, []store.ID{feature}, out.Bases)
	c, err := db.Commit(ctx, out.Commit)
	require.NoError(t, err)
	require.Equal(t, []store.ID{onMain, onFeature}, c.Parents)
	require.Equal(t, "merge feature into main", c.Message)
	require.EqualValues(t, 2, c.Stats.Files)
	require.EqualValues(t, 1, c.Stats.Changed)
	tr, err := db.Tree(ctx, c.Root)
	require.NoError(t, err)
	e, _ := tr.Find("shared")
	got, err := readContent(ctx, db, e)
	require.NoError(t, err)
	require.Equal(t, "one\n2\n3\n4\nfive\n", string(got))
	b, _ = db.Branch(ctx, "p", "main")
	require.Equal(t, out.Commit, b.Head)
	rep, err := db.Fsck(ctx, nil)
	require.NoError(t, err)
	require.NoError(t, rep.Err())
}

// TestMergeIntoConflictsChangeNothing: a conflicted merge, a dry run and a
// merge of unrelated histories leave the Store and the branch as they were.
func TestMergeIntoConflictsChangeNothing(t *testing.T) {
	ctx := t.Context()
	db := newDB(t)
	base := map[string]ent{"bin": {data: "\x00base"}, "t": {data: "a\nb\n"}}
	root := commitOf(t, db, "root", base)
	_, err := db.CreateProject(ctx, "p", root)
	require.NoError(t, err)
	ours := commitOf(t, db, "ours", withFile(withFile(base, "bin", "\x00ours"), "t", "a\nB\n"), root)
	_, err = db.SetBranchHead(ctx, "p", "main", root, ours)
	require.NoError(t, err)
	theirs := commitOf(t, db, "theirs", withFile(withFile(base, "bin", "\x00theirs"), "t", "A\nb\n"), root)
	other := commitOf(t, db, "another root", map[string]ent{"x": {data: "x"}})

	before := objectCount(t, db)
	out, err := MergeInto(ctx, db, MergeRequest{Project: "p", Branch: "main", Source: theirs})
	require.NoError(t, err)
	require.Equal(t, MergeConflicts, out.Result)
	require.ErrorIs(t, out.Err(), errclass.Conflict)
	require.Len(t, out.Conflicts, 2)
	require.Equal(t, ConflictBinary, out.Conflicts[0].Kind)
	require.Equal(t, "bin", out.Conflicts[0].Path)
	require.Equal(t, ConflictContent, out.Conflicts[1].Kind, "a\\nB and A\\nb touch")
	_, err = MergeInto(ctx, db, MergeRequest{Project: "p", Branch: "main", Source: theirs, DryRun: true, Prefer: 2})
	require.NoError(t, err)
	_, err = MergeInto(ctx, db, MergeRequest{Project: "p", Branch: "main", Source: other})
	require.ErrorIs(t, err, ErrUnrelated)
	require.ErrorIs(t, err, errclass.Invalid)
	require.Equal(t, before, objectCount(t, db), "objects in the Store")
	b, _ := db.Branch(ctx, "p", "main")
	require.Equal(t, ours, b.Head)

	out, err = MergeInto(ctx, db, MergeRequest{Project: "p", Branch: "main", Source: theirs, Prefer: 2})
	require.NoError(t, err)
	require.Equal(t, MergeMerged, out.Result, "theirs preferred")
}

// TestMergeIntoRacing: sixteen writers each add a file on a head that
// keeps moving; each that loses the race merges its commit into the new
// head: all sixteen land and the head holds every file.
func TestMergeIntoRacing(t *testing.T) {
	ctx := t.Context()
	db := newDB(t)
	root := commitOf(t, db, "root", map[string]ent{"r": {data: "r"}})
	_, err := db.CreateProject(ctx, "p", root)
	require.NoError(t, err)
	const n = 16
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i := range n {
		wg.Go(func() {
			c := commitOf(t, db, fmt.Sprint("w", i), map[string]ent{"r": {data: "r"}, fmt.Sprintf("f%02d", i): {data: fmt.Sprint(i)}}, root)
			pub, err := db.SetBranchHead(ctx, "p", "main", root, c)
			if err != nil || pub != store.PublishHeadMoved {
				errs[i] = err
				return
			}
			out, err := MergeInto(ctx, db, MergeRequest{Project: "p", Branch: "main", Source: c, Tries: 100})
			if err == nil && out.Result != MergeMerged {
				err = errors.New(out.Result)
			}
			errs[i] = err
		})
	}
	wg.Wait()
	for i, err := range errs {
		require.NoError(t, err, "writer %d", i)
	}
	b, _ := db.Branch(ctx, "p", "main")
	c, err := db.Commit(ctx, b.Head)
	require.NoError(t, err)
	tr, err := db.Tree(ctx, c.Root)
	require.NoError(t, err)
	require.Len(t, tr.Entries, n+1)
	log, err := Log(ctx, db, "p", "main", store.ZeroID, 0)
	require.NoError(t, err)
	require.Len(t, log, 1+n+n-1, "the root, sixteen commits and fifteen merges")
	rep, err := db.Fsck(ctx, nil)
	require.NoError(t, err)
	require.NoError(t, rep.Err())
}

// TestMergeBaseCrissCross: two branches that each merged the other's
// first change (a criss-cross) have two best common ancestors. Merged
// against either alone, a later merge sees a change the other base already
// holds as a conflict or loses it; against the virtual base (the two bases
// merged) it is clean and right.
func TestMergeBaseCrissCross(t *testing.T) {
	ctx := t.Context()
	db := newDB(t)
	f := func(v string) map[string]ent {
		return map[string]ent{"f": {data: "1\n" + v + "\n3\n"}, "g": {data: "g\n"}}
	}
	root := commitOf(t, db, "root", f("2"))
	_, err := db.CreateProject(ctx, "p", root)
	require.NoError(t, err)
	a1 := commitOf(t, db, "a1", f("A"), root) // changes f
	b1 := commitOf(t, db, "b1", withFile(f("2"), "g", "G\n"), root)
	// Each side merges the other; b's merge then changes f again, a
	// decision made after seeing a's change.
	a2 := commitOf(t, db, "a2", withFile(f("A"), "g", "G\n"), a1, b1)
	b2 := commitOf(t, db, "b2", withFile(f("B"), "g", "G\n"), b1, a1)
	bases, err := MergeBases(ctx, db, a2, b2)
	require.NoError(t, err)
	require.Len(t, bases, 2, "a criss-cross")
	b, err := db.NewBatch(ctx)
	require.NoError(t, err)
	defer b.Abort()
	p := newPending(b, db)
	tr := func(id store.ID) store.ID { c, err := db.Commit(ctx, id); require.NoError(t, err); return c.Root }
	virtual, err := MergeBase(ctx, p, p, db, bases)
	require.NoError(t, err)
	for _, tc := range []struct {
		name  string
		base  store.ID
		clean bool
	}{
		{"b1 alone", tr(b1), false}, // f: A against B, both changed from 2
		{"virtual", virtual, true},  // f: A is the base, b2 changed it to B
	} {
		res, err := Merge(ctx, p, p, tc.base, tr(a2), tr(b2), nil)
		require.NoError(t, err)
		require.Equal(t, tc.clean, res.Clean, "%s: %+v", tc.name, res.Conflicts)
		if res.Clean {
			got := flat(t, p, res.Tree)
			c := got["f"]
			data, err := readContent(ctx, p, &c)
			require.NoError(t, err)
			require.Equal(t, "1\nB\n3\n", string(data), tc.name)
		}
	}
	// With a1 alone the merge is clean too, and the rule gives the same
	// tree as the base of both: MergeInto uses the virtual base.
	_, err = db.SetBranchHead(ctx, "p", "main", root, a2)
	require.NoError(t, err)
	out, err := MergeInto(ctx, db, MergeRequest{Project: "p", Branch: "main", Source: b2})
	require.NoError(t, err)
	require.Equal(t, MergeMerged, out.Result, "%+v", out.Conflicts)
	require.ElementsMatch(t, bases, out.Bases)
}

// TestMergeIntoRemoveAgainstTouch is the smallest real case of time taken
// for content: branch A removes a.txt, branch B only touches it; merging
// B into A deletes it cleanly, as git does.
func TestMergeIntoRemoveAgainstTouch(t *testing.T) {
	ctx := t.Context()
	db := newDB(t)
	base := map[string]ent{"a.txt": {data: "a\n", mtime: 1e18}, "keep": {data: "k\n"}}
	root := commitOf(t, db, "root", base)
	_, err := db.CreateProject(ctx, "p", root)
	require.NoError(t, err)
	a := commitOf(t, db, "rm a.txt", map[string]ent{"keep": base["keep"]}, root)
	_, err = db.SetBranchHead(ctx, "p", "main", root, a)
	require.NoError(t, err)
	b := commitOf(t, db, "touch a.txt", map[string]ent{"a.txt": {data: "a\n", mtime: 2e18}, "keep": base["keep"]}, root)
	out, err := MergeInto(ctx, db, MergeRequest{Project: "p", Branch: "main", Source: b, SourceName: "B"})
	require.NoError(t, err)
	require.Equal(t, MergeMerged, out.Result, "%+v", out.Conflicts)
	c, err := db.Commit(ctx, out.Commit)
	require.NoError(t, err)
	got := flat(t, db, c.Root)
	_, ok := got["a.txt"]
	require.False(t, ok, "a.txt removed on A and touched on B stays removed")
	require.Contains(t, got, "keep")
}
