package main

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"layerfs.dev/layerfs/wire"
)

// TestMergeVerbs: two agents' workspaces on main through the CLI: commit
// --merge, ws update with and without markers, ws status and ws resolve,
// ws fork --count, and merge of branches, with the exit code of conflicts.
func TestMergeVerbs(t *testing.T) {
	p := newProc(t)
	p.ok("init")
	p.ok("project", "create", "demo")
	var a, b wire.Workspace
	p.json(&a, "ws", "create", "demo", "main")
	p.json(&b, "ws", "create", "demo", "main")
	p.ok("ws", "exec", a.ID, "-c", "printf '1\\n2\\n3\\n' > notes.txt")
	p.ok("ws", "commit", a.ID, "-m", "notes")
	p.ok("ws", "exec", b.ID, "-c", "echo b > b.txt")
	r := p.run("ws", "commit", b.ID, "-m", "b")
	require.Equal(t, 0, r.code, "%+v", r)
	assert.Contains(t, r.stdout, "head-moved")
	assert.Contains(t, r.stdout, "--merge", "the way out is named")
	var cr wire.CommitResult
	p.json(&cr, "ws", "commit", b.ID, "-m", "b", "--merge")
	require.Equal(t, wire.Merged, cr.Result)
	assert.Equal(t, "1\n2\n3\n", p.ok("ws", "exec", b.ID, "--", "cat", "notes.txt"))
	assert.Contains(t, p.ok("log", "demo", "main"), "(merge of ")

	// Both change line 2.
	p.ok("ws", "exec", a.ID, "-c", "printf '1\\ntwo by a\\n3\\n' > notes.txt")
	p.ok("ws", "commit", a.ID, "--merge")
	p.ok("ws", "exec", b.ID, "-c", "printf '1\\ntwo by b\\n3\\n' > notes.txt")
	r = p.run("ws", "commit", b.ID, "--merge", "--json")
	require.Equal(t, 11, r.code, "a conflict's exit code: %+v", r)
	var conflicts struct {
		Result    string
		Conflicts []wire.Conflict
	}
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &conflicts), r.stdout)
	require.Equal(t, "conflicts", conflicts.Result)
	require.Equal(t, "notes.txt", conflicts.Conflicts[0].Path)
	r = p.run("ws", "update", b.ID)
	require.Equal(t, 11, r.code, "%+v", r)
	assert.Contains(t, r.stdout, "notes.txt")
	assert.Equal(t, "1\ntwo by b\n3\n", p.ok("ws", "exec", b.ID, "--", "cat", "notes.txt"), "nothing changed")
	out := p.ok("ws", "update", b.ID, "--conflict-markers")
	assert.Contains(t, out, "updated")
	assert.Contains(t, p.ok("ws", "exec", b.ID, "--", "cat", "notes.txt"), "<<<<<<< workspace "+b.ID)
	assert.Regexp(t, `conflicts +1 `, p.ok("ws", "status", b.ID), "status lists it")
	r = p.run("ws", "commit", b.ID, "-m", "too soon")
	require.Equal(t, 11, r.code, "a commit with a conflict unresolved: %+v", r)
	assert.Contains(t, p.ok("ws", "resolve", b.ID, "notes.txt"), "no conflicts left")
	p.json(&cr, "ws", "commit", b.ID, "-m", "both")
	require.Equal(t, wire.Created, cr.Result)

	// Forks hold the uncommitted change.
	p.ok("ws", "exec", b.ID, "-c", "echo wip > wip.txt")
	var forks []wire.Workspace
	p.json(&forks, "ws", "fork", b.ID, "--count", "3")
	require.Len(t, forks, 3)
	for _, f := range forks {
		assert.Equal(t, "wip\n", p.ok("ws", "exec", f.ID, "--", "cat", "wip.txt"))
		p.ok("ws", "end", f.ID, "--discard")
	}
	if r := p.run("ws", "fork", b.ID, "--count", "0"); r.code != 2 {
		t.Errorf("fork --count 0: %+v", r)
	}

	// Branch merges.
	p.ok("branch", "fork", "demo", "topic", "--from", "main")
	var mr wire.MergeResult
	p.json(&mr, "merge", "demo", "main", "--into", "topic")
	assert.Equal(t, wire.UpToDate, mr.Result)
	var tw wire.Workspace
	p.json(&tw, "ws", "create", "demo", "topic")
	p.ok("ws", "exec", tw.ID, "-c", "printf '\\0topic' > bin")
	p.ok("ws", "commit", tw.ID)
	p.ok("ws", "exec", a.ID, "-c", "printf '\\0main' > bin")
	p.ok("ws", "commit", a.ID, "--merge")
	p.json(&mr, "merge", "demo", "topic", "--into", "main", "--dry-run", "--prefer", "theirs")
	assert.Equal(t, wire.Merged, mr.Result)
	assert.True(t, mr.DryRun)
	p.json(&mr, "merge", "demo", "topic", "--into", "main", "--dry-run", "--prefer", "theirs", "--no-renames")
	assert.Equal(t, wire.Merged, mr.Result)
	p.json(&mr, "merge", "demo", "topic", "--into", "main", "--dry-run", "--prefer", "theirs", "--find-renames", "90")
	assert.Equal(t, wire.Merged, mr.Result)
	if r := p.run("merge", "demo", "topic", "--into", "main", "--find-renames", "101"); r.code != 2 || !strings.Contains(r.stderr, "rename_threshold") {
		t.Errorf("merge --find-renames 101: %+v", r)
	}
	r = p.run("merge", "demo", "topic", "--into", "main")
	require.Equal(t, 11, r.code, "%+v", r)
	assert.Contains(t, r.stdout, "add/add")
	assert.True(t, strings.Contains(r.stderr, "conflict"), r.stderr)
	if r := p.run("merge", "demo", "nope", "--into", "main"); r.code != 3 {
		t.Errorf("merge of an unknown ref: %+v", r)
	}
	out = p.ok("merge", "demo", "topic", "--into", "main", "--prefer", "ours", "-m", "keep main's")
	assert.Contains(t, out, "merged")
	for _, w := range []string{a.ID, b.ID, tw.ID} {
		p.ok("ws", "end", w, "--discard")
	}
}
