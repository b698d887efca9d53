package engine_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"layerfs.dev/layerfs/internal/engine"
	"layerfs.dev/layerfs/internal/platforms"
	"layerfs.dev/layerfs/internal/platforms/local"
	"layerfs.dev/layerfs/internal/store"
	"layerfs.dev/layerfs/internal/testenv"
	"layerfs.dev/layerfs/wire"
	"layerfs.dev/layerfs/wire/errclass"
)

const lines = "1\n2\n3\n4\n5\n6\n7\n8\n"

// projectWith makes project p whose main holds shared.txt (eight lines)
// and bin (a binary file).
func projectWith(t *testing.T, e *engine.Engine) {
	t.Helper()
	dir := t.TempDir()
	require.NoError(t, writeFiles(dir, map[string]string{"shared.txt": lines, "bin": "\x00zero"}))
	_, err := e.CreateProject(t.Context(), wire.CreateProject{Name: "p", FromPath: dir})
	require.NoError(t, err)
}

func writeFiles(dir string, files map[string]string) error {
	for name, data := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(data), 0o644); err != nil {
			return err
		}
	}
	return nil
}

func openWS(t *testing.T, e *engine.Engine) string {
	t.Helper()
	ws, err := e.CreateWorkspace(t.Context(), wire.WorkspaceSpec{Project: "p", Branch: "main"})
	require.NoError(t, err)
	return ws.ID
}

func cat(t *testing.T, e *engine.Engine, id, path string) string {
	t.Helper()
	var b bytes.Buffer
	_, err := e.ReadFile(t.Context(), id, path, &b)
	require.NoError(t, err, "read %s of %s", path, id)
	return b.String()
}

// headFiles is the files of ref's tree and their contents.
func headFiles(t *testing.T, e *engine.Engine, ref string) map[string]string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "co")
	_, err := e.Checkout(t.Context(), "p", wire.Checkout{Ref: ref, Path: dir})
	require.NoError(t, err)
	out := map[string]string{}
	require.NoError(t, filepath.Walk(dir, func(p string, fi os.FileInfo, err error) error {
		if err != nil || !fi.Mode().IsRegular() {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		b, err := os.ReadFile(p)
		out[rel] = string(b)
		return err
	}))
	return out
}

func changedPaths(t *testing.T, e *engine.Engine, id string) []string {
	t.Helper()
	st, err := e.WorkspaceStatus(t.Context(), id)
	require.NoError(t, err)
	var out []string
	for _, c := range st.Changes {
		out = append(out, c.Path)
	}
	return out
}

func conflictsOf(t *testing.T, err error) []wire.Conflict {
	t.Helper()
	require.ErrorIs(t, err, errclass.Conflict)
	var we *wire.Error
	require.True(t, errors.As(err, &we), "a typed error: %v", err)
	require.NotEmpty(t, we.Conflicts)
	return we.Conflicts
}

func TestCommitMerge(t *testing.T) { onBothPaths(t, testCommitMerge) }

