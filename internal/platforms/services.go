package platforms

import (
	"context"
	"io"
	"syscall"
	"time"

	"layerfs.dev/layerfs/wire/errclass"
)

// Errors of services, checked with errors.Is.
var (
	// ErrNoServices: the platform's sandboxes keep no process running past
	// the call that started it (the sandbox is no ServiceHost).
	ErrNoServices = errclass.New(errclass.Unavailable, "the platform runs no services")
	// ErrNotStarted: a service's command could not be started (not found,
	// not executable); nothing runs.
	ErrNotStarted = errclass.New(errclass.Invalid, "the command could not be started")
)

// ServiceHost is implemented by Sandboxes that keep processes running past
// the call that started them: services. A service runs in the sandbox the
// workspace's execs run in, in the same PID, network, IPC and mount
// namespaces and the same cgroup, so that an exec sees it (ps), reaches it
// (localhost) and may signal it, and the sandbox's limits hold for the
// services and the execs together. While any service runs, the sandbox is
// not reset between execs: files in /tmp and /dev/shm and IPC objects
// stay, for the services hold them.
type ServiceHost interface {
	// StartService starts spec (its Stdin must be nil: a service reads
	// /dev/null; its Timeout is ignored: a service runs until it ends or
	// is signalled) and returns once the command runs, with its output
	// copied to stdout and stderr as it comes; those writers must not
	// block. A command that cannot be started is ErrNotStarted, with the
	// reason; nothing then runs.
	StartService(ctx context.Context, spec ExecSpec, stdout, stderr io.Writer) (Service, error)
}

// Service is a process a ServiceHost keeps running. Its exit is recorded
// before Done is closed.
type Service interface {
	// Pid is its pid in the sandbox's PID namespace.
	Pid() int
	Started() time.Time
	// Signal sends sig to its process group.
	Signal(sig syscall.Signal) error
	// Done is closed once the service has ended and its output is in.
	Done() <-chan struct{}
	// Exit is how it ended; valid once Done is closed.
	Exit() ServiceExit
}

// ServiceExit is how a service ended.
type ServiceExit struct {
	ExitCode int    // 128+n when killed by signal n
	Signal   string // the signal's name, when killed by one
	Reason   string // one of the Reason constants
	Ended    time.Time
}

// Why a service ended.
const (
	ReasonExited       = "exited"        // its command exited
	ReasonSignaled     = "signaled"      // a signal killed it
	ReasonOOM          = "oom"           // the sandbox's memory limit's OOM killer killed it
	ReasonSandboxEnded = "sandbox_ended" // its sandbox ended under it (the workspace ended, the sandbox was lost)
)
