package apitest

import (
	"os"
	"path/filepath"
	"slices"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"layerfs.dev/layerfs/wire"
	"layerfs.dev/layerfs/wire/errclass"
)

// historyChecks are those of ProjectManager, BranchManager and History.
var historyChecks = []check{
	{"Projects", checkProjects},
	{"ProjectFromHostDir", checkProjectFromHostDir},
	{"Layers", checkLayers},
	{"Branches", checkBranches},
	{"BranchBusy", checkBranchBusy},
	{"Refs", checkRefs},
	{"Log", checkLog},
	{"DiffPages", checkDiffPages},
	{"CommitDirAndCheckout", checkCommitDirAndCheckout},
}

// checkProjects: a new project has one layer and one branch, main, on it;
// it is listed in name order; its name is then taken.
func checkProjects(f *fixture) {
	a, b := f.project(), f.project()
	p, err := f.eng.Project(f.ctx, a)
	require.NoError(f.t, err)
	assert.Equal(f.t, wire.Project{Name: a, Created: p.Created, Layers: 1, Branches: 1}, p, "a new project")
	assert.False(f.t, p.Created.IsZero(), "a new project's creation time")
	ps, err := f.eng.Projects(f.ctx)
	require.NoError(f.t, err)
	var names []string
	for _, q := range ps {
		names = append(names, q.Name)
	}
	assert.True(f.t, slices.IsSorted(names), "projects in name order: %v", names)
	assert.Contains(f.t, names, a)
	assert.Contains(f.t, names, b)
	_, err = f.eng.CreateProject(f.ctx, wire.CreateProject{Name: a})
	f.isClass(err, errclass.Exists, "a project's name twice")
	_, err = f.eng.Project(f.ctx, a+"-none")
	f.isClass(err, errclass.NotFound, "an unknown project")
	_, err = f.eng.Layers(f.ctx, a+"-none")
	f.isClass(err, errclass.NotFound, "the layers of an unknown project")
	_, err = f.eng.Branches(f.ctx, a+"-none")
	f.isClass(err, errclass.NotFound, "the branches of an unknown project")
}

// checkProjectFromHostDir: a project made from a host directory holds its
// files in its first layer, with their modes.
func checkProjectFromHostDir(f *fixture) {
	dir := f.t.TempDir()
	require.NoError(f.t, os.MkdirAll(filepath.Join(dir, "sub"), 0o755))
	require.NoError(f.t, os.WriteFile(filepath.Join(dir, "sub", "a.txt"), []byte("from the host\n"), 0o640))
	name := f.project() + "-dir"
	_, err := f.eng.CreateProject(f.ctx, wire.CreateProject{Name: name, FromPath: dir, Message: "imported"})
	require.NoError(f.t, err)
	ws := f.workspace(name, "main")
	assert.Equal(f.t, "from the host\n", f.read(ws.ID, "sub/a.txt"))
	fi, err := f.eng.Stat(f.ctx, ws.ID, "sub/a.txt")
	require.NoError(f.t, err)
	assert.Equal(f.t, uint32(0o640), fi.Mode, "the file's mode")
	c, err := f.eng.Commit(f.ctx, name, "layer:1")
	require.NoError(f.t, err)
	assert.Equal(f.t, "imported", c.Message)
	_, err = f.eng.CreateProject(f.ctx, wire.CreateProject{Name: name + "-x", FromPath: filepath.Join(dir, "none")})
	f.isClass(err, errclass.NotFound, "a project from a missing host directory")
}

// checkLayers: the first layer is main's first head; AddLayer makes a
// branch's head the next layer.
func checkLayers(f *fixture) {
	p := f.project()
	ls, err := f.eng.Layers(f.ctx, p)
	require.NoError(f.t, err)
	require.Len(f.t, ls, 1)
	assert.Equal(f.t, 1, ls[0].Index)
	assert.Equal(f.t, f.head(p, "main"), ls[0].Commit, "the first layer is main's head")
	ws := f.workspace(p, "main")
	f.write(ws.ID, "a.txt", "a")
	cr, err := f.eng.CommitWorkspace(f.ctx, ws.ID, wire.CommitRequest{Message: "a"})
	require.NoError(f.t, err)
	l, err := f.eng.AddLayer(f.ctx, p, wire.AddLayer{Branch: "main"})
	require.NoError(f.t, err)
	assert.Equal(f.t, 2, l.Index)
	assert.Equal(f.t, cr.Commit, l.Commit, "the new layer is main's head")
	ls, err = f.eng.Layers(f.ctx, p)
	require.NoError(f.t, err)
	if assert.Len(f.t, ls, 2) {
		assert.Equal(f.t, []int{1, 2}, []int{ls[0].Index, ls[1].Index}, "layers, the first first")
	}
	pr, err := f.eng.Project(f.ctx, p)
	require.NoError(f.t, err)
	assert.Equal(f.t, 2, pr.Layers, "the project counts its layers")
	_, err = f.eng.AddLayer(f.ctx, p, wire.AddLayer{Branch: "none"})
	f.isClass(err, errclass.NotFound, "a layer of an unknown branch")
}