// testCommitMerge: two workspaces on main change different files and
// different lines of one file; the second commit merges, lands, and the
// second workspace then shows the merge and commits on it plainly.
func testCommitMerge(t *testing.T, path string) {
	e, db := newEngineOn(t, path)
	ctx := t.Context()
	projectWith(t, e)
	a, b := openWS(t, e), openWS(t, e)
	run(t, e, a, "echo a > a.txt && sed -i 's/^1$/one/' shared.txt")
	ra, err := e.CommitWorkspace(ctx, a, wire.CommitRequest{Message: "a"})
	require.NoError(t, err)
	require.Equal(t, wire.Created, ra.Result)
	run(t, e, b, "mkdir -p sub && echo b > sub/b.txt && sed -i 's/^8$/eight/' shared.txt")

	plain, err := e.CommitWorkspace(ctx, b, wire.CommitRequest{Message: "b"})
	require.NoError(t, err)
	require.Equal(t, wire.HeadMoved, plain.Result, "without merge: head-moved, as before")
	rb, err := e.CommitWorkspace(ctx, b, wire.CommitRequest{Message: "b", Merge: true})
	require.NoError(t, err)
	require.Equal(t, wire.Merged, rb.Result)
	require.Equal(t, rb.Commit, rb.Head)
	require.NotNil(t, rb.Merge)
	require.Len(t, rb.Merge.Bases, 1)
	mc, err := e.Commit(ctx, "p", rb.Commit)
	require.NoError(t, err)
	require.Equal(t, []string{ra.Commit, rb.Merge.Own}, mc.Parents, "the head, then the workspace's commit")
	want := map[string]string{"a.txt": "a\n", "sub/b.txt": "b\n", "shared.txt": "one\n2\n3\n4\n5\n6\n7\neight\n", "bin": "\x00zero"}
	require.Equal(t, want, headFiles(t, e, "main"))

	// The workspace shows the merge and has nothing to commit.
	require.Equal(t, "a\n", cat(t, e, b, "a.txt"))
	require.Equal(t, want["shared.txt"], cat(t, e, b, "shared.txt"))
	require.Empty(t, changedPaths(t, e, b))
	ws, err := e.WorkspaceStatus(ctx, b)
	require.NoError(t, err)
	require.Equal(t, rb.Commit, ws.Head)
	// Its next commit is a plain one on the merge.
	run(t, e, b, "echo more >> sub/b.txt")
	require.Equal(t, []string{"sub/b.txt"}, changedPaths(t, e, b))
	r2, err := e.CommitWorkspace(ctx, b, wire.CommitRequest{Message: "after"})
	require.NoError(t, err)
	require.Equal(t, wire.Created, r2.Result)
	c2, err := e.Commit(ctx, "p", r2.Commit)
	require.NoError(t, err)
	require.Equal(t, rb.Commit, c2.Parent)
	require.EqualValues(t, 1, c2.Stats.Changed)

	// A conflicting commit with merge publishes nothing and keeps the changes.
	run(t, e, a, "sed -i 's/^4$/four-a/' shared.txt")
	_, err = e.CommitWorkspace(ctx, a, wire.CommitRequest{Message: "a2", Merge: true})
	require.NoError(t, err)
	run(t, e, b, "sed -i 's/^4$/four-b/' shared.txt")
	head, err := e.Branch(ctx, "p", "main")
	require.NoError(t, err)
	_, err = e.CommitWorkspace(ctx, b, wire.CommitRequest{Message: "b2", Merge: true})
	cs := conflictsOf(t, err)
	require.Equal(t, "shared.txt", cs[0].Path)
	require.Equal(t, wire.ConflictContent, cs[0].Kind)
	require.NotEmpty(t, cs[0].Ours.Object)
	require.NotEqual(t, cs[0].Ours.Object, cs[0].Theirs.Object)
	after, err := e.Branch(ctx, "p", "main")
	require.NoError(t, err)
	require.Equal(t, head.Head, after.Head, "nothing published")
	require.Equal(t, []string{"shared.txt"}, changedPaths(t, e, b), "the workspace keeps its change")
	rep, err := db.Fsck(ctx, nil)
	require.NoError(t, err)
	require.NoError(t, rep.Err())

	// A restarted daemon serves the merged workspace as the merge plus its
	// change: its commit holds exactly that.
	e2 := restart(t, e, db, path)
	require.Equal(t, "a\n", cat(t, e2, b, "a.txt"))
	r3, err := e2.CommitWorkspace(ctx, b, wire.CommitRequest{Message: "after restart"})
	require.NoError(t, err)
	require.Equal(t, wire.HeadMoved, r3.Result)
	want["sub/b.txt"] = "b\nmore\n"
	want["shared.txt"] = "one\n2\n3\nfour-b\n5\n6\n7\neight\n"
	require.Equal(t, want, headFiles(t, e2, r3.Commit))
}

// restart stops e, keeping its workspaces, and starts an engine on the
// same Store that remounts them, as a restarted daemon does.
func restart(t *testing.T, e *engine.Engine, db *store.DB, path string) *engine.Engine {
	t.Helper()
	ctx := context.Background()
	require.NoError(t, e.Shutdown(ctx))
	p := local.New(local.Options{})
	require.NoError(t, p.Up(ctx))
	e2, err := engine.New(ctx, engine.Config{Store: db, Platforms: []platforms.Platform{p}, DataPath: path})
	require.NoError(t, err)
	t.Cleanup(func() {
		assert.NoError(t, e2.Shutdown(context.Background()))
		p.Down(context.Background())
	})
	require.NoError(t, e2.Recover(ctx))
	return e2
}

func TestUpdateWorkspace(t *testing.T) { onBothPaths(t, testUpdateWorkspace) }

