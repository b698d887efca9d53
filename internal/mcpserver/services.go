package mcpserver

import (
	"bytes"
	"context"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"layerfs.dev/layerfs/client"
	"layerfs.dev/layerfs/wire"
)

// The service tools: commands kept running in a workspace's sandbox.

const (
	defaultLogBytes = 16 << 10
	maxLogBytes     = 1 << 20
	maxWaitSeconds  = 600
)

func (s *Server) addServiceTools() {
	addTool(s, &mcp.Tool{Name: "service_start", Annotations: mutating("Start a service in a workspace", false, false),
		Description: "Start a command that keeps running in the workspace's sandbox after this call returns (a web server, a dev server, a watcher): later exec calls run beside it in the same sandbox, so `curl localhost:PORT`, `ps` and `kill` reach it. Give `command` (bash) or `argv`. Its output goes to a log (service_logs). restart \"on-failure\" starts it again after a failure. A command that cannot start is an error with the reason; a name in use by a running service is refused (already_exists). Stop it with service_stop; workspace_end stops them all."},
		s.serviceStart)
	addTool(s, &mcp.Tool{Name: "service_list", Annotations: readOnly("List a workspace's services"),
		Description: "List the workspace's services: name, state (running, restarting, ended), pid in the sandbox, start time, restarts, and, once ended, exit code, signal and reason (exited, signaled, oom, stopped, sandbox_ended, daemon_restart)."},
		s.serviceList)
	addTool(s, &mcp.Tool{Name: "service_logs", Annotations: readOnly("Read a service's output"),
		Description: "Read the last max_bytes (default 16 KiB) of a service's output, stdout and stderr as they came."},
		s.serviceLogs)
	addTool(s, &mcp.Tool{Name: "service_stop", Annotations: mutating("Stop a service", true, true),
		Description: "Stop a service: SIGTERM to its processes, then SIGKILL after grace_seconds (default 10). Returns once it has ended, with how it ended."},
		s.serviceStop)
	addTool(s, &mcp.Tool{Name: "service_wait", Annotations: readOnly("Wait for a service to end"),
		Description: "Wait until a service has ended for good (no restart to come), at most timeout_seconds (default 60); returns its state and, once ended, how."},
		s.serviceWait)
}

type serviceStartIn struct {
	Workspace string   `json:"workspace" jsonschema:"the workspace id"`
	Name      string   `json:"name,omitempty" jsonschema:"the service's name: a-z 0-9 . _ - (default: the command's base name)"`
	Command   string   `json:"command,omitempty" jsonschema:"a bash command line; give this or argv"`
	Argv      []string `json:"argv,omitempty" jsonschema:"a program and its arguments, run without a shell; give this or command"`
	Env       []string `json:"env,omitempty" jsonschema:"extra environment variables as NAME=VALUE"`
	Dir       string   `json:"dir,omitempty" jsonschema:"working directory relative to the workspace root"`
	Restart   string   `json:"restart,omitempty" jsonschema:"no (the default) or on-failure"`
}

type serviceIn struct {
	Workspace string `json:"workspace" jsonschema:"the workspace id"`
	Name      string `json:"name" jsonschema:"the service's name"`
}

type serviceLogsIn struct {
	serviceIn
	MaxBytes int `json:"max_bytes,omitempty" jsonschema:"how many of the last bytes to return (default 16384, at most 1048576)"`
}

type serviceStopIn struct {
	serviceIn
	GraceSeconds float64 `json:"grace_seconds,omitempty" jsonschema:"seconds between SIGTERM and SIGKILL (default 10)"`
}

type serviceWaitIn struct {
	serviceIn
	TimeoutSeconds float64 `json:"timeout_seconds,omitempty" jsonschema:"how long to wait at most (default 60, at most 600); past it the service is returned as it is"`
}

type serviceOut struct {
	Name     string   `json:"name"`
	Argv     []string `json:"argv"`
	State    string   `json:"state"`
	Pid      int      `json:"pid"`
	Started  string   `json:"started"`
	Restarts int      `json:"restarts"`
	ExitCode *int     `json:"exit_code,omitempty"`
	Signal   string   `json:"signal,omitempty"`
	Reason   string   `json:"reason,omitempty"`
}

type serviceListOut struct {
	Services []serviceOut `json:"services"`
}

