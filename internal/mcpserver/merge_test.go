package mcpserver_test

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"layerfs.dev/layerfs/internal/daemontest"
)

// TestTwoAgentsMerge: two agents on one branch commit through MCP; the
// second's commit merges by default; a conflict is refused with the way
// to settle it, which update with markers, an edit and a commit follow;
// merge and fork_workspace do what they say.
func TestTwoAgentsMerge(t *testing.T) {
	d := daemontest.Start(t)
	s := session{t, connect(t, newServer(t, d))}
	var proj struct{ Name string }
	s.ok(&proj, "project_create", map[string]any{"name": "team"})
	var a, b struct{ ID string }
	s.ok(&a, "workspace_create", map[string]any{"project": "team"})
	s.ok(&b, "workspace_create", map[string]any{"project": "team"})
	var wrote struct{ Size int }
	s.ok(&wrote, "write_file", map[string]any{"workspace": a.ID, "path": "notes.txt", "content": "1\n2\n3\n4\n5\n"})
	var cm struct{ Result, Commit, Own, Note string }
	s.ok(&cm, "commit", map[string]any{"workspace": a.ID, "message": "notes"})
	require.Equal(t, "created", cm.Result)
	s.ok(&wrote, "write_file", map[string]any{"workspace": b.ID, "path": "b.txt", "content": "b\n"})
	s.ok(&cm, "commit", map[string]any{"workspace": b.ID, "message": "b"})
	require.Equal(t, "merged", cm.Result, "the second commit merges by default: %+v", cm)
	require.NotEmpty(t, cm.Own)
	var read struct{ Content string }
	s.ok(&read, "read_file", map[string]any{"workspace": b.ID, "path": "notes.txt"})
	require.Equal(t, "1\n2\n3\n4\n5\n", read.Content, "b holds a's file after the merge")

	// Both edit line 3: the commit is refused and says how to settle it.
	s.ok(&wrote, "write_file", map[string]any{"workspace": a.ID, "path": "notes.txt", "content": "1\n2\nthree by a\n4\n5\n"})
	s.ok(&cm, "commit", map[string]any{"workspace": a.ID, "message": "a's 3"})
	s.ok(&wrote, "write_file", map[string]any{"workspace": b.ID, "path": "notes.txt", "content": "1\n2\nthree by b\n4\n5\n"})
	s.refused("conflict: notes.txt (content)", "commit", map[string]any{"workspace": b.ID, "message": "b's 3"})
	s.refused("call update with conflict_markers true", "commit", map[string]any{"workspace": b.ID, "message": "b's 3"})
	s.ok(&cm, "commit", map[string]any{"workspace": b.ID, "message": "no merge", "merge": false})
	require.Equal(t, "head-moved", cm.Result)
	var up struct {
		Result    string
		Conflicts []struct{ Path, Kind string }
	}
	s.ok(&up, "update", map[string]any{"workspace": b.ID})
	require.Equal(t, "updated", up.Result)
	require.Len(t, up.Conflicts, 1)
	s.ok(&read, "read_file", map[string]any{"workspace": b.ID, "path": "notes.txt"})
	require.True(t, strings.Contains(read.Content, "<<<<<<< ") && strings.Contains(read.Content, "three by a"), "markers: %q", read.Content)
	s.refused("conflict", "commit", map[string]any{"workspace": b.ID, "message": "unresolved"})
	s.ok(&wrote, "write_file", map[string]any{"workspace": b.ID, "path": "notes.txt", "content": "1\n2\nthree by a and b\n4\n5\n"})
	s.ok(&cm, "commit", map[string]any{"workspace": b.ID, "message": "both"})
	require.Equal(t, "created", cm.Result)

	// fork_workspace, then merge of a branch.
	s.ok(&wrote, "write_file", map[string]any{"workspace": b.ID, "path": "wip.txt", "content": "wip\n"})
	var forks struct{ Workspaces []string }
	s.ok(&forks, "fork_workspace", map[string]any{"workspace": b.ID, "count": 2})
	require.Len(t, forks.Workspaces, 2)
	s.ok(&read, "read_file", map[string]any{"workspace": forks.Workspaces[1], "path": "wip.txt"})
	require.Equal(t, "wip\n", read.Content)
	var br struct{ Name string }
	s.ok(&br, "fork", map[string]any{"project": "team", "name": "topic", "from": "main"})
	var mg struct{ Result, Head string }
	s.ok(&mg, "merge", map[string]any{"project": "team", "source": "topic"})
	require.Equal(t, "up-to-date", mg.Result)
	s.refused("not_found", "merge", map[string]any{"project": "team", "source": "nope"})
	var log struct {
		Commits []struct {
			Message string
			Parents []string
		}
	}
	s.ok(&log, "log", map[string]any{"project": "team"})
	merges := 0
	for _, c := range log.Commits {
		if len(c.Parents) == 2 {
			merges++
		}
	}
	require.Equal(t, 2, merges, "b's first commit and a's second merged: %+v", log.Commits)
}