// testUpdateWorkspace: a workspace with uncommitted changes takes in what
// another workspace committed, keeps its changes, and commits them on the
// new head; a conflict changes nothing, or with markers is left to resolve.
func testUpdateWorkspace(t *testing.T, path string) {
	e, _ := newEngineOn(t, path)
	ctx := t.Context()
	projectWith(t, e)
	a, b := openWS(t, e), openWS(t, e)
	run(t, e, a, "echo a > a.txt && sed -i 's/^1$/one/' shared.txt && rm bin")
	ra, err := e.CommitWorkspace(ctx, a, wire.CommitRequest{Message: "a"})
	require.NoError(t, err)
	run(t, e, b, "echo b > b.txt && sed -i 's/^8$/eight/' shared.txt")
	up, err := e.UpdateWorkspace(ctx, b, wire.UpdateRequest{})
	require.NoError(t, err)
	require.Equal(t, wire.Updated, up.Result)
	require.Equal(t, ra.Commit, up.Head)
	require.Empty(t, up.Conflicts)
	require.Equal(t, "a\n", cat(t, e, b, "a.txt"), "the branch's new file")
	require.Equal(t, "b\n", cat(t, e, b, "b.txt"), "its own new file")
	require.Equal(t, "one\n2\n3\n4\n5\n6\n7\neight\n", cat(t, e, b, "shared.txt"))
	_, err = e.Stat(ctx, b, "bin")
	require.ErrorIs(t, err, errclass.NotFound, "the branch's delete")
	require.ElementsMatch(t, []string{"b.txt", "shared.txt"}, changedPaths(t, e, b), "its own changes only, against the new head")
	ws, err := e.WorkspaceStatus(ctx, b)
	require.NoError(t, err)
	require.Equal(t, ra.Commit, ws.Head)
	out, _ := run(t, e, b, "ls")
	require.Equal(t, "a.txt\nb.txt\nshared.txt\n", out, "a sandbox sees the same")
	again, err := e.UpdateWorkspace(ctx, b, wire.UpdateRequest{})
	require.NoError(t, err)
	require.Equal(t, wire.UpToDate, again.Result)
	rb, err := e.CommitWorkspace(ctx, b, wire.CommitRequest{Message: "b"})
	require.NoError(t, err)
	require.Equal(t, wire.Created, rb.Result, "a plain commit on the new head")
	c, err := e.Commit(ctx, "p", rb.Commit)
	require.NoError(t, err)
	require.Equal(t, ra.Commit, c.Parent)
	require.Equal(t, map[string]string{"a.txt": "a\n", "b.txt": "b\n", "shared.txt": "one\n2\n3\n4\n5\n6\n7\neight\n"}, headFiles(t, e, "main"))

	// A conflict without markers changes nothing.
	run(t, e, a, "echo a2 > a.txt")
	_, err = e.UpdateWorkspace(ctx, a, wire.UpdateRequest{})
	require.NoError(t, err)
	_, err = e.CommitWorkspace(ctx, a, wire.CommitRequest{Message: "a2"})
	require.NoError(t, err)
	run(t, e, b, "echo b2 > a.txt && printf 'x\\0y' > blob")
	before, err := e.WorkspaceStatus(ctx, b)
	require.NoError(t, err)
	_, err = e.UpdateWorkspace(ctx, b, wire.UpdateRequest{})
	cs := conflictsOf(t, err)
	require.Equal(t, "a.txt", cs[0].Path)
	require.Equal(t, "b2\n", cat(t, e, b, "a.txt"))
	st, err := e.WorkspaceStatus(ctx, b)
	require.NoError(t, err)
	require.Equal(t, before.Head, st.Head)
	require.Empty(t, st.Conflicts)

	// With markers: the file holds them, the status lists the conflict and
	// a commit is refused until the markers are gone.
	up, err = e.UpdateWorkspace(ctx, b, wire.UpdateRequest{ConflictMarkers: true})
	require.NoError(t, err)
	require.Len(t, up.Conflicts, 1)
	require.True(t, up.Conflicts[0].Markers)
	got := cat(t, e, b, "a.txt")
	require.Contains(t, got, "<<<<<<< workspace "+b+"\nb2\n=======\na2\n>>>>>>> main\n")
	st, err = e.WorkspaceStatus(ctx, b)
	require.NoError(t, err)
	require.Len(t, st.Conflicts, 1)
	_, err = e.CommitWorkspace(ctx, b, wire.CommitRequest{Message: "b2"})
	conflictsOf(t, err)
	_, err = e.UpdateWorkspace(ctx, b, wire.UpdateRequest{})
	conflictsOf(t, err)
	run(t, e, b, "echo both > a.txt")
	st, err = e.WorkspaceStatus(ctx, b)
	require.NoError(t, err)
	require.Empty(t, st.Conflicts, "markers removed: resolved")
	rb, err = e.CommitWorkspace(ctx, b, wire.CommitRequest{Message: "resolved"})
	require.NoError(t, err)
	require.Equal(t, wire.Created, rb.Result)
	require.Equal(t, "both\n", headFiles(t, e, "main")["a.txt"])
	require.Equal(t, "x\x00y", headFiles(t, e, "main")["blob"])
}

