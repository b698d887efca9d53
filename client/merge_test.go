package client_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"layerfs.dev/layerfs/client"
	"layerfs.dev/layerfs/wire"
)

// TestMerges: through the API, a branch merged into another, a commit that
// merges after losing the race, a workspace that catches up with markers,
// a fork, and the conflict error with its conflicts.
func TestMerges(t *testing.T) {
	ctx := t.Context()
	c := dial(t)
	p := project(t, c)
	a, err := c.CreateWorkspace(ctx, client.WorkspaceSpec{Project: p, Branch: "main"})
	require.NoError(t, err)
	b, err := c.CreateWorkspace(ctx, client.WorkspaceSpec{Project: p, Branch: "main"})
	require.NoError(t, err)
	require.NoError(t, a.WriteFile(ctx, "a.txt", []byte("a\n"), 0o644))
	_, err = a.Commit(ctx, "a")
	require.NoError(t, err)
	require.NoError(t, b.WriteFile(ctx, "b.txt", []byte("b\n"), 0o644))
	r, err := b.CommitMerge(ctx, "b")
	require.NoError(t, err)
	require.Equal(t, wire.Merged, r.Result)
	got, err := b.ReadFile(ctx, "a.txt")
	require.NoError(t, err)
	require.Equal(t, "a\n", string(got))
	log, err := c.Log(ctx, p, "main", 0)
	require.NoError(t, err)
	require.Len(t, log[0].Parents, 2)
	page, err := c.LogAfter(ctx, p, "main", log[0].ID, 0)
	require.NoError(t, err)
	require.Equal(t, log[1:], page)

	// Both change a.txt: b's update conflicts, then takes markers.
	require.NoError(t, a.WriteFile(ctx, "a.txt", []byte("from a\n"), 0o644))
	_, err = a.CommitMerge(ctx, "a2")
	require.NoError(t, err)
	require.NoError(t, b.WriteFile(ctx, "a.txt", []byte("from b\n"), 0o644))
	_, err = b.Update(ctx, wire.UpdateRequest{})
	require.True(t, client.IsConflict(err), "%v", err)
	cs := client.Conflicts(err)
	require.Len(t, cs, 1)
	require.Equal(t, "a.txt", cs[0].Path)
	require.Equal(t, wire.ConflictContent, cs[0].Kind)
	require.NotEmpty(t, cs[0].Theirs.Object)
	u, err := b.Update(ctx, wire.UpdateRequest{ConflictMarkers: true})
	require.NoError(t, err)
	require.Equal(t, wire.Updated, u.Result)
	st, err := b.Status(ctx)
	require.NoError(t, err)
	require.Len(t, st.Conflicts, 1)
	_, err = b.Commit(ctx, "refused")
	require.True(t, client.IsConflict(err))
	left, err := b.Resolve(ctx, "a.txt")
	require.NoError(t, err)
	require.Empty(t, left)

	forks, err := b.Fork(ctx, 2)
	require.NoError(t, err)
	require.Len(t, forks, 2)
	for _, f := range forks {
		got, err := f.ReadFile(ctx, "a.txt")
		require.NoError(t, err)
		require.Contains(t, string(got), "<<<<<<< ", "the fork holds the workspace as it is")
		require.NoError(t, f.End(ctx, client.EndOptions{Discard: true}))
	}
	_, err = b.Commit(ctx, "resolved")
	require.NoError(t, err)

	_, err = c.ForkBranch(ctx, p, "topic", "main")
	require.NoError(t, err)
	require.NoError(t, a.WriteFile(ctx, "t.txt", []byte("t\n"), 0o644))
	_, err = a.CommitMerge(ctx, "t")
	require.NoError(t, err)
	m, err := c.Merge(ctx, p, wire.MergeRequest{Source: "main", Into: "topic"})
	require.NoError(t, err)
	require.Equal(t, wire.FastForward, m.Result)
	_, err = c.Merge(ctx, p, wire.MergeRequest{Source: "nope", Into: "topic"})
	require.True(t, client.IsNotFound(err))
	for _, w := range []*client.Workspace{a, b} {
		require.NoError(t, w.End(ctx, client.EndOptions{Discard: true}))
	}
}
