package mcpserver_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"layerfs.dev/layerfs/internal/daemontest"
)

// TestServiceTools: start a service, reach it from exec, read its log,
// stop it, wait for another, and the tools' errors, through the real MCP
// client against a real layerfsd.
func TestServiceTools(t *testing.T) {
	d := daemontest.Start(t)
	s := session{t, connect(t, newServer(t, d))}
	var proj struct{ Name string }
	s.ok(&proj, "project_create", map[string]any{"name": "svc"})
	var ws struct{ ID string }
	s.ok(&ws, "workspace_create", map[string]any{"project": "svc"})

	type service struct {
		Name, State, Reason string
		Pid                 int
		ExitCode            *int `json:"exit_code"`
	}
	var sv service
	s.ok(&sv, "service_start", map[string]any{"workspace": ws.ID, "name": "web", "command": "echo hello; exec sleep 1000"})
	assert.Equal(t, "running", sv.State)
	assert.Greater(t, sv.Pid, 1)
	var ex struct {
		ExitCode int `json:"exit_code"`
		Stdout   string
	}
	s.ok(&ex, "exec", map[string]any{"workspace": ws.ID, "argv": []string{"pgrep", "-cf", "sleep 1000"}})
	assert.Equal(t, "1\n", ex.Stdout)
	var list struct{ Services []service }
	s.ok(&list, "service_list", map[string]any{"workspace": ws.ID})
	require.Len(t, list.Services, 1)
	var logs struct{ Output string }
	for i := 0; logs.Output != "hello\n"; i++ {
		require.Less(t, i, 200, "the service's log: %q", logs.Output)
		s.ok(&logs, "service_logs", map[string]any{"workspace": ws.ID, "name": "web"})
		time.Sleep(10 * time.Millisecond)
	}

	s.refused("already", "service_start", map[string]any{"workspace": ws.ID, "name": "web", "command": "true"})
	s.refused("no-such-command", "service_start", map[string]any{"workspace": ws.ID, "argv": []string{"no-such-command"}})
	s.refused("exactly one of command and argv", "service_start", map[string]any{"workspace": ws.ID})
	s.refused("not_found", "service_logs", map[string]any{"workspace": ws.ID, "name": "nope"})
	s.refused("max_bytes", "service_logs", map[string]any{"workspace": ws.ID, "name": "web", "max_bytes": -1})
	s.refused("grace_seconds", "service_stop", map[string]any{"workspace": ws.ID, "name": "web", "grace_seconds": -1})

	var w struct {
		WatchID string `json:"watch_id"`
		Events  []struct {
			Kind    string
			Service *service
		}
	}
	s.ok(&w, "watch", map[string]any{"workspace": ws.ID})
	s.ok(&sv, "service_stop", map[string]any{"workspace": ws.ID, "name": "web", "grace_seconds": 1})
	assert.Equal(t, "stopped", sv.Reason)
	s.ok(&w, "watch", map[string]any{"watch_id": w.WatchID, "timeout_seconds": 30})
	require.NotEmpty(t, w.Events)
	ev := w.Events[len(w.Events)-1]
	require.Equal(t, "service", ev.Kind, "%+v", w.Events)
	require.NotNil(t, ev.Service)
	assert.Equal(t, "web ended stopped", ev.Service.Name+" "+ev.Service.State+" "+ev.Service.Reason)
	s.ok(&sv, "service_start", map[string]any{"workspace": ws.ID, "name": "job", "command": "exit 5"})
	s.ok(&sv, "service_wait", map[string]any{"workspace": ws.ID, "name": "job", "timeout_seconds": 30})
	assert.Equal(t, "ended", sv.State)
	require.NotNil(t, sv.ExitCode)
	assert.Equal(t, 5, *sv.ExitCode)
}