// TestUpdateBinaryConflict: a binary conflict left by an update with
// markers keeps the workspace's file and is resolved explicitly.
func TestUpdateBinaryConflict(t *testing.T) {
	e, _ := newEngine(t)
	ctx := t.Context()
	projectWith(t, e)
	a, b := openWS(t, e), openWS(t, e)
	run(t, e, a, "printf '\\0a' > bin")
	_, err := e.CommitWorkspace(ctx, a, wire.CommitRequest{})
	require.NoError(t, err)
	run(t, e, b, "printf '\\0b' > bin")
	head, err := e.Branch(ctx, "p", "main")
	require.NoError(t, err)
	_, err = e.UpdateWorkspace(ctx, b, wire.UpdateRequest{})
	cs := conflictsOf(t, err)
	require.Equal(t, wire.ConflictBinary, cs[0].Kind)
	st, err := e.WorkspaceStatus(ctx, b)
	require.NoError(t, err)
	require.NotEqual(t, head.Head, st.Head, "the workspace stays where it was")
	require.Equal(t, []string{"bin"}, changedPaths(t, e, b))
	up, err := e.UpdateWorkspace(ctx, b, wire.UpdateRequest{ConflictMarkers: true})
	require.NoError(t, err)
	require.Len(t, up.Conflicts, 1)
	require.False(t, up.Conflicts[0].Markers)
	require.Equal(t, "\x00b", cat(t, e, b, "bin"), "the workspace's side kept")
	_, err = e.CommitWorkspace(ctx, b, wire.CommitRequest{})
	conflictsOf(t, err)
	_, err = e.ResolveConflicts(ctx, b, wire.ResolveRequest{Paths: []string{"nope"}})
	require.ErrorIs(t, err, errclass.NotFound)
	left, err := e.ResolveConflicts(ctx, b, wire.ResolveRequest{Paths: []string{"bin"}})
	require.NoError(t, err)
	require.Empty(t, left)
	r, err := e.CommitWorkspace(ctx, b, wire.CommitRequest{})
	require.NoError(t, err)
	require.Equal(t, wire.Created, r.Result)
	require.Equal(t, "\x00b", headFiles(t, e, "main")["bin"])
}

func storeObjects(t *testing.T, db *store.DB) int64 {
	st, err := db.Stats(t.Context())
	require.NoError(t, err)
	return st.Chunks.Count + st.Manifests.Count + st.Trees.Count + st.Commits.Count
}

// TestUpdateRefusedUnderExec: an update of a workspace an exec runs in is
// refused, and changes nothing; a merge into its branch meanwhile goes on.
func TestUpdateRefusedUnderExec(t *testing.T) {
	e, _ := newEngine(t)
	ctx := t.Context()
	projectWith(t, e)
	a, b := openWS(t, e), openWS(t, e)
	run(t, e, a, "echo a > a.txt")
	_, err := e.CommitWorkspace(ctx, a, wire.CommitRequest{})
	require.NoError(t, err)
	_, err = e.ForkBranch(ctx, "p", wire.ForkBranch{Name: "topic", From: "main"})
	require.NoError(t, err)
	done := make(chan error, 1)
	go func() {
		var out bytes.Buffer
		_, err := e.Exec(context.Background(), b, wire.ExecRequest{Body: "touch started; sleep 3; cat shared.txt"}, &out, &out)
		done <- err
	}()
	require.Eventually(t, func() bool { _, err := e.Stat(ctx, b, "started"); return err == nil }, 10*time.Second, 20*time.Millisecond)
	_, err = e.UpdateWorkspace(ctx, b, wire.UpdateRequest{})
	require.ErrorIs(t, err, errclass.Busy)
	_, err = e.Stat(ctx, b, "a.txt")
	require.ErrorIs(t, err, errclass.NotFound, "nothing changed")
	// Merging into main, on which the busy workspace stands, is fine.
	run(t, e, a, "echo t > t.txt")
	_, err = e.CommitWorkspace(ctx, a, wire.CommitRequest{})
	require.NoError(t, err)
	mr, err := e.MergeBranch(ctx, "p", wire.MergeRequest{Source: "main", Into: "topic"})
	require.NoError(t, err)
	require.Equal(t, wire.FastForward, mr.Result)
	require.NoError(t, <-done)
	up, err := e.UpdateWorkspace(ctx, b, wire.UpdateRequest{})
	require.NoError(t, err)
	require.Equal(t, wire.Updated, up.Result)
	require.ElementsMatch(t, []string{"started"}, changedPaths(t, e, b))
}

