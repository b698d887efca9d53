package apitest

import (
	"errors"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"layerfs.dev/layerfs/wire"
	"layerfs.dev/layerfs/wire/errclass"
)

// mergeChecks are those of merges: of branches, of commits that lost the
// race, of workspaces that catch up, and of forks.
var mergeChecks = []check{
	{"MergeBranch", checkMergeBranch},
	{"CommitMerge", checkCommitMerge},
	{"UpdateWorkspace", checkUpdateWorkspace},
	{"ForkWorkspace", checkForkWorkspace},
	{"LogOfMerges", checkLogOfMerges},
}

// conflicts are the conflicts a conflict error lists.
func (f *fixture) conflicts(err error, what string) []wire.Conflict {
	f.t.Helper()
	f.isClass(err, errclass.Conflict, what)
	var we *wire.Error
	require.True(f.t, errors.As(err, &we), "%s: a *wire.Error: %v", what, err)
	require.NotEmpty(f.t, we.Conflicts, "%s: the conflicts", what)
	return we.Conflicts
}

// checkMergeBranch: a branch merges into another as fast-forward, merge
// commit or up-to-date; a conflict publishes nothing; bad refs fail.
func checkMergeBranch(f *fixture) {
	p := f.project()
	_, err := f.eng.ForkBranch(f.ctx, p, wire.ForkBranch{Name: "topic", From: "main"})
	require.NoError(f.t, err)
	topic := f.workspace(p, "topic")
	f.write(topic.ID, "t.txt", "t")
	_, err = f.eng.CommitWorkspace(f.ctx, topic.ID, wire.CommitRequest{})
	require.NoError(f.t, err)
	dry, err := f.eng.MergeBranch(f.ctx, p, wire.MergeRequest{Source: "topic", Into: "main", DryRun: true})
	require.NoError(f.t, err)
	assert.Equal(f.t, wire.FastForward, dry.Result)
	assert.NotEqual(f.t, f.head(p, "topic"), f.head(p, "main"), "a dry run publishes nothing")
	ff, err := f.eng.MergeBranch(f.ctx, p, wire.MergeRequest{Source: "topic", Into: "main"})
	require.NoError(f.t, err)
	assert.Equal(f.t, wire.FastForward, ff.Result)
	assert.Equal(f.t, f.head(p, "topic"), f.head(p, "main"))
	up, err := f.eng.MergeBranch(f.ctx, p, wire.MergeRequest{Source: "topic", Into: "main"})
	require.NoError(f.t, err)
	assert.Equal(f.t, wire.UpToDate, up.Result)

	main := f.workspace(p, "main")
	f.write(main.ID, "m.txt", "m")
	_, err = f.eng.CommitWorkspace(f.ctx, main.ID, wire.CommitRequest{})
	require.NoError(f.t, err)
	f.write(topic.ID, "t2.txt", "t2")
	_, err = f.eng.CommitWorkspace(f.ctx, topic.ID, wire.CommitRequest{})
	require.NoError(f.t, err)
	m, err := f.eng.MergeBranch(f.ctx, p, wire.MergeRequest{Source: "topic", Into: "main", Message: "bring topic"})
	require.NoError(f.t, err)
	assert.Equal(f.t, wire.Merged, m.Result)
	assert.Equal(f.t, m.Commit, f.head(p, "main"))
	c, err := f.eng.Commit(f.ctx, p, m.Commit)
	require.NoError(f.t, err)
	assert.Equal(f.t, "bring topic", c.Message)
	assert.Equal(f.t, []string{c.Parent, f.head(p, "topic")}, c.Parents, "the head, then the source")

	// Both change one file differently: a conflict, nothing published.
	f.write(main.ID, "same.txt", "main's")
	_, err = f.eng.CommitWorkspace(f.ctx, main.ID, wire.CommitRequest{Merge: true})
	require.NoError(f.t, err)
	f.write(topic.ID, "same.txt", "topic's")
	_, err = f.eng.CommitWorkspace(f.ctx, topic.ID, wire.CommitRequest{})
	require.NoError(f.t, err)
	before := f.head(p, "main")
	_, err = f.eng.MergeBranch(f.ctx, p, wire.MergeRequest{Source: "topic", Into: "main"})
	cs := f.conflicts(err, "a merge whose sides added one file differently")
	assert.Equal(f.t, "same.txt", cs[0].Path)
	assert.Equal(f.t, wire.ConflictAddAdd, cs[0].Kind)
	assert.Equal(f.t, before, f.head(p, "main"), "nothing published")
	pref, err := f.eng.MergeBranch(f.ctx, p, wire.MergeRequest{Source: "topic", Into: "main", Prefer: wire.PreferOurs})
	require.NoError(f.t, err)
	assert.Equal(f.t, wire.Merged, pref.Result, "a conflict settled by a side")

	_, err = f.eng.MergeBranch(f.ctx, p, wire.MergeRequest{Source: "none", Into: "main"})
	f.isClass(err, errclass.NotFound, "an unknown source")
	_, err = f.eng.MergeBranch(f.ctx, p, wire.MergeRequest{Source: "topic", Into: "none"})
	f.isClass(err, errclass.NotFound, "an unknown branch")
	other := f.project()
	_, err = f.eng.MergeBranch(f.ctx, p, wire.MergeRequest{Source: f.head(other, "main"), Into: "main"})
	f.isClass(err, errclass.Invalid, "a commit of another project")
}

