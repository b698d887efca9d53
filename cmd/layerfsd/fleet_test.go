package main

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"layerfs.dev/layerfs/client"
	"layerfs.dev/layerfs/internal/store"
	"layerfs.dev/layerfs/internal/testenv"
	"layerfs.dev/layerfs/wire"
)

// fleetHost is one host of a test fleet: its daemon on its own directory
// of the shared Store, listening on TCP at addr, and a client of it there.
type fleetHost struct {
	d    *daemon
	addr string // tcp://IP:PORT, as advertised
	c    *client.Client
}

const fleetToken = "fleet-token"

// startFleetHost starts a daemon on a new host directory of the shared
// Store at url, under wrap (nil, or a command that enters the host's
// network namespace), listening on and advertising ip:port.
func startFleetHost(t *testing.T, url string, wrap []string, ip string, port int) *fleetHost {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "store")
	db, err := store.Init(t.Context(), dir, store.Options{URL: url})
	require.NoError(t, err)
	require.NoError(t, db.Close())
	tok := filepath.Join(t.TempDir(), "token")
	require.NoError(t, os.WriteFile(tok, []byte(fleetToken+"\n"), 0o600))
	hostPort := net.JoinHostPort(ip, fmt.Sprint(port))
	h := &fleetHost{addr: "tcp://" + hostPort}
	h.d = startDaemonUnder(t, append(wrap, daemonBinary(t)), dir,
		"--tcp", hostPort, "--token-file", tok, "--advertise", h.addr)
	h.c, err = client.Dial(t.Context(), h.addr, client.WithToken(fleetToken))
	require.NoError(t, err, "dial %s", h.addr)
	t.Cleanup(func() { h.c.Close() })
	return h
}

