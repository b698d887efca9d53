package main

import (
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"layerfs.dev/layerfs/client"
	"layerfs.dev/layerfs/internal/proctest"
	"layerfs.dev/layerfs/internal/testenv"
	"layerfs.dev/layerfs/wire"
)

// TestServicesDieWithTheirDaemon: a daemon killed with SIGKILL takes its
// services with it (their sandbox's init dies with it, and its PID
// namespace); no process of theirs is left on the host, and the daemon
// the supervisor starts again lists them as ended with reason
// daemon_restart, runs none of them, and starts new ones.
func TestServicesDieWithTheirDaemon(t *testing.T) {
	testenv.RequireRoot(t)
	s := startSupervisedDaemon(t)
	ctx := t.Context()
	c, err := s.waitUp(ctx, time.Minute)
	require.NoError(t, err)
	_, err = c.CreateProject(ctx, wire.CreateProject{Name: "p"})
	require.NoError(t, err)
	ws, err := c.CreateWorkspace(ctx, client.WorkspaceSpec{Project: "p", Branch: "main"})
	require.NoError(t, err)
	marker := "svccrash" + proctest.Marker()
	// The service writes into the workspace as long as it lives.
	for _, name := range []string{"a", "b"} {
		_, err := ws.StartServiceShell(ctx, ": "+marker+"; while :; do date +%s%N > "+name+".beat; sleep 0.05; done", client.ServiceOptions{Name: name, Restart: wire.RestartOnFailure})
		require.NoError(t, err)
	}
	left := func() []string {
		l, _ := proctest.WithCmdline(marker)
		return slices.DeleteFunc(l, func(p string) bool { return strings.Contains(p, "-test.") })
	}
	require.NotEmpty(t, left(), "the services run")
	st, err := c.Daemon(ctx)
	require.NoError(t, err)
	c.Close()
	require.NoError(t, syscall.Kill(st.PID, syscall.SIGKILL))

	c, err = s.waitUp(ctx, time.Minute)
	require.NoError(t, err)
	defer c.Close()
	require.Eventually(t, func() bool { return len(left()) == 0 }, 30*time.Second, 20*time.Millisecond,
		"processes of the dead daemon's services: %v", left())
	ws, err = c.Workspace(ctx, ws.ID())
	require.NoError(t, err)
	list, err := ws.Services(ctx)
	require.NoError(t, err)
	require.Len(t, list, 2)
	for _, sv := range list {
		assert.Equal(t, wire.ServiceEnded, sv.State, "%+v", sv)
		assert.Equal(t, wire.ServiceDaemonRestart, sv.Reason, "%+v", sv)
	}
	// Nothing writes into the workspace any more.
	before, err := ws.ReadFile(ctx, "a.beat")
	require.NoError(t, err)
	time.Sleep(300 * time.Millisecond)
	after, err := ws.ReadFile(ctx, "a.beat")
	require.NoError(t, err)
	assert.Equal(t, string(before), string(after), "a service of the dead daemon still writes")
	// The recovered workspace runs services again, under the same name.
	sv, err := ws.StartServiceShell(ctx, "exec sleep 1000", client.ServiceOptions{Name: "a"})
	require.NoError(t, err)
	assert.Equal(t, wire.ServiceRunning, sv.State)
	require.NoError(t, ws.End(ctx, client.EndOptions{Discard: true}))
}
