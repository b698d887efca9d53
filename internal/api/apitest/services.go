package apitest

import (
	"bytes"
	"context"
	"io"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"layerfs.dev/layerfs/wire"
	"layerfs.dev/layerfs/wire/errclass"
)

// serviceChecks are those of Services.
var serviceChecks = []check{
	{"Services", checkServices},
}

// checkServices: a service runs beside the workspace's execs, its name is
// its own while it runs, a command that cannot start is invalid and
// leaves nothing, stop answers once it has ended, and the log and the
// list say what happened.
func checkServices(f *fixture) {
	ws := f.workspace(f.project(), "main")
	ctx := f.ctx
	sv, err := f.eng.StartService(ctx, ws.ID, wire.ServiceRequest{Name: "svc", Body: "echo hello; exec sleep 1000"})
	require.NoError(f.t, err)
	assert.Equal(f.t, wire.ServiceRunning, sv.State)
	_, err = f.eng.StartService(ctx, ws.ID, wire.ServiceRequest{Name: "svc", Body: "true"})
	f.isClass(err, errclass.Exists, "a second service of the name")
	_, err = f.eng.StartService(ctx, ws.ID, wire.ServiceRequest{Name: "bad", Argv: []string{"no-such-command"}})
	f.isClass(err, errclass.Invalid, "a command that cannot start")
	var out bytes.Buffer
	_, err = f.eng.Exec(ctx, ws.ID, wire.ExecRequest{Argv: []string{"pgrep", "-cf", "sleep 1000"}}, &out, io.Discard)
	require.NoError(f.t, err)
	assert.Equal(f.t, "1\n", out.String(), "an exec sees the service")
	require.Eventually(f.t, func() bool {
		var b bytes.Buffer
		return f.eng.ServiceLogs(ctx, ws.ID, "svc", false, &b, nil) == nil && b.String() == "hello\n"
	}, 10*time.Second, 10*time.Millisecond, "the service's log")
	stopped, err := f.eng.StopService(ctx, ws.ID, "svc", time.Second)
	require.NoError(f.t, err)
	assert.Equal(f.t, wire.ServiceEnded, stopped.State)
	assert.Equal(f.t, wire.ServiceStopped, stopped.Reason)
	var logs bytes.Buffer
	require.NoError(f.t, f.eng.ServiceLogs(ctx, ws.ID, "svc", true, &logs, nil))
	assert.Equal(f.t, "hello\n", logs.String())
	list, err := f.eng.Services(ctx, ws.ID)
	require.NoError(f.t, err)
	require.Len(f.t, list, 1, "the service that could not start is not listed")
	_, err = f.eng.WaitService(ctx, ws.ID, "nope")
	f.isClass(err, errclass.NotFound, "an unknown service")
}

// serviceCalls are a call of every Services method on workspace id.
func serviceCalls(f *fixture, id string) []workspaceCall {
	ctx := f.ctx
	return []workspaceCall{
		{"StartService", func() error {
			_, err := f.eng.StartService(ctx, id, wire.ServiceRequest{Argv: []string{"true"}})
			return err
		}},
		{"Services", func() error { _, err := f.eng.Services(ctx, id); return err }},
		{"ServiceLogs", func() error { return f.eng.ServiceLogs(ctx, id, "s", false, io.Discard, nil) }},
		{"StopService", func() error { _, err := f.eng.StopService(ctx, id, "s", 0); return err }},
		{"WaitService", func() error { _, err := f.eng.WaitService(ctx, id, "s"); return err }},
	}
}

// StartService implements api.Services.
func (e *Elsewhere) StartService(ctx context.Context, id string, req wire.ServiceRequest) (wire.Service, error) {
	if err := e.misdirected(id); err != nil {
		return wire.Service{}, err
	}
	return e.Engine.StartService(ctx, id, req)
}

// Services implements api.Services.
func (e *Elsewhere) Services(ctx context.Context, id string) ([]wire.Service, error) {
	if err := e.misdirected(id); err != nil {
		return nil, err
	}
	return e.Engine.Services(ctx, id)
}

// ServiceLogs implements api.Services.
func (e *Elsewhere) ServiceLogs(ctx context.Context, id, name string, follow bool, out io.Writer, flush func()) error {
	if err := e.misdirected(id); err != nil {
		return err
	}
	return e.Engine.ServiceLogs(ctx, id, name, follow, out, flush)
}

// StopService implements api.Services.
func (e *Elsewhere) StopService(ctx context.Context, id, name string, grace time.Duration) (wire.Service, error) {
	if err := e.misdirected(id); err != nil {
		return wire.Service{}, err
	}
	return e.Engine.StopService(ctx, id, name, grace)
}

// WaitService implements api.Services.
func (e *Elsewhere) WaitService(ctx context.Context, id, name string) (wire.Service, error) {
	if err := e.misdirected(id); err != nil {
		return wire.Service{}, err
	}
	return e.Engine.WaitService(ctx, id, name)
}