type serviceLogsOut struct {
	Name      string `json:"name"`
	Output    string `json:"output"`
	Truncated bool   `json:"truncated"`
}

func serviceOf(sv wire.Service) serviceOut {
	return serviceOut{Name: sv.Name, Argv: sv.Argv, State: sv.State, Pid: sv.Pid, Started: sv.Started.UTC().Format(time.RFC3339),
		Restarts: sv.Restarts, ExitCode: sv.ExitCode, Signal: sv.Signal, Reason: sv.Reason}
}

func (s *Server) serviceStart(ctx context.Context, _ *mcp.CallToolRequest, c *client.Client, in serviceStartIn) (serviceOut, error) {
	ws, err := handle(ctx, c, in.Workspace)
	if err != nil {
		return serviceOut{}, err
	}
	if (in.Command == "") == (len(in.Argv) == 0) {
		return serviceOut{}, badInput("give exactly one of command and argv")
	}
	o := client.ServiceOptions{Name: in.Name, Env: in.Env, Dir: in.Dir, Restart: in.Restart}
	var sv wire.Service
	if in.Command != "" {
		sv, err = ws.StartServiceShell(ctx, in.Command, o)
	} else {
		sv, err = ws.StartService(ctx, in.Argv, o)
	}
	return serviceOf(sv), err
}

func (s *Server) serviceList(ctx context.Context, _ *mcp.CallToolRequest, c *client.Client, in struct {
	Workspace string `json:"workspace" jsonschema:"the workspace id"`
}) (serviceListOut, error) {
	ws, err := handle(ctx, c, in.Workspace)
	if err != nil {
		return serviceListOut{}, err
	}
	list, err := ws.Services(ctx)
	out := serviceListOut{Services: []serviceOut{}}
	for _, sv := range list {
		out.Services = append(out.Services, serviceOf(sv))
	}
	return out, err
}

func (s *Server) serviceLogs(ctx context.Context, _ *mcp.CallToolRequest, c *client.Client, in serviceLogsIn) (serviceLogsOut, error) {
	n, err := bounded("max_bytes", in.MaxBytes, defaultLogBytes, maxLogBytes)
	if err != nil {
		return serviceLogsOut{}, err
	}
	ws, err := handle(ctx, c, in.Workspace)
	if err != nil {
		return serviceLogsOut{}, err
	}
	var b bytes.Buffer
	if err := ws.ServiceLogs(ctx, in.Name, false, &b); err != nil {
		return serviceLogsOut{}, err
	}
	out := serviceLogsOut{Name: in.Name, Output: b.String()}
	if b.Len() > n {
		out.Output, out.Truncated = string(b.Bytes()[b.Len()-n:]), true
	}
	return out, nil
}

func (s *Server) serviceStop(ctx context.Context, _ *mcp.CallToolRequest, c *client.Client, in serviceStopIn) (serviceOut, error) {
	if in.GraceSeconds < 0 || in.GraceSeconds > 3600 {
		return serviceOut{}, badInput("grace_seconds must be from 0 to 3600 (got %v)", in.GraceSeconds)
	}
	ws, err := handle(ctx, c, in.Workspace)
	if err != nil {
		return serviceOut{}, err
	}
	sv, err := ws.StopService(ctx, in.Name, time.Duration(in.GraceSeconds*float64(time.Second)))
	return serviceOf(sv), err
}

func (s *Server) serviceWait(ctx context.Context, _ *mcp.CallToolRequest, c *client.Client, in serviceWaitIn) (serviceOut, error) {
	if in.TimeoutSeconds < 0 || in.TimeoutSeconds > maxWaitSeconds {
		return serviceOut{}, badInput("timeout_seconds must be from 0 to %d (got %v)", maxWaitSeconds, in.TimeoutSeconds)
	}
	ws, err := handle(ctx, c, in.Workspace)
	if err != nil {
		return serviceOut{}, err
	}
	d := 60 * time.Second
	if in.TimeoutSeconds > 0 {
		d = time.Duration(in.TimeoutSeconds * float64(time.Second))
	}
	wctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	sv, err := ws.WaitService(wctx, in.Name)
	if err != nil && wctx.Err() != nil && ctx.Err() == nil {
		list, lerr := ws.Services(ctx)
		for _, x := range list {
			if x.Name == in.Name {
				return serviceOf(x), lerr
			}
		}
	}
	return serviceOf(sv), err
}