// TestMergeBranchBadInput: unknown refs, a commit of another project, a
// binary conflict: clear errors, nothing changed in the Store.
func TestMergeBranchBadInput(t *testing.T) {
	e, db := newEngine(t)
	ctx := t.Context()
	projectWith(t, e)
	_, err := e.CreateProject(ctx, wire.CreateProject{Name: "other"})
	require.NoError(t, err)
	otherHead, err := e.Branch(ctx, "other", "main")
	require.NoError(t, err)
	_, err = e.ForkBranch(ctx, "p", wire.ForkBranch{Name: "topic", From: "main"})
	require.NoError(t, err)
	a := openWS(t, e)
	run(t, e, a, "printf '\\0main' > bin")
	_, err = e.CommitWorkspace(ctx, a, wire.CommitRequest{})
	require.NoError(t, err)
	ta, err := e.CreateWorkspace(ctx, wire.WorkspaceSpec{Project: "p", Branch: "topic"})
	require.NoError(t, err)
	run(t, e, ta.ID, "printf '\\0topic' > bin")
	_, err = e.CommitWorkspace(ctx, ta.ID, wire.CommitRequest{})
	require.NoError(t, err)

	objects := storeObjects(t, db)
	heads := map[string]string{}
	for _, b := range []string{"main", "topic"} {
		br, err := e.Branch(ctx, "p", b)
		require.NoError(t, err)
		heads[b] = br.Head
	}
	for name, tc := range map[string]struct {
		req   wire.MergeRequest
		class *errclass.Class
	}{
		"unknown source":       {wire.MergeRequest{Source: "nope", Into: "main"}, errclass.NotFound},
		"unknown branch":       {wire.MergeRequest{Source: "topic", Into: "nope"}, errclass.NotFound},
		"no source":            {wire.MergeRequest{Into: "main"}, errclass.Invalid},
		"bad prefer":           {wire.MergeRequest{Source: "topic", Into: "main", Prefer: "mine"}, errclass.Invalid},
		"bad threshold":        {wire.MergeRequest{Source: "topic", Into: "main", RenameThreshold: 101}, errclass.Invalid},
		"renames and none":     {wire.MergeRequest{Source: "topic", Into: "main", RenameThreshold: 60, NoRenames: true}, errclass.Invalid},
		"conflict, no renames": {wire.MergeRequest{Source: "topic", Into: "main", NoRenames: true}, errclass.Conflict},
		"another project":      {wire.MergeRequest{Source: otherHead.Head, Into: "main"}, errclass.Invalid},
		"binary conflict":      {wire.MergeRequest{Source: "topic", Into: "main"}, errclass.Conflict},
		"binary conflict dry":  {wire.MergeRequest{Source: "topic", Into: "main", DryRun: true}, errclass.Conflict},
	} {
		_, err := e.MergeBranch(ctx, "p", tc.req)
		require.ErrorIs(t, err, tc.class, name)
		if tc.class == errclass.Conflict {
			cs := conflictsOf(t, err)
			require.Equal(t, "bin", cs[0].Path, name)
			require.Equal(t, wire.ConflictBinary, cs[0].Kind, name)
		}
	}
	_, err = e.MergeBranch(ctx, "other", wire.MergeRequest{Source: heads["main"], Into: "main"})
	require.Error(t, err, "a commit of p merged into other")
	require.Equal(t, objects, storeObjects(t, db), "nothing stored")
	for b, h := range heads {
		br, err := e.Branch(ctx, "p", b)
		require.NoError(t, err)
		require.Equal(t, h, br.Head, "head of %s", b)
	}
	// Preferring one side merges.
	mr, err := e.MergeBranch(ctx, "p", wire.MergeRequest{Source: "topic", Into: "main", Prefer: wire.PreferTheirs, Message: "take topic's"})
	require.NoError(t, err)
	require.Equal(t, wire.Merged, mr.Result)
	require.Equal(t, "\x00topic", headFiles(t, e, "main")["bin"])
	log, err := e.Log(ctx, "p", "main", "", 0)
	require.NoError(t, err)
	require.Equal(t, "take topic's", log[0].Message)
	require.Len(t, log[0].Parents, 2)
}

