package engine_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"layerfs.dev/layerfs/internal/criu"
	"layerfs.dev/layerfs/internal/platforms/local"
	"layerfs.dev/layerfs/internal/testenv"
	"layerfs.dev/layerfs/wire"
)

// counter is an HTTP server on 127.0.0.1:8000 whose answers count the
// requests it served: state in memory a restore must give back.
const counter = `exec python3 -c '
import http.server
n = 0
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        global n
        n += 1
        b = str(n).encode()
        self.send_response(200); self.send_header("Content-Length", str(len(b))); self.end_headers(); self.wfile.write(b)
    def log_message(self, *a): pass
http.server.HTTPServer(("127.0.0.1", 8000), H).serve_forever()'`

const askCounter = `for i in $(seq 200); do python3 -c 'import urllib.request; print(urllib.request.urlopen("http://127.0.0.1:8000/").read().decode())' 2>/dev/null && exit; sleep 0.02; done; echo no answer`

// checkpointPlatform is a local platform whose sandboxes run from a
// statically linked init, where criu runs.
func checkpointPlatform(t *testing.T) *local.Platform {
	t.Helper()
	testenv.RequireRoot(t)
	if _, err := criu.Binary(); err != nil {
		testenv.Skip(t, err.Error())
	}
	return local.New(local.Options{Exe: testenv.StaticInit(t)})
}

// TestCheckpointWorkspace: a workspace with a running service and an
// uncommitted file is checkpointed left running (its files committed at
// the frozen instant); two workspaces opened at the checkpoint's files
// each get the service back, answering from the checkpoint's state, with
// the file; a pause (checkpoint and stop) ends the services as stopped,
// and a resume into the same workspace brings them back.
func TestCheckpointWorkspace(t *testing.T) {
	p := checkpointPlatform(t)
	e, db := newEngineWith(t, "", p)
	ctx := t.Context()
	_, err := e.CreateProject(ctx, wire.CreateProject{Name: "p"})
	require.NoError(t, err)
	ws, err := e.CreateWorkspace(ctx, wire.WorkspaceSpec{Project: "p", Branch: "main"})
	require.NoError(t, err)
	run(t, e, ws.ID, "echo state > notes")
	_, err = e.StartService(ctx, ws.ID, wire.ServiceRequest{Name: "web", Body: counter})
	require.NoError(t, err)
	out, _ := run(t, e, ws.ID, askCounter)
	require.Equal(t, "1\n", out)

	ck, err := e.CheckpointWorkspace(ctx, ws.ID, "warm", false)
	require.NoError(t, err)
	t.Logf("checkpoint %s: frozen %v, took %v, %d bytes, services %v", ck.ID, ck.Frozen, ck.Took, ck.Bytes, ck.Services)
	assert.Equal(t, []string{"web"}, ck.Services)
	rec, err := db.Checkpoint(ctx, ck.ID)
	require.NoError(t, err)
	assert.Equal(t, ws.ID, rec.Workspace)
	out, _ = run(t, e, ws.ID, askCounter)
	require.Equal(t, "2\n", out, "the source runs on")

	for i := range 2 { // ws create --at CHECKPOINT
		t0 := time.Now()
		fork, svcs, err := e.OpenCheckpoint(ctx, ck.ID, wire.WorkspaceSpec{})
		require.NoError(t, err)
		t.Logf("open %d: %v", i, time.Since(t0))
		require.Len(t, svcs, 1)
		assert.Equal(t, "web", svcs[0].Name)
		out, _ = run(t, e, fork.ID, askCounter)
		assert.Equal(t, "2\n", out, "fork %d: the checkpoint's state", i)
		out, _ = run(t, e, fork.ID, "cat notes")
		assert.Equal(t, "state\n", out, "fork %d: the checkpoint's files", i)
		require.NoError(t, e.EndWorkspace(ctx, fork.ID, true))
	}

	// Fork with processes: a checkpoint of the source now (its count is 2).
	t0 := time.Now()
	_, forks, err := e.ForkWithProcesses(ctx, ws.ID, 2)
	require.NoError(t, err)
	t.Logf("fork 2 with processes: %v", time.Since(t0))
	require.Len(t, forks, 2)
	for _, f := range forks {
		out, _ = run(t, e, f.ID, askCounter)
		assert.Equal(t, "3\n", out)
		require.NoError(t, e.EndWorkspace(ctx, f.ID, true))
	}
	out, _ = run(t, e, ws.ID, askCounter)
	require.Equal(t, "3\n", out)

	// Pause: checkpoint and stop; resume into the same workspace.
	pause, err := e.CheckpointWorkspace(ctx, ws.ID, "pause", true)
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		list, err := e.Services(ctx, ws.ID)
		return err == nil && len(list) == 1 && list[0].State == wire.ServiceEnded
	}, 10*time.Second, 20*time.Millisecond)
	list, _ := e.Services(ctx, ws.ID)
	assert.Equal(t, wire.ServiceStopped, list[0].Reason, "a pause stops, it does not fail")
	out, _ = run(t, e, ws.ID, "pgrep -c python3 || true")
	assert.Equal(t, "0\n", out)
	_, _, err = e.RestoreCheckpoint(ctx, ws.ID, pause.ID)
	require.NoError(t, err)
	out, _ = run(t, e, ws.ID, askCounter)
	assert.Equal(t, "4\n", out, "resumed from the pause")
	require.NoError(t, e.EndWorkspace(ctx, ws.ID, true))
}