// checkBranches: a fork starts at the commit it names, copying nothing;
// branches are listed in name order; a name is taken once; a deleted
// branch is gone.
func checkBranches(f *fixture) {
	p := f.project()
	main := f.head(p, "main")
	b, err := f.eng.ForkBranch(f.ctx, p, wire.ForkBranch{Name: "feature", From: "main"})
	require.NoError(f.t, err)
	assert.Equal(f.t, "feature", b.Name)
	assert.Equal(f.t, main, b.Head, "a fork starts at main's head")
	got, err := f.eng.Branch(f.ctx, p, "feature")
	require.NoError(f.t, err)
	assert.Equal(f.t, b.Head, got.Head)
	_, err = f.eng.ForkBranch(f.ctx, p, wire.ForkBranch{Name: "feature", From: "main"})
	f.isClass(err, errclass.Exists, "a branch's name twice")
	_, err = f.eng.ForkBranch(f.ctx, p, wire.ForkBranch{Name: "other", From: "none"})
	f.isClass(err, errclass.NotFound, "a fork of an unknown ref")
	bs, err := f.eng.Branches(f.ctx, p)
	require.NoError(f.t, err)
	var names []string
	for _, b := range bs {
		names = append(names, b.Name)
	}
	assert.Equal(f.t, []string{"feature", "main"}, names, "branches in name order")
	pr, err := f.eng.Project(f.ctx, p)
	require.NoError(f.t, err)
	assert.Equal(f.t, 2, pr.Branches, "the project counts its branches")
	require.NoError(f.t, f.eng.DeleteBranch(f.ctx, p, "feature"))
	_, err = f.eng.Branch(f.ctx, p, "feature")
	f.isClass(err, errclass.NotFound, "a deleted branch")
	f.isClass(f.eng.DeleteBranch(f.ctx, p, "feature"), errclass.NotFound, "a branch deleted twice")
	assert.Equal(f.t, main, f.head(p, "main"), "main after the fork's delete")
}

// checkBranchBusy: a branch a workspace stands on cannot be deleted.
func checkBranchBusy(f *fixture) {
	p := f.project()
	_, err := f.eng.ForkBranch(f.ctx, p, wire.ForkBranch{Name: "used", From: "main"})
	require.NoError(f.t, err)
	ws := f.workspace(p, "used")
	f.isClass(f.eng.DeleteBranch(f.ctx, p, "used"), errclass.Busy, "delete a branch a workspace stands on")
	require.NoError(f.t, f.eng.EndWorkspace(f.ctx, ws.ID, true))
	require.NoError(f.t, f.eng.DeleteBranch(f.ctx, p, "used"), "delete it once the workspace ended")
}

// checkRefs: a ref is a branch, layer:N, or a commit id or a prefix of
// one.
func checkRefs(f *fixture) {
	p := f.project()
	head := f.head(p, "main")
	for _, ref := range []string{"main", "layer:1", head, head[:12]} {
		c, err := f.eng.Commit(f.ctx, p, ref)
		if assert.NoError(f.t, err, "ref %s", ref) {
			assert.Equal(f.t, head, c.ID, "ref %s", ref)
		}
	}
	for _, ref := range []string{"none", "layer:2", "ffffffffffff"} {
		_, err := f.eng.Commit(f.ctx, p, ref)
		f.isClass(err, errclass.NotFound, "ref "+ref)
	}
}

// checkLog: newest first through the parents, at most limit.
func checkLog(f *fixture) {
	p := f.project()
	ws := f.workspace(p, "main")
	var ids []string
	for _, msg := range []string{"one", "two", "three"} {
		f.write(ws.ID, msg+".txt", msg)
		cr, err := f.eng.CommitWorkspace(f.ctx, ws.ID, wire.CommitRequest{Message: msg})
		require.NoError(f.t, err)
		ids = append(ids, cr.Commit)
	}
	log, err := f.eng.Log(f.ctx, p, "main", "", 10)
	require.NoError(f.t, err)
	require.Len(f.t, log, 4, "three commits on the first layer")
	for i, want := range []string{"three", "two", "one"} {
		assert.Equal(f.t, want, log[i].Message, "log[%d]", i)
		assert.Equal(f.t, ids[2-i], log[i].ID, "log[%d]", i)
		assert.Equal(f.t, log[i+1].ID, log[i].Parent, "log[%d]'s parent", i)
	}
	assert.Empty(f.t, log[3].Parent, "the first layer has no parent")
	log, err = f.eng.Log(f.ctx, p, "main", "", 2)
	require.NoError(f.t, err)
	assert.Len(f.t, log, 2, "the limit")
	_, err = f.eng.Log(f.ctx, p, "none", "", 10)
	f.isClass(err, errclass.NotFound, "the log of an unknown ref")
}