func TestForkCount(t *testing.T) { onBothPaths(t, testForkCount) }

// testForkCount: forks hold the source's committed and uncommitted state,
// each its own from then on; the source is undisturbed.
func testForkCount(t *testing.T, path string) {
	e, _ := newEngineOn(t, path)
	ctx := t.Context()
	projectWith(t, e)
	src := openWS(t, e)
	run(t, e, src, "echo c > committed.txt")
	_, err := e.CommitWorkspace(ctx, src, wire.CommitRequest{})
	require.NoError(t, err)
	run(t, e, src, "mkdir -p new/dir && echo u > new/dir/u.txt && rm bin && sed -i 's/^3$/three/' shared.txt && ln -s shared.txt link")
	want := changedPaths(t, e, src)
	fr, err := e.ForkWorkspace(ctx, src, wire.ForkRequest{Count: 3})
	require.NoError(t, err)
	require.Len(t, fr.Workspaces, 3)
	srcSt, err := e.WorkspaceStatus(ctx, src)
	require.NoError(t, err)
	for i, f := range fr.Workspaces {
		require.Equal(t, wire.StateMounted, f.State)
		require.Equal(t, srcSt.Head, f.Head)
		require.Equal(t, "main", f.Branch)
		require.Equal(t, want, changedPaths(t, e, f.ID), "fork %d's changes", i)
		require.Equal(t, "u\n", cat(t, e, f.ID, "new/dir/u.txt"))
		require.Equal(t, "c\n", cat(t, e, f.ID, "committed.txt"))
		out, _ := run(t, e, f.ID, "readlink link; grep three shared.txt; ls bin 2>/dev/null || echo gone")
		require.Equal(t, "shared.txt\nthree\ngone\n", out)
		run(t, e, f.ID, fmt.Sprintf("echo %d > mine.txt", i))
	}
	require.Equal(t, want, changedPaths(t, e, src), "the source is as it was")
	_, err = e.Stat(ctx, src, "mine.txt")
	require.ErrorIs(t, err, errclass.NotFound, "a fork's write stays in the fork")
	// Each fork commits: the first plainly, the others merge.
	for i, f := range fr.Workspaces {
		r, err := e.CommitWorkspace(ctx, f.ID, wire.CommitRequest{Message: fmt.Sprint("fork ", i), Merge: true})
		if i > 0 && err != nil {
			// Every fork changed shared.txt's third line the same way, and
			// wrote its own mine.txt: the mine.txt are add/add conflicts.
			cs := conflictsOf(t, err)
			require.Equal(t, "mine.txt", cs[0].Path)
			continue
		}
		require.NoError(t, err)
		require.Equal(t, wire.Created, r.Result)
	}
	_, err = e.ForkWorkspace(ctx, src, wire.ForkRequest{Count: wire.MaxForkCount + 1})
	require.ErrorIs(t, err, errclass.Invalid)
	_, err = e.ForkWorkspace(ctx, "ws-nope", wire.ForkRequest{})
	require.ErrorIs(t, err, errclass.NotFound)
}

func TestConcurrentCommitMerge(t *testing.T) {
	t.Run("embedded", func(t *testing.T) {
		e, db := newEngine(t)
		testConcurrentCommitMerge(t, e, db)
	})
	t.Run("shared", func(t *testing.T) {
		e, db := newSharedEngine(t)
		testConcurrentCommitMerge(t, e, db)
	})
}