// checkCommitMerge: a commit with merge that lost the race lands as a
// merge and the workspace holds it; without merge it is head-moved.
func checkCommitMerge(f *fixture) {
	p := f.project()
	a, b := f.workspace(p, "main"), f.workspace(p, "main")
	f.write(a.ID, "a.txt", "a")
	_, err := f.eng.CommitWorkspace(f.ctx, a.ID, wire.CommitRequest{})
	require.NoError(f.t, err)
	f.write(b.ID, "b.txt", "b")
	r, err := f.eng.CommitWorkspace(f.ctx, b.ID, wire.CommitRequest{})
	require.NoError(f.t, err)
	assert.Equal(f.t, wire.HeadMoved, r.Result)
	r, err = f.eng.CommitWorkspace(f.ctx, b.ID, wire.CommitRequest{Merge: true})
	require.NoError(f.t, err)
	assert.Equal(f.t, wire.Merged, r.Result)
	require.NotNil(f.t, r.Merge)
	assert.Equal(f.t, r.Commit, f.head(p, "main"))
	assert.Equal(f.t, "a", f.read(b.ID, "a.txt"), "the workspace holds the merge")
	st, err := f.eng.WorkspaceStatus(f.ctx, b.ID)
	require.NoError(f.t, err)
	assert.Empty(f.t, st.Changes)
	assert.Equal(f.t, r.Commit, st.Head)
}

