package wire

import "time"

// ServiceRequest starts a service: POST /v1/workspaces/{id}/services. A
// service is a command that keeps running in the workspace's sandbox after
// the call returns, beside its execs (docs/concepts.md#services).
type ServiceRequest struct {
	// Name names the service in the workspace ([a-z0-9][a-z0-9._-]*, at
	// most 63 bytes); "" takes the command's base name.
	Name string   `json:"name,omitempty"`
	Argv []string `json:"argv,omitempty"`
	Body string   `json:"body,omitempty"` // a shell body, instead of argv
	Env  []string `json:"env,omitempty"`
	Dir  string   `json:"dir,omitempty"` // relative to /workspace
	// Restart is RestartNo (the default) or RestartOnFailure.
	Restart string `json:"restart,omitempty"`
	// The sandbox's limits, when this service is the first to run in it:
	// they hold for its services and execs together.
	MemoryBytes int64 `json:"memory_bytes,omitempty"`
	Pids        int   `json:"pids,omitempty"`
	MilliCPUs   int   `json:"milli_cpus,omitempty"`
}

// Restart policies of a service.
const (
	RestartNo        = "no"
	RestartOnFailure = "on-failure" // started again, with a backoff, after a non-zero exit or a signal
)

// States of a service.
const (
	ServiceRunning    = "running"
	ServiceRestarting = "restarting" // ended and waiting out its backoff before it starts again
	ServiceEnded      = "ended"
)

// Why a service ended (Service.Reason).
const (
	ServiceExited        = "exited"
	ServiceSignaled      = "signaled"
	ServiceOOM           = "oom"            // the sandbox's memory limit
	ServiceStopped       = "stopped"        // stopped through the API
	ServiceSandboxEnded  = "sandbox_ended"  // the workspace's sandbox ended under it
	ServiceDaemonRestart = "daemon_restart" // the daemon that ran it died; it died with its sandbox
	ServiceStartFailed   = "start_failed"   // a restart could not start the command
)

// Service is one service of a workspace.
type Service struct {
	Name    string    `json:"name"`
	Argv    []string  `json:"argv"`
	Restart string    `json:"restart"`
	State   string    `json:"state"`
	Pid     int       `json:"pid,omitempty"` // in the sandbox's PID namespace, while it runs
	Started time.Time `json:"started"`       // its latest start
	// Restarts counts the starts after the first.
	Restarts int `json:"restarts"`
	// Known once it has ended (the latest run's, while it restarts).
	Ended    *time.Time `json:"ended,omitempty"`
	ExitCode *int       `json:"exit_code,omitempty"`
	Signal   string     `json:"signal,omitempty"`
	Reason   string     `json:"reason,omitempty"`
}

// ServiceList answers GET /v1/workspaces/{id}/services.
type ServiceList struct {
	Services []Service `json:"services"`
}

// ServiceStopRequest stops a service: POST
// /v1/workspaces/{id}/services/{name}/stop. SIGTERM to its process group,
// then SIGKILL after GraceMs (0: DefaultStopGrace).
type ServiceStopRequest struct {
	GraceMs int64 `json:"grace_ms,omitempty"`
}

// DefaultStopGrace is how long a stop waits after SIGTERM before SIGKILL.
const DefaultStopGrace = 10 * time.Second
