package engine_test

import (
	"bytes"
	"context"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"layerfs.dev/layerfs/internal/engine"
	"layerfs.dev/layerfs/internal/platforms"
	"layerfs.dev/layerfs/internal/platforms/local"
	"layerfs.dev/layerfs/wire"
	"layerfs.dev/layerfs/wire/errclass"
)

const httpServer = `python3 -c '
import http.server, socketserver
socketserver.TCPServer.allow_reuse_address = True
http.server.HTTPServer(("127.0.0.1", 8000), http.server.SimpleHTTPRequestHandler).serve_forever()'`

const probe8000 = `for i in $(seq 200); do python3 -c 'import urllib.request; print(urllib.request.urlopen("http://127.0.0.1:8000/hello").read().decode())' 2>/dev/null && break; sleep 0.05; done`

// TestServices: a service keeps running beside the workspace's execs,
// which reach it; names, logs, stop, wait, restart on-failure, a live
// commit and a fork while it runs; ending the workspace stops it and
// leaves nothing.
func TestServices(t *testing.T) {
	p := local.New(local.Options{})
	e, _ := newEngineWith(t, "", p)
	ctx := t.Context()
	_, err := e.CreateProject(ctx, wire.CreateProject{Name: "p"})
	require.NoError(t, err)
	ws, err := e.CreateWorkspace(ctx, wire.WorkspaceSpec{Project: "p", Branch: "main"})
	require.NoError(t, err)
	run(t, e, ws.ID, "echo hi > hello")

	web, err := e.StartService(ctx, ws.ID, wire.ServiceRequest{Name: "web", Body: "echo serving; exec " + httpServer})
	require.NoError(t, err)
	assert.Equal(t, wire.ServiceRunning, web.State)
	assert.Greater(t, web.Pid, 1)
	out, _ := run(t, e, ws.ID, probe8000)
	assert.Equal(t, "hi\n\n", out)

	t.Run("bad input", func(t *testing.T) {
		for _, c := range []struct {
			req   wire.ServiceRequest
			class *errclass.Class
		}{
			{wire.ServiceRequest{Name: "web", Body: "sleep 1"}, errclass.Exists},
			{wire.ServiceRequest{Name: "Bad Name", Body: "sleep 1"}, errclass.Invalid},
			{wire.ServiceRequest{Name: "x"}, errclass.Invalid},
			{wire.ServiceRequest{Name: "x", Body: "sleep 1", Restart: "always"}, errclass.Invalid},
			{wire.ServiceRequest{Name: "x", Body: "sleep 1", Dir: "../out"}, errclass.Invalid},
			{wire.ServiceRequest{Name: "x", Argv: []string{"no-such-command"}}, errclass.Invalid},
		} {
			_, err := e.StartService(ctx, ws.ID, c.req)
			assert.ErrorIs(t, err, c.class, "%+v: %v", c.req, err)
		}
		_, err := e.StartService(ctx, "ws-nope", wire.ServiceRequest{Body: "true"})
		assert.ErrorIs(t, err, errclass.NotFound)
		_, err = e.StopService(ctx, ws.ID, "nope", 0)
		assert.ErrorIs(t, err, errclass.NotFound)
		_, err = e.WaitService(ctx, ws.ID, "nope")
		assert.ErrorIs(t, err, errclass.NotFound)
		list, err := e.Services(ctx, ws.ID)
		require.NoError(t, err)
		assert.Len(t, list, 1, "a failed start leaves no service")
	})

	t.Run("logs", func(t *testing.T) {
		var b bytes.Buffer
		require.NoError(t, e.ServiceLogs(ctx, ws.ID, "web", false, &b, nil))
		assert.Contains(t, b.String(), "serving\n")
		assert.Contains(t, b.String(), "GET /hello")
	})

	t.Run("live commit and fork", func(t *testing.T) {
		run(t, e, ws.ID, "echo more > more")
		cr, err := e.CommitWorkspace(ctx, ws.ID, wire.CommitRequest{Message: "while serving"})
		require.NoError(t, err)
		assert.Equal(t, wire.Created, cr.Result)
		fr, err := e.ForkWorkspace(ctx, ws.ID, wire.ForkRequest{})
		require.NoError(t, err)
		require.Len(t, fr.Workspaces, 1)
		fork := fr.Workspaces[0].ID
		list, err := e.Services(ctx, fork)
		require.NoError(t, err)
		assert.Empty(t, list, "a fork copies files, not processes")
		out, _ := run(t, e, fork, "cat more; pgrep -c python3 || true")
		assert.Equal(t, "more\n0\n", out)
		require.NoError(t, e.EndWorkspace(ctx, fork, true))
	})

	t.Run("restart on-failure", func(t *testing.T) {
		_, err := e.StartService(ctx, ws.ID, wire.ServiceRequest{Name: "flaky", Restart: wire.RestartOnFailure,
			Body: "n=$(cat /tmp/n 2>/dev/null || echo 0); echo $((n+1)) > /tmp/n; echo run $n; [ $n -ge 2 ] && exit 0; exit 3"})
		require.NoError(t, err)
		wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		sv, err := e.WaitService(wctx, ws.ID, "flaky")
		require.NoError(t, err)
		assert.Equal(t, wire.ServiceEnded, sv.State)
		assert.Equal(t, 2, sv.Restarts)
		require.NotNil(t, sv.ExitCode)
		assert.Equal(t, 0, *sv.ExitCode)
		assert.Equal(t, wire.ServiceExited, sv.Reason)
		var b bytes.Buffer
		require.NoError(t, e.ServiceLogs(ctx, ws.ID, "flaky", true, &b, nil)) // ended: follow returns
		assert.Equal(t, "run 0\nrun 1\nrun 2\n", b.String())
	})

	t.Run("stop while restarting", func(t *testing.T) {
		_, err := e.StartService(ctx, ws.ID, wire.ServiceRequest{Name: "crashy", Restart: wire.RestartOnFailure, Body: "exit 1"})
		require.NoError(t, err)
		require.Eventually(t, func() bool {
			list, _ := e.Services(ctx, ws.ID)
			for _, sv := range list {
				if sv.Name == "crashy" && sv.Restarts >= 1 {
					return true
				}
			}
			return false
		}, 20*time.Second, 20*time.Millisecond)
		sv, err := e.StopService(ctx, ws.ID, "crashy", time.Second)
		require.NoError(t, err)
		assert.Equal(t, wire.ServiceEnded, sv.State)
		assert.Equal(t, wire.ServiceStopped, sv.Reason)
	})

	t.Run("stop", func(t *testing.T) {
		_, err := e.StartService(ctx, ws.ID, wire.ServiceRequest{Name: "stubborn", Body: "trap '' TERM; echo ready; while :; do sleep 0.1; done"})
		require.NoError(t, err)
		require.Eventually(t, func() bool {
			var b bytes.Buffer
			_ = e.ServiceLogs(ctx, ws.ID, "stubborn", false, &b, nil)
			return b.String() == "ready\n"
		}, 10*time.Second, 10*time.Millisecond)
		sv, err := e.StopService(ctx, ws.ID, "stubborn", 300*time.Millisecond)
		require.NoError(t, err)
		assert.Equal(t, wire.ServiceEnded, sv.State)
		assert.Equal(t, wire.ServiceStopped, sv.Reason)
		assert.Equal(t, "SIGKILL", sv.Signal)
		// Its name is free again.
		_, err = e.StartService(ctx, ws.ID, wire.ServiceRequest{Name: "stubborn", Body: "exec sleep 1000"})
		require.NoError(t, err)
	})

	t.Run("events", func(t *testing.T) {
		wctx, cancel := context.WithCancel(ctx)
		defer cancel()
		got := make(chan wire.FileEvent, 100)
		go e.WatchWorkspace(wctx, ws.ID, "", func(evs []wire.FileEvent) error {
			for _, ev := range evs {
				got <- ev
			}
			return nil
		})
		require.Equal(t, wire.EventReady, (<-got).Kind)
		_, err := e.StartService(ctx, ws.ID, wire.ServiceRequest{Name: "evt", Body: "exit 2"})
		require.NoError(t, err)
		var states []string
		for len(states) < 2 {
			select {
			case ev := <-got:
				if ev.Kind == wire.EventService && ev.Service.Name == "evt" {
					states = append(states, ev.Service.State+" "+ev.Service.Reason)
				}
			case <-time.After(10 * time.Second):
				t.Fatalf("service events: %q", states)
			}
		}
		assert.Equal(t, []string{"running ", "ended exited"}, states)
	})

	// Ending the workspace stops every service, then unmounts: nothing
	// is left on the host.
	require.NoError(t, e.EndWorkspace(ctx, ws.ID, true))
	if b, err := exec.Command("pgrep", "-f", "SimpleHTTPRequestHandler").Output(); err == nil {
		t.Errorf("a service outlived its workspace: %s", b)
	}
	leaks, err := p.Leaks(ctx)
	require.NoError(t, err)
	assert.Empty(t, leaks)
}

// TestServicesUnavailable: a platform whose sandboxes keep no process
// running refuses a service with a clear unavailable error.
func TestServicesUnavailable(t *testing.T) {
	e, _ := newEngineWith(t, "", &lessIsolated{Platform: local.New(local.Options{})})
	ctx := t.Context()
	_, err := e.CreateProject(ctx, wire.CreateProject{Name: "p"})
	require.NoError(t, err)
	ws, err := e.CreateWorkspace(ctx, wire.WorkspaceSpec{Project: "p", Branch: "main"})
	require.NoError(t, err)
	_, err = e.StartService(ctx, ws.ID, wire.ServiceRequest{Body: "sleep 1"})
	require.ErrorIs(t, err, platforms.ErrNoServices)
	require.ErrorIs(t, err, errclass.Unavailable)
	assert.True(t, strings.Contains(err.Error(), "keeps no process running"), "%v", err)
	var _ *engine.Engine = e
}