// checkUpdateWorkspace: a workspace takes in a branch's new head with its
// changes kept; conflicts change nothing, or stay listed with markers.
func checkUpdateWorkspace(f *fixture) {
	p := f.project()
	a, b := f.workspace(p, "main"), f.workspace(p, "main")
	f.write(a.ID, "a.txt", "a\n")
	_, err := f.eng.CommitWorkspace(f.ctx, a.ID, wire.CommitRequest{})
	require.NoError(f.t, err)
	f.write(b.ID, "b.txt", "b\n")
	u, err := f.eng.UpdateWorkspace(f.ctx, b.ID, wire.UpdateRequest{})
	require.NoError(f.t, err)
	assert.Equal(f.t, wire.Updated, u.Result)
	assert.Equal(f.t, f.head(p, "main"), u.Head)
	assert.Equal(f.t, "a\n", f.read(b.ID, "a.txt"))
	st, err := f.eng.WorkspaceStatus(f.ctx, b.ID)
	require.NoError(f.t, err)
	require.Len(f.t, st.Changes, 1)
	assert.Equal(f.t, "b.txt", st.Changes[0].Path)
	u, err = f.eng.UpdateWorkspace(f.ctx, b.ID, wire.UpdateRequest{})
	require.NoError(f.t, err)
	assert.Equal(f.t, wire.UpToDate, u.Result)

	f.write(a.ID, "a.txt", "a, by a\n")
	_, err = f.eng.CommitWorkspace(f.ctx, a.ID, wire.CommitRequest{})
	require.NoError(f.t, err)
	f.write(b.ID, "a.txt", "a, by b\n")
	_, err = f.eng.UpdateWorkspace(f.ctx, b.ID, wire.UpdateRequest{})
	cs := f.conflicts(err, "an update that conflicts")
	assert.Equal(f.t, "a.txt", cs[0].Path)
	assert.Equal(f.t, "a, by b\n", f.read(b.ID, "a.txt"), "the workspace as it was")
	u, err = f.eng.UpdateWorkspace(f.ctx, b.ID, wire.UpdateRequest{ConflictMarkers: true})
	require.NoError(f.t, err)
	require.Len(f.t, u.Conflicts, 1)
	assert.Contains(f.t, f.read(b.ID, "a.txt"), "=======\n")
	st, err = f.eng.WorkspaceStatus(f.ctx, b.ID)
	require.NoError(f.t, err)
	assert.Len(f.t, st.Conflicts, 1)
	_, err = f.eng.CommitWorkspace(f.ctx, b.ID, wire.CommitRequest{})
	f.conflicts(err, "a commit with conflicts unresolved")
	left, err := f.eng.ResolveConflicts(f.ctx, b.ID, wire.ResolveRequest{})
	require.NoError(f.t, err)
	assert.Empty(f.t, left)
	r, err := f.eng.CommitWorkspace(f.ctx, b.ID, wire.CommitRequest{})
	require.NoError(f.t, err)
	assert.Equal(f.t, wire.Created, r.Result)
	_, err = f.eng.ResolveConflicts(f.ctx, b.ID, wire.ResolveRequest{Paths: []string{"a.txt"}})
	f.isClass(err, errclass.NotFound, "resolving a path with no conflict")
	_, err = f.eng.UpdateWorkspace(f.ctx, b.ID, wire.UpdateRequest{Ref: "none"})
	f.isClass(err, errclass.NotFound, "an update to an unknown ref")
}

// checkForkWorkspace: forks hold the source's uncommitted changes and go
// their own ways.
func checkForkWorkspace(f *fixture) {
	p := f.project()
	src := f.workspace(p, "main")
	f.write(src.ID, "wip.txt", "work in progress")
	res, err := f.eng.ForkWorkspace(f.ctx, src.ID, wire.ForkRequest{Count: 2})
	require.NoError(f.t, err)
	require.Len(f.t, res.Workspaces, 2)
	for _, w := range res.Workspaces {
		assert.Equal(f.t, "work in progress", f.read(w.ID, "wip.txt"))
		st, err := f.eng.WorkspaceStatus(f.ctx, w.ID)
		require.NoError(f.t, err)
		require.Len(f.t, st.Changes, 1, "the source's change, uncommitted")
		f.write(w.ID, "own.txt", w.ID)
		require.NoError(f.t, f.eng.EndWorkspace(f.ctx, w.ID, true))
	}
	_, err = f.eng.Stat(f.ctx, src.ID, "own.txt")
	f.isClass(err, errclass.NotFound, "a fork's file in the source")
	_, err = f.eng.ForkWorkspace(f.ctx, src.ID, wire.ForkRequest{Count: wire.MaxForkCount + 1})
	f.isClass(err, errclass.Invalid, "too many forks")
}

// checkLogOfMerges: the log of a merge lists both sides, each commit once,
// and pages by the last commit of a page.
func checkLogOfMerges(f *fixture) {
	p := f.project()
	a, b := f.workspace(p, "main"), f.workspace(p, "main")
	f.write(a.ID, "a.txt", "a")
	_, err := f.eng.CommitWorkspace(f.ctx, a.ID, wire.CommitRequest{Message: "a"})
	require.NoError(f.t, err)
	f.write(b.ID, "b.txt", "b")
	_, err = f.eng.CommitWorkspace(f.ctx, b.ID, wire.CommitRequest{Message: "b", Merge: true})
	require.NoError(f.t, err)
	log, err := f.eng.Log(f.ctx, p, "main", "", 10)
	require.NoError(f.t, err)
	require.Len(f.t, log, 4, "the merge, both commits, the first layer")
	assert.Len(f.t, log[0].Parents, 2)
	page, err := f.eng.Log(f.ctx, p, "main", log[1].ID, 10)
	require.NoError(f.t, err)
	assert.Equal(f.t, log[2:], page, "the page after the second commit")
}
