package engine_test

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"layerfs.dev/layerfs/internal/egress/egresstest"
	"layerfs.dev/layerfs/internal/platforms/local"
	"layerfs.dev/layerfs/internal/store"
	"layerfs.dev/layerfs/wire"
	"layerfs.dev/layerfs/wire/errclass"
)

// TestNetworkRecorded: a workspace's network, changed live, is recorded
// in the Store (what a remount gives it) once no exec holds the
// workspace, and a fork takes the source's network as it is now.
func TestNetworkRecorded(t *testing.T) {
	egresstest.Require(t)
	e, db := newEngineWith(t, "", local.New(local.Options{}))
	ctx := context.Background()
	_, err := e.CreateProject(ctx, wire.CreateProject{Name: "n"})
	require.NoError(t, err)
	ws, err := e.CreateWorkspace(ctx, wire.WorkspaceSpec{Project: "n", Branch: "main", Network: wire.NetworkEgress,
		Egress: []wire.NetworkRule{{Domain: "Example.COM."}}})
	require.NoError(t, err)
	require.Equal(t, []wire.NetworkRule{{Domain: "example.com"}}, ws.Egress, "rules as the policy normalizes them")
	_, err = e.SetNetwork(ctx, ws.ID, wire.NetworkChange{Mode: wire.NetworkEgress, Egress: []wire.NetworkRule{{CIDR: "203.0.113.7", Ports: []string{"443"}}}})
	require.NoError(t, err)
	recorded := func() (string, []wire.NetworkRule) {
		rec, err := db.Workspace(ctx, ws.ID)
		require.NoError(t, err)
		var o struct {
			Network string             `json:"network"`
			Egress  []wire.NetworkRule `json:"egress"`
		}
		require.NoError(t, json.Unmarshal(rec.Options, &o))
		return o.Network, o.Egress
	}
	want := []wire.NetworkRule{{CIDR: "203.0.113.7/32", Ports: []string{"443"}}}
	for end := time.Now().Add(5 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		mode, rules := recorded()
		if mode == wire.NetworkEgress && len(rules) == 1 && rules[0].CIDR == want[0].CIDR {
			break
		}
		if time.Now().After(end) {
			t.Fatalf("recorded network %q %+v, want egress %+v", mode, rules, want)
		}
	}
	forks, err := e.ForkWorkspace(ctx, ws.ID, wire.ForkRequest{Count: 1})
	require.NoError(t, err)
	require.Equal(t, wire.NetworkEgress, forks.Workspaces[0].Network)
	require.Equal(t, want, forks.Workspaces[0].Egress)
	_, err = e.SetNetwork(ctx, "ws-000000000000", wire.NetworkChange{Mode: wire.NetworkNone})
	require.True(t, errors.Is(err, errclass.NotFound) || errors.Is(err, store.ErrNotFound), "unknown workspace: %v", err)
}