// newSharedEngine is newEngine on a shared Store (PostgreSQL and S3).
func newSharedEngine(t *testing.T) (*engine.Engine, *store.DB) {
	t.Helper()
	return startEngine(t, store.Options{URL: testenv.StoreURL(t)}, engine.Config{}, local.New(local.Options{}))
}

// testConcurrentCommitMerge: sixteen workspaces on one branch each change
// a file of their own and all commit with merge at once: all sixteen
// land, the head holds the sixteen files, and fsck is clean.
func testConcurrentCommitMerge(t *testing.T, e *engine.Engine, db *store.DB) {
	ctx := t.Context()
	projectWith(t, e)
	const n = 16
	wss := make([]string, n)
	for i := range wss {
		wss[i] = openWS(t, e)
		require.NoError(t, e.WriteFile(ctx, wss[i], fmt.Sprintf("agent-%02d.txt", i), 0o644, strings.NewReader(fmt.Sprint(i, "\n"))))
	}
	results := make([]wire.CommitResult, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range wss {
		wg.Go(func() {
			<-start
			results[i], errs[i] = e.CommitWorkspace(ctx, wss[i], wire.CommitRequest{Message: fmt.Sprint("agent ", i), Merge: true})
		})
	}
	close(start)
	wg.Wait()
	var created, merged int
	for i, err := range errs {
		require.NoError(t, err, "workspace %d", i)
		switch results[i].Result {
		case wire.Created:
			created++
		case wire.Merged:
			merged++
		default:
			t.Fatalf("workspace %d: %+v", i, results[i])
		}
	}
	t.Logf("%d created, %d merged", created, merged)
	files := headFiles(t, e, "main")
	for i := range n {
		require.Equal(t, fmt.Sprint(i, "\n"), files[fmt.Sprintf("agent-%02d.txt", i)], "agent %d's file on main", i)
	}
	require.Len(t, files, n+2)
	rep, err := db.Fsck(ctx, nil)
	require.NoError(t, err)
	require.NoError(t, rep.Err())
	// Every workspace shows all sixteen files at the end of its merge or
	// fewer, and nothing uncommitted.
	for _, id := range wss {
		require.Empty(t, changedPaths(t, e, id))
	}
}

func TestRepeatedCatchUps(t *testing.T) { onBothPaths(t, testRepeatedCatchUps) }

// testRepeatedCatchUps: two workspaces take turns, one committing plainly,
// the other merging and the first catching up, many times over; and what
// the workspaces commit holds none of the upper layer's own extended
// attributes (an opaque directory's), which the catch-ups would otherwise
// write back through the mount, escaped, longer each time.
func testRepeatedCatchUps(t *testing.T, path string) {
	e, db := newEngineOn(t, path)
	ctx := t.Context()
	projectWith(t, e)
	a, b := openWS(t, e), openWS(t, e)
	run(t, e, a, "mkdir -p d && echo x > d/x")
	_, err := e.CommitWorkspace(ctx, a, wire.CommitRequest{})
	require.NoError(t, err)
	run(t, e, a, "rm -rf d && mkdir d && echo y > d/y") // d is opaque in the upper now
	for i := range 40 {
		require.NoError(t, e.WriteFile(ctx, a, fmt.Sprintf("d/a-%d", i), 0o644, strings.NewReader("a\n")))
		require.NoError(t, e.WriteFile(ctx, b, fmt.Sprintf("d/b-%d", i), 0o644, strings.NewReader("b\n")))
		ra, err := e.CommitWorkspace(ctx, a, wire.CommitRequest{})
		require.NoError(t, err, "round %d", i)
		require.Equal(t, wire.Created, ra.Result, "round %d", i)
		rb, err := e.CommitWorkspace(ctx, b, wire.CommitRequest{Merge: true})
		require.NoError(t, err, "round %d", i)
		require.Equal(t, wire.Merged, rb.Result, "round %d", i)
		_, err = e.UpdateWorkspace(ctx, a, wire.UpdateRequest{})
		require.NoError(t, err, "round %d", i)
	}
	head, err := e.Branch(ctx, "p", "main")
	require.NoError(t, err)
	c, err := e.Commit(ctx, "p", head.Head)
	require.NoError(t, err)
	root, err := store.ParseID(c.Root)
	require.NoError(t, err)
	tr, err := db.Tree(ctx, root)
	require.NoError(t, err)
	d, ok := tr.Find("d")
	require.True(t, ok)
	require.Empty(t, d.Xattrs, "the committed directory's xattrs")
	files := headFiles(t, e, "main")
	require.Len(t, files, 2+1+80, "shared.txt, bin, d/y and the eighty files")
}

func TestUpdateInterrupted(t *testing.T) { onBothPaths(t, testUpdateInterrupted) }

// testUpdateInterrupted: an update whose writes into the workspace fail
// half way (its upper layer made immutable, as a daemon killed there would
// leave it half done) is recorded before it is made: a restarted daemon
// finishes it when it remounts the workspace, which then holds the branch's
// new file and its own change, standing on the branch's head.
func testUpdateInterrupted(t *testing.T, path string) {
	e, db := newEngineOn(t, path)
	ctx := t.Context()
	projectWith(t, e)
	a, b := openWS(t, e), openWS(t, e)
	run(t, e, a, "mkdir d && echo a > d/a.txt")
	ra, err := e.CommitWorkspace(ctx, a, wire.CommitRequest{})
	require.NoError(t, err)
	run(t, e, b, "echo b > b.txt")
	upper := filepath.Join(db.WorkspacesDir(), b, "upper")
	setImmutable(t, upper, true)
	_, err = e.UpdateWorkspace(ctx, b, wire.UpdateRequest{})
	setImmutable(t, upper, false)
	require.Error(t, err, "the update's writes fail")
	e2 := restart(t, e, db, path)
	st, err := e2.WorkspaceStatus(ctx, b)
	require.NoError(t, err)
	require.Equal(t, ra.Commit, st.Head, "the workspace stands on the branch's head")
	require.Equal(t, "a\n", cat(t, e2, b, "d/a.txt"))
	require.Equal(t, "b\n", cat(t, e2, b, "b.txt"))
	r, err := e2.CommitWorkspace(ctx, b, wire.CommitRequest{Message: "b"})
	require.NoError(t, err)
	require.Equal(t, wire.Created, r.Result)
	require.Equal(t, map[string]string{"shared.txt": lines, "bin": "\x00zero", "d/a.txt": "a\n", "b.txt": "b\n"}, headFiles(t, e2, "main"))
}

// fsImmutable is FS_IMMUTABLE_FL of <linux/fs.h> (chattr +i).
const fsImmutable = 0x10

// setImmutable sets or clears the immutable flag of dir (chattr +i): no
// entry can be made or removed in it, by root either.
func setImmutable(t *testing.T, dir string, on bool) {
	t.Helper()
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY, 0)
	require.NoError(t, err)
	defer unix.Close(fd)
	flags, err := unix.IoctlGetInt(fd, unix.FS_IOC_GETFLAGS)
	require.NoError(t, err)
	if on {
		flags |= fsImmutable
	} else {
		flags &^= fsImmutable
	}
	require.NoError(t, unix.IoctlSetPointerInt(fd, unix.FS_IOC_SETFLAGS, flags))
}

