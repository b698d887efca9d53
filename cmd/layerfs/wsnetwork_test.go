package main

import (
	"path/filepath"
	"strings"
	"testing"

	"layerfs.dev/layerfs/wire"
)

// TestCLINetwork: ws create --network egress --allow, ws network to change
// it (a bad rule refused, the network kept), status showing the rules and
// daemon status naming a workspace on the host's network.
func TestCLINetwork(t *testing.T) {
	c := newCLI(t)
	src := t.TempDir()
	writeFile(t, filepath.Join(src, "f"), "f")
	c.ok("project", "create", "p", "--from", src)
	var ws wire.Workspace
	c.json(&ws, "ws", "create", "p", "main", "--network", "egress", "--allow", "pypi.org:443", "--allow", "203.0.113.0/24:8000-8100,9000")
	want := []wire.NetworkRule{{Domain: "pypi.org", Ports: []string{"443"}}, {CIDR: "203.0.113.0/24", Ports: []string{"8000-8100", "9000"}}}
	if ws.Network != wire.NetworkEgress || len(ws.Egress) != 2 || ws.Egress[1].CIDR != want[1].CIDR || ws.Egress[1].Ports[1] != "9000" {
		t.Fatalf("ws create: network %q rules %+v, want egress %+v", ws.Network, ws.Egress, want)
	}
	if out := c.ok("ws", "status", ws.ID); !strings.Contains(out, "allow\tpypi.org:443") && !strings.Contains(out, "pypi.org:443") {
		t.Errorf("ws status shows no rule:\n%s", out)
	}
	c.fail(2, "covers too much", "ws", "network", ws.ID, "egress", "--allow", "0.0.0.0/0")
	c.fail(2, `network "bridge"`, "ws", "network", ws.ID, "bridge")
	c.fail(2, "port", "ws", "network", ws.ID, "egress", "--allow", "pypi.org:70000")
	var got wire.Workspace
	c.json(&got, "ws", "status", ws.ID)
	if got.Network != wire.NetworkEgress || len(got.Egress) != 2 {
		t.Errorf("after refused changes: %q %+v", got.Network, got.Egress)
	}
	got = wire.Workspace{}
	c.json(&got, "ws", "network", ws.ID, "host")
	if got.Network != wire.NetworkHost || len(got.Egress) != 0 {
		t.Errorf("ws network host: %q %+v", got.Network, got.Egress)
	}
	if out := c.ok("daemon", "status"); !strings.Contains(out, ws.ID) {
		t.Errorf("daemon status does not name the workspace on the host's network:\n%s", out)
	}
	c.ok("ws", "network", ws.ID, "none")
	c.ok("ws", "end", ws.ID, "--discard")
}
