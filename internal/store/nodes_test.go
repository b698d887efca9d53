package store

import (
	"context"
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestNodes: a host's heartbeat makes it live with its address; any host
// finds which host serves a workspace and lists every host's workspaces
// with their host; a retired host is no longer live; an embedded Store has
// no nodes.
func TestNodes(t *testing.T) {
	ctx := context.Background()
	url := sharedURL(t)
	a, b := openHost(t, url), openHost(t, url)
	c := commitFiles(t, a, ZeroID, "base", map[string][]byte{"f": []byte("x")})
	_, err := a.CreateProject(ctx, "p", c)
	require.NoError(t, err)
	_, err = a.CreateWorkspace(ctx, Workspace{ID: "ws-a", Project: "p", Branch: DefaultBranch, Base: c, Head: c, State: "live"})
	require.NoError(t, err)

	// a records workspaces before its first heartbeat: its name only.
	n, err := b.WorkspaceNode(ctx, "ws-a")
	require.NoError(t, err)
	assert.Equal(t, Node{Name: a.Node()}, n, "before a's heartbeat")

	require.NoError(t, a.Heartbeat(ctx, "tcp://10.0.0.1:7070"))
	require.NoError(t, b.Heartbeat(ctx, ""))
	n, err = b.WorkspaceNode(ctx, "ws-a")
	require.NoError(t, err)
	assert.Equal(t, a.Node(), n.Name)
	assert.Equal(t, "tcp://10.0.0.1:7070", n.Address)
	assert.True(t, n.Live, "a just sent its heartbeat")
	assert.False(t, n.Seen.IsZero())
	_, err = b.WorkspaceNode(ctx, "nope")
	assert.ErrorIs(t, err, ErrNotFound)

	nodes, err := b.Nodes(ctx)
	require.NoError(t, err)
	require.Len(t, nodes, 2)
	for _, n := range nodes {
		assert.True(t, n.Live, "node %s", n.Name)
	}

	all, err := b.FleetWorkspaces(ctx)
	require.NoError(t, err)
	require.Len(t, all, 1, "b lists a's workspace in the fleet's")
	assert.Equal(t, "ws-a", all[0].ID)
	assert.Equal(t, a.Node(), all[0].Node)
	own, err := b.Workspaces(ctx)
	require.NoError(t, err)
	assert.Empty(t, own, "b's own workspaces")

	require.NoError(t, a.Retire(ctx))
	n, err = b.WorkspaceNode(ctx, "ws-a")
	require.NoError(t, err)
	assert.False(t, n.Live, "a retired")
	assert.Equal(t, "tcp://10.0.0.1:7070", n.Address, "a retired keeps its last address")

	local := newDB(t)
	nodes, err = local.Nodes(ctx)
	assert.NoError(t, err)
	assert.Empty(t, nodes)
	_, err = local.WorkspaceNode(ctx, "ws-a")
	assert.ErrorIs(t, err, ErrNotFound)
	assert.True(t, errors.Is(local.Heartbeat(ctx, ""), ErrNotShared))
}
