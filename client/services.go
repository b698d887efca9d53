package client

import (
	"context"
	"io"
	"net/http"
	"net/url"
	"time"

	"layerfs.dev/layerfs/wire"
)

// Service is one service of a workspace: a command kept running in its
// sandbox beside its execs.
type Service = wire.Service

// ServiceOptions are a service's optional settings.
type ServiceOptions struct {
	// Name names it ("": the command's base name).
	Name string
	Env  []string // NAME=VALUE
	Dir  string   // relative to /workspace
	// Restart is wire.RestartNo (the default) or wire.RestartOnFailure.
	Restart string
	// The sandbox's limits, when it is the first service to run there.
	MemoryBytes int64
	Pids        int
	MilliCPUs   int
}

// StartService starts argv as a service and returns once it runs; a
// command that cannot start is an invalid_argument error with the reason,
// a name a running service has already_exists.
func (ws *Workspace) StartService(ctx context.Context, argv []string, o ServiceOptions) (Service, error) {
	return ws.startService(ctx, wire.ServiceRequest{Argv: argv}, o)
}

// StartServiceShell starts a shell body as a service (see StartService).
func (ws *Workspace) StartServiceShell(ctx context.Context, body string, o ServiceOptions) (Service, error) {
	return ws.startService(ctx, wire.ServiceRequest{Body: body}, o)
}

func (ws *Workspace) startService(ctx context.Context, req wire.ServiceRequest, o ServiceOptions) (Service, error) {
	req.Name, req.Env, req.Dir, req.Restart = o.Name, o.Env, o.Dir, o.Restart
	req.MemoryBytes, req.Pids, req.MilliCPUs = o.MemoryBytes, o.Pids, o.MilliCPUs
	var sv Service
	err := doJSON(ctx, ws, http.MethodPost, ws.path("/services"), nil, req, &sv)
	return sv, err
}

// Services lists the workspace's services, running or ended.
func (ws *Workspace) Services(ctx context.Context) ([]Service, error) {
	var l wire.ServiceList
	err := doJSON(ctx, ws, http.MethodGet, ws.path("/services"), nil, nil, &l)
	return l.Services, err
}

// StopService stops a service (SIGTERM, then SIGKILL after grace; 0:
// wire.DefaultStopGrace) and returns once it has ended.
func (ws *Workspace) StopService(ctx context.Context, name string, grace time.Duration) (Service, error) {
	var sv Service
	err := doJSON(ctx, ws, http.MethodPost, ws.path("/services/"+seg(name)+"/stop"), nil,
		wire.ServiceStopRequest{GraceMs: grace.Milliseconds()}, &sv)
	return sv, err
}

// WaitService returns once a service has ended for good (no restart to
// come).
func (ws *Workspace) WaitService(ctx context.Context, name string) (Service, error) {
	var sv Service
	err := doJSON(ctx, ws, http.MethodPost, ws.path("/services/"+seg(name)+"/wait"), nil, nil, &sv)
	return sv, err
}

// ServiceLogs copies a service's log (its last MiB of output) to w; with
// follow, also what comes, until the service ends for good or ctx ends.
func (ws *Workspace) ServiceLogs(ctx context.Context, name string, follow bool, w io.Writer) error {
	q := url.Values{}
	if follow {
		q.Set("follow", "true")
	}
	resp, err := ws.send(ctx, call{method: http.MethodGet, path: ws.path("/services/" + seg(name) + "/logs"), query: q, size: -1})
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	_, err = io.Copy(w, resp.Body)
	if ctx.Err() != nil {
		return nil
	}
	return err
}
