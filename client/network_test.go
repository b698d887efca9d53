package client_test

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"layerfs.dev/layerfs/client"
	"layerfs.dev/layerfs/internal/egress/egresstest"
	"layerfs.dev/layerfs/wire"
)

// TestNetwork: a workspace made with egress reaches what its rules allow
// and nothing else, each decision on its event stream and the exec's
// receipt; its network changes live to host, is refused a bad change,
// and goes to none.
func TestNetwork(t *testing.T) {
	w := egresstest.New(t)
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	c := dial(t)
	p := project(t, c)
	web, other := w.Web.String(), w.Other.String()
	ws, err := c.CreateWorkspace(ctx, client.WorkspaceSpec{Project: p, Branch: "main", Network: wire.NetworkEgress,
		Egress: []wire.NetworkRule{{CIDR: web, Ports: []string{"80"}}}})
	require.NoError(t, err)
	defer ws.End(context.Background(), client.EndOptions{Discard: true})
	require.Equal(t, wire.NetworkEgress, ws.Info().Network)
	require.Equal(t, []wire.NetworkRule{{CIDR: web + "/32", Ports: []string{"80"}}}, ws.Info().Egress)
	st, err := ws.Watch(ctx, "")
	require.NoError(t, err)
	defer st.Close()

	curl := func(addr string) *client.ExecResult {
		t.Helper()
		res, err := ws.Exec(ctx, "curl -sS --max-time 5 http://"+addr+"/", client.ExecOptions{})
		require.NoError(t, err)
		return res
	}
	res := curl(web)
	if res.ExitCode != 0 || !strings.Contains(string(res.Stdout), "hello") {
		t.Fatalf("curl the allowed address: exit %d %q %q", res.ExitCode, res.Stdout, res.Stderr)
	}
	if n := res.Receipt.Network; n == nil || n.Mode != wire.NetworkEgress || n.ConnectionsAllowed != 1 || n.BytesIn == 0 || n.BytesOut == 0 {
		t.Errorf("receipt network %+v: want one connection allowed and its bytes", n)
	}
	res = curl(other)
	if res.ExitCode == 0 {
		t.Errorf("curl the neighbour: exit 0 %q, want refused", res.Stdout)
	}
	var seen []string
	for !slices.Contains(seen, "denied tcp "+other) {
		ev, err := st.Next()
		require.NoError(t, err, "events seen: %v", seen)
		if ev.Kind == wire.EventNet {
			seen = append(seen, ev.Net.Verdict+" "+ev.Net.Proto+" "+ev.Net.Address)
		}
	}
	require.Contains(t, seen, "allowed tcp "+web)

	_, err = ws.SetNetwork(ctx, wire.NetworkChange{Mode: wire.NetworkEgress, Egress: []wire.NetworkRule{{CIDR: "0.0.0.0/0"}}})
	require.True(t, client.IsInvalid(err), "a rule that covers everything: %v", err)
	_, err = ws.SetNetwork(ctx, wire.NetworkChange{Mode: "bridge"})
	require.True(t, client.IsInvalid(err), "an unknown mode: %v", err)
	require.Equal(t, 0, curl(web).ExitCode, "the network after refused changes")

	info, err := ws.SetNetwork(ctx, wire.NetworkChange{Mode: wire.NetworkHost})
	require.NoError(t, err)
	require.Equal(t, wire.NetworkHost, info.Network)
	res = curl(other)
	if res.ExitCode != 0 || res.Receipt.Network == nil || res.Receipt.Network.Mode != wire.NetworkHost {
		t.Errorf("host network: exit %d %q, receipt network %+v", res.ExitCode, res.Stderr, res.Receipt.Network)
	}
	ds, err := c.Daemon(ctx)
	require.NoError(t, err)
	require.Contains(t, ds.HostNetwork, ws.ID(), "daemon status names the workspace on the host's network")

	_, err = ws.SetNetwork(ctx, wire.NetworkChange{Mode: wire.NetworkNone})
	require.NoError(t, err)
	if res := curl(web); res.ExitCode == 0 || res.Receipt.Network.Mode != wire.NetworkNone {
		t.Errorf("none: exit %d, receipt network %+v", res.ExitCode, res.Receipt.Network)
	}
}
