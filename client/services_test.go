package client_test

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"layerfs.dev/layerfs/client"
	"layerfs.dev/layerfs/wire"
)

// TestServices: start, list, follow the logs of, reach, stop and wait for
// a service through the SDK, and its errors.
func TestServices(t *testing.T) {
	ctx := t.Context()
	c := dial(t)
	p := project(t, c)
	ws, err := c.CreateWorkspace(ctx, client.WorkspaceSpec{Project: p, Branch: "main"})
	require.NoError(t, err)
	defer ws.End(context.Background(), client.EndOptions{Discard: true})

	sv, err := ws.StartServiceShell(ctx, `echo listening; exec python3 -c '
import socket
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1); s.bind(("127.0.0.1", 7000)); s.listen()
while True:
    c, _ = s.accept(); c.sendall(b"pong\n"); c.close()'`, client.ServiceOptions{Name: "pong"})
	require.NoError(t, err)
	assert.Equal(t, "pong", sv.Name)
	res, err := ws.Exec(ctx, `for i in $(seq 100); do python3 -c 'import socket; s=socket.create_connection(("127.0.0.1",7000)); print(s.recv(9).decode(), end="")' 2>/dev/null && break; sleep 0.05; done`, client.ExecOptions{})
	require.NoError(t, err)
	assert.Equal(t, "pong\n", string(res.Stdout))

	_, err = ws.StartService(ctx, []string{"sleep", "1"}, client.ServiceOptions{Name: "pong"})
	assert.True(t, client.IsExists(err), "%v", err)
	_, err = ws.StartService(ctx, []string{"no-such-command"}, client.ServiceOptions{})
	assert.True(t, client.IsInvalid(err), "%v", err)
	assert.Contains(t, err.Error(), "no-such-command")

	list, err := ws.Services(ctx)
	require.NoError(t, err)
	require.Len(t, list, 1)
	assert.Equal(t, wire.ServiceRunning, list[0].State)

	// A follower gets the log and returns when the service is stopped.
	var logs bytes.Buffer
	followed := make(chan error, 1)
	go func() { followed <- ws.ServiceLogs(ctx, "pong", true, &logs) }()
	stopped, err := ws.StopService(ctx, "pong", time.Second)
	require.NoError(t, err)
	assert.Equal(t, wire.ServiceStopped, stopped.Reason)
	select {
	case err := <-followed:
		require.NoError(t, err)
	case <-time.After(10 * time.Second):
		t.Fatal("the follower did not return when the service ended")
	}
	assert.True(t, strings.HasPrefix(logs.String(), "listening\n"), "%q", logs.String())
	waited, err := ws.WaitService(ctx, "pong")
	require.NoError(t, err)
	assert.Equal(t, wire.ServiceEnded, waited.State)
	_, err = ws.WaitService(ctx, "nope")
	assert.True(t, client.IsNotFound(err), "%v", err)
}