// freePort is a TCP port nothing listens on at ip now.
func freePort(t *testing.T, ip string) int {
	l, err := net.Listen("tcp", net.JoinHostPort(ip, "0"))
	require.NoError(t, err)
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// TestFleetLoopback: the fleet's behaviour (testFleet) with two daemons as
// hosts on this host's loopback; TestFleetNetns runs it with hosts in
// network namespaces of their own.
func TestFleetLoopback(t *testing.T) {
	url := testenv.StoreURL(t)
	a := startFleetHost(t, url, nil, "127.0.0.1", freePort(t, "127.0.0.1"))
	b := startFleetHost(t, url, nil, "127.0.0.1", freePort(t, "127.0.0.1"))
	testFleet(t, a, b)
}

// testFleet checks what hosts of a fleet owe each other: a commit or a
// fork on one is visible on the others at once; two hosts committing to
// one branch: exactly one wins and the other gets head-moved and loses
// nothing; a client of one host that asks for a workspace of another is
// told where it is and follows.
func testFleet(t *testing.T, hosts ...*fleetHost) {
	ctx := t.Context()
	a, b := hosts[0], hosts[1]
	nodes := map[string]string{} // node -> address
	for _, h := range hosts {
		st, err := h.c.Daemon(ctx)
		require.NoError(t, err)
		require.NotEmpty(t, st.Node, "%s names no node", h.addr)
		assert.Equal(t, h.addr, st.Advertise)
		nodes[st.Node] = h.addr
	}
	require.Len(t, nodes, len(hosts), "hosts share node names")
	nodeOf := func(h *fleetHost) string {
		st, _ := h.c.Daemon(ctx)
		return st.Node
	}

	// A commit on a is b's at once.
	_, err := a.c.CreateProject(ctx, wire.CreateProject{Name: "demo"})
	require.NoError(t, err)
	wsA, err := a.c.CreateWorkspace(ctx, client.WorkspaceSpec{Project: "demo", Branch: "main"})
	require.NoError(t, err)
	assert.Equal(t, nodeOf(a), wsA.Info().Node)
	sh(t, wsA, "echo from-a > a.txt")
	cr, err := wsA.Commit(ctx, "a's file")
	require.NoError(t, err)
	require.Equal(t, wire.Created, cr.Result)
	for _, h := range hosts[1:] {
		br, err := h.c.Branch(ctx, "demo", "main")
		require.NoError(t, err)
		assert.Equal(t, cr.Commit, br.Head, "%s sees a's commit", h.addr)
	}
	wsB, err := b.c.CreateWorkspace(ctx, client.WorkspaceSpec{Project: "demo", Branch: "main"})
	require.NoError(t, err)
	assert.Equal(t, "from-a\n", sh(t, wsB, "cat a.txt"), "b's workspace on a's commit")

	// A fork on b is every host's at once.
	_, err = b.c.ForkBranch(ctx, "demo", "race", "main")
	require.NoError(t, err)
	for _, h := range hosts {
		br, err := h.c.Branch(ctx, "demo", "race")
		require.NoError(t, err, "%s sees b's fork", h.addr)
		assert.Equal(t, cr.Commit, br.Head)
	}

	// Two hosts commit to one branch at once: one created, one head-moved
	// whose commit is stored and whose workspace keeps its change.
	racers := make([]*client.Workspace, 2)
	for i, h := range []*fleetHost{a, b} {
		racers[i], err = h.c.CreateWorkspace(ctx, client.WorkspaceSpec{Project: "demo", Branch: "race"})
		require.NoError(t, err)
		sh(t, racers[i], fmt.Sprintf("echo %d > racer-%d.txt", i, i))
	}
	results := make([]wire.CommitResult, 2)
	errs := make([]error, 2)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i, ws := range racers {
		wg.Go(func() {
			<-start
			results[i], errs[i] = ws.Commit(ctx, fmt.Sprintf("racer %d", i))
		})
	}
	close(start)
	wg.Wait()
	require.NoError(t, errs[0])
	require.NoError(t, errs[1])
	winner := -1
	for i, r := range results {
		if r.Result == wire.Created {
			winner = i
		}
	}
	require.GreaterOrEqual(t, winner, 0, "no commit created: %+v", results)
	loser := results[1-winner]
	require.Equal(t, wire.HeadMoved, loser.Result, "results %+v", results)
	assert.Equal(t, results[winner].Commit, loser.Head, "the loser is told the winner's head")
	for _, h := range hosts {
		br, err := h.c.Branch(ctx, "demo", "race")
		require.NoError(t, err)
		assert.Equal(t, results[winner].Commit, br.Head, "%s: race's head", h.addr)
		_, err = h.c.Commit(ctx, "demo", loser.Commit)
		assert.NoError(t, err, "%s: the loser's commit is stored", h.addr)
	}
	st, err := racers[1-winner].Status(ctx)
	require.NoError(t, err)
	assert.NotEmpty(t, st.Changes, "the loser's workspace keeps its change")

	// b's client asks b for a's workspace: b names a, the SDK follows.
	all, err := b.c.FleetWorkspaces(ctx)
	require.NoError(t, err)
	where := map[string]string{}
	for _, w := range all {
		where[w.ID] = w.NodeAddress
	}
	assert.Equal(t, a.addr, where[wsA.ID()], "b lists a's workspace with a's address")
	assert.Equal(t, b.addr, where[wsB.ID()], "b lists its own with its address")
	own, err := b.c.Workspaces(ctx)
	require.NoError(t, err)
	for _, w := range own {
		assert.Equal(t, nodeOf(b), w.Node, "b's own list holds only b's")
	}
	viaB := b.c.Attach(wsA.ID())
	assert.Equal(t, "from-a\n", sh(t, viaB, "cat a.txt"), "a's workspace through b's client")
	assert.Equal(t, a.addr, viaB.Address(), "the handle follows to a")
	require.NoError(t, viaB.WriteFile(ctx, "via-b.txt", []byte("written through b\n"), 0o644))
	got, err := wsA.ReadFile(ctx, "via-b.txt")
	require.NoError(t, err)
	assert.Equal(t, "written through b\n", string(got))
}

// sh runs body in ws and returns its stdout, failing on a non-zero exit.
func sh(t *testing.T, ws *client.Workspace, body string) string {
	t.Helper()
	res, err := ws.Exec(t.Context(), body, client.ExecOptions{Timeout: 2 * time.Minute})
	require.NoError(t, err, "exec %q", body)
	require.Equal(t, 0, res.ExitCode, "exec %q: %s", body, res.Stderr)
	return string(res.Stdout)
}