// TestMergeBranchRemoveAgainstTouch is issue 38's smallest case on real
// workspaces: main removes shared.txt, topic only touches it; merging
// topic into main removes it, cleanly, as git does.
func TestMergeBranchRemoveAgainstTouch(t *testing.T) {
	e, _ := newEngine(t)
	ctx := t.Context()
	projectWith(t, e)
	_, err := e.ForkBranch(ctx, "p", wire.ForkBranch{Name: "topic", From: "main"})
	require.NoError(t, err)
	a := openWS(t, e)
	run(t, e, a, "rm shared.txt")
	_, err = e.CommitWorkspace(ctx, a, wire.CommitRequest{})
	require.NoError(t, err)
	tw, err := e.CreateWorkspace(ctx, wire.WorkspaceSpec{Project: "p", Branch: "topic"})
	require.NoError(t, err)
	run(t, e, tw.ID, "touch -d 2030-01-01 shared.txt")
	cr, err := e.CommitWorkspace(ctx, tw.ID, wire.CommitRequest{})
	require.NoError(t, err)
	require.Equal(t, wire.Created, cr.Result, "a touch is a change to commit")
	mr, err := e.MergeBranch(ctx, "p", wire.MergeRequest{Source: "topic", Into: "main"})
	require.NoError(t, err)
	require.Equal(t, wire.Merged, mr.Result)
	files := headFiles(t, e, "main")
	require.NotContains(t, files, "shared.txt")
	require.Contains(t, files, "bin")
}