// checkDiffPages: the changes between two refs' trees, path by path in
// order, a page at a time.
func checkDiffPages(f *fixture) {
	p := f.project()
	ws := f.workspace(p, "main")
	f.sh(ws.ID, "mkdir -p a/b && echo 1 > a/b/c && echo 2 > a/d && echo 3 > e")
	_, err := f.eng.CommitWorkspace(f.ctx, ws.ID, wire.CommitRequest{Message: "tree"})
	require.NoError(f.t, err)
	want := []string{"a", "a/b", "a/b/c", "a/d", "e"}
	var got []string
	cursor := ""
	for pages := 0; ; pages++ {
		require.Less(f.t, pages, len(want), "the pages do not end")
		page, err := f.eng.Diff(f.ctx, p, "layer:1", "main", cursor, 2)
		require.NoError(f.t, err)
		assert.LessOrEqual(f.t, len(page.Changes), 2, "a page's limit")
		for _, c := range page.Changes {
			assert.Equal(f.t, wire.Added, c.Kind, "%s", c.Path)
			got = append(got, c.Path)
		}
		if page.Next == "" {
			break
		}
		cursor = page.Next
	}
	assert.Equal(f.t, want, got, "every change once, in path order")
	page, err := f.eng.Diff(f.ctx, p, "main", "main", "", 10)
	require.NoError(f.t, err)
	assert.Empty(f.t, page.Changes, "a tree against itself")
	f.sh(ws.ID, "rm a/d && echo 4 > e")
	_, err = f.eng.CommitWorkspace(f.ctx, ws.ID, wire.CommitRequest{Message: "change"})
	require.NoError(f.t, err)
	log, err := f.eng.Log(f.ctx, p, "main", "", 2)
	require.NoError(f.t, err)
	page, err = f.eng.Diff(f.ctx, p, log[1].ID, "main", "", 10)
	require.NoError(f.t, err)
	assert.Equal(f.t, []wire.Change{{Path: "a", Kind: wire.Modified, OldType: "dir", NewType: "dir"},
		{Path: "a/d", Kind: wire.Removed, OldType: "file"}, {Path: "e", Kind: wire.Modified, OldType: "file", NewType: "file"}},
		page.Changes, "a removal (its directory changed with it) and a change")
}

// checkCommitDirAndCheckout: a host directory becomes a branch's next
// commit; a ref's tree is written into a new host directory, and into one
// that is not empty only when asked to overwrite.
func checkCommitDirAndCheckout(f *fixture) {
	p := f.project()
	src := f.t.TempDir()
	require.NoError(f.t, os.WriteFile(filepath.Join(src, "host.txt"), []byte("host"), 0o644))
	cr, err := f.eng.CommitDir(f.ctx, p, "main", wire.CommitDir{FromPath: src, Message: "from the host"})
	require.NoError(f.t, err)
	assert.Equal(f.t, wire.Created, cr.Result)
	assert.Equal(f.t, cr.Commit, f.head(p, "main"), "main's head is the new commit")
	c, err := f.eng.Commit(f.ctx, p, "main")
	require.NoError(f.t, err)
	assert.Equal(f.t, "from the host", c.Message)
	out := filepath.Join(f.t.TempDir(), "out")
	co, err := f.eng.Checkout(f.ctx, p, wire.Checkout{Ref: "main", Path: out})
	require.NoError(f.t, err)
	assert.Equal(f.t, cr.Commit, co.Commit)
	b, err := os.ReadFile(filepath.Join(out, "host.txt"))
	assert.NoError(f.t, err)
	assert.Equal(f.t, "host", string(b), "the checked out file")
	_, err = f.eng.Checkout(f.ctx, p, wire.Checkout{Ref: "layer:1", Path: out})
	assert.Error(f.t, err, "a checkout over a directory that is not empty")
	_, err = f.eng.Checkout(f.ctx, p, wire.Checkout{Ref: "main", Path: out, Overwrite: true})
	assert.NoError(f.t, err, "a checkout over it, asked to overwrite")
	_, err = f.eng.CommitDir(f.ctx, p, "main", wire.CommitDir{FromPath: filepath.Join(src, "none")})
	f.isClass(err, errclass.NotFound, "a commit of a missing host directory")
	_, err = f.eng.CommitDir(f.ctx, p, "none", wire.CommitDir{FromPath: src})
	f.isClass(err, errclass.NotFound, "a commit to an unknown branch")
}
