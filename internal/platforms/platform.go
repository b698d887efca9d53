package platforms

import (
	"context"
	"io"
	"net"
	"os"
	"time"

	"layerfs.dev/layerfs/wire"
	"layerfs.dev/layerfs/wire/errclass"
)

// Errors every platform reports through errors.Is, each of a class of
// package errclass. The wrapped message names the platform and says why.
var (
	// ErrUnavailable: the platform cannot run on this host (tool missing,
	// wrong version, no hypervisor).
	ErrUnavailable = errclass.New(errclass.Unavailable, "platform unavailable")
	// ErrNotUp: a call that needs the environment was made before Up.
	ErrNotUp = errclass.New(errclass.Unavailable, "platform is not up")
	// ErrClosed: Exec on a sandbox that was closed (or whose platform went
	// down).
	ErrClosed = errclass.New(errclass.Unavailable, "sandbox is closed")
	// ErrConfig: a VM platform's configuration cannot make a valid instance.
	ErrConfig = errclass.New(errclass.Invalid, "invalid platform configuration")
	// ErrStart: a VM platform could not create or boot its instance.
	ErrStart = errclass.New(errclass.Unavailable, "platform instance failed to start")
	// ErrDaemon: the guest layerfsd of a VM platform did not answer on the
	// forwarded socket.
	ErrDaemon = errclass.New(errclass.Unavailable, "guest layerfsd did not answer")
	// ErrNoTerminal: an exec asked for a terminal on a platform without
	// (Features.Terminal).
	ErrNoTerminal = errclass.New(errclass.Unavailable, "the platform runs no terminals")
	// ErrNoPorts: a port of a sandbox was asked of a platform that cannot
	// reach them (Features.Ports).
	ErrNoPorts = errclass.New(errclass.Unavailable, "the platform forwards no ports")
	// ErrHostNetwork: a port was asked of a workspace granted the host's
	// network, whose ports are the host's own.
	ErrHostNetwork = errclass.New(errclass.Invalid, "the workspace has the host's network: its ports are the host's own, reach them on the host")
	// ErrCommand: a command of a VM platform's tool (limactl, container,
	// msb) failed.
	ErrCommand = errclass.New(errclass.Unavailable, "platform command failed")
)

// Platform is where a sandbox's Linux environment runs: this host, a Docker
// engine, or a VM. Its lifecycle is
//
//	New -> Up -> (Attach/Exec ... or Endpoint ...) -> Down
//
// Up is idempotent and may take long (a VM boot); Down removes everything Up
// and Attach created (containers, VMs, volumes, mounts, processes) and is
// safe to call more than once. A platform is safe for concurrent use after Up.
//
// A platform provides its sandboxes in one of two ways, told by Features:
// HostMounts platforms (local, docker) implement SandboxHost and see
// workspaces mounted on this host; RemoteDaemon platforms (lima,
// applecontainer, libkrun) run layerfsd in a guest, which serves the mounts
// and launches namespace sandboxes there, and implement Remote so that the
// host drives that daemon through the same API.
type Platform interface {
	// Name is the platform's registry name: "local", "docker", "lima", ...
	Name() string
	Features() Features
	Up(ctx context.Context) error
	Down(ctx context.Context) error
	// Identity describes the running environment; it needs Up.
	Identity(ctx context.Context) (Identity, error)
}

// Features says what a platform can do.
type Features struct {
	HostMounts   bool // implements SandboxHost: sandboxes see host paths
	RemoteDaemon bool // implements Remote: layerfsd runs inside the guest
	Network      bool // can grant a sandbox the host's network when asked
	// Egress: gives a Workspace's Egress (a routed interface that lets
	// through what its rules allow) and implements NetworkChanger; a
	// platform without refuses the mode (Isolation.Egress says why).
	Egress      bool
	MemoryLimit bool // enforces ExecSpec.MemoryBytes
	PidsLimit   bool // enforces ExecSpec.Pids
	CPULimit    bool // enforces ExecSpec.MilliCPUs
	// OpenFilesLimit: enforces ExecSpec.OpenFiles.
	OpenFilesLimit bool
	// Terminal: runs an ExecSpec with a Terminal; others refuse it with
	// ErrNoTerminal.
	Terminal bool
	// Ports: its sandboxes implement PortDialer; others' ports are
	// refused with ErrNoPorts.
	Ports bool
}

// Identity pins what a result was measured on.
type Identity struct {
	Platform    string `json:"platform"`
	Kernel      string `json:"kernel"`            // uname -r inside the environment
	CPUs        int    `json:"cpus"`              // CPUs visible inside
	MemoryBytes int64  `json:"memory_bytes"`      // memory visible inside
	Runtime     string `json:"runtime"`           // e.g. "docker 28.2.2", "limactl 1.2.1"
	Image       string `json:"image,omitempty"`   // sandbox image id, where there is one
	Details     string `json:"details,omitempty"` // anything else worth pinning
}

// Isolator is implemented by platforms that say what keeps their sandboxes
// apart (it needs Up). The engine holds every exec's result to it: one that
// ran outside the user namespace it names is an error, not a note. A
// platform that cannot give the user namespace it was configured with
// fails Up instead of reporting less.
type Isolator interface {
	Isolation(ctx context.Context) (wire.Isolation, error)
}

// NetworkIsolation is Isolation.Network for platforms whose sandboxes get a
// network namespace of their own unless granted the host's.
const NetworkIsolation = "none (a network namespace with only lo) unless the workspace is granted the host's"

// NetworkEgressIsolation is Isolation.Network for platforms that also give
// egress by policy.
const NetworkEgressIsolation = "none (a network namespace with only lo) by default; egress: a link to the daemon's egress that lets through what the workspace's rules allow; host: the host's network namespace, when granted by name"

// SandboxHost is implemented by platforms whose sandboxes see directories of
// this host (Features.HostMounts).
type SandboxHost interface {
	// Attach makes the directory at w.HostPath (a workspace's FUSE mount or,
	// for the bench's native arm, a plain directory) the /workspace of every
	// sandbox that the returned Sandbox launches. The directory must exist
	// and stay mounted until Sandbox.Close returns.
	Attach(ctx context.Context, w Workspace) (Sandbox, error)
}

// Workspace is what a platform needs to know about one workspace.
type Workspace struct {
	ID       string // stable id, safe in names: [a-z0-9-]
	HostPath string // absolute path on this host
	Network  bool   // sandboxes get the host's network (else none, or Egress)
	// Egress, when set, gives the sandboxes a link to the platform's
	// egress with these rules (Features.Egress); Network must be false.
	Egress   []wire.NetworkRule
	EgressOn bool
	// NetEvents, when set, is called with each decision of the
	// workspace's egress; it must not block.
	NetEvents func(wire.NetEvent)
	// RootDir, when set, is an image directory to use as the sandbox's root
	// file system instead of the platform's default runtime.
	RootDir string
	// RootWritable: RootDir is the workspace's own copy-on-write root (an
	// image's tree under an upper layer of its own), which sandboxes may
	// write; what they write stays for the workspace's next execs.
	// Otherwise the root is read-only.
	RootWritable bool
	// IDMapped: the workspace's mount was made over layers id-mapped with
	// the platform's IDMapper namespace, so it shows the host ids of the
	// sandboxes' user namespace already.
	IDMapped bool
}

// NetworkChanger is implemented by the Sandboxes of platforms that can
// change a live workspace's network (Features.Egress). SetNetwork makes
// mode (a wire.Network* mode) and rules the network of the workspace's
// next execs, and of its running ones as far as a running sandbox can
// change: an egress sandbox's connections that the new network denies
// are cut before it returns. On error the network is as it was, or none.
type NetworkChanger interface {
	SetNetwork(ctx context.Context, mode string, rules []wire.NetworkRule) error
}

// Mode is the workspace's network mode: wire.NetworkHost, NetworkEgress
// or NetworkNone.
func (w Workspace) Mode() string {
	switch {
	case w.Network:
		return wire.NetworkHost
	case w.EgressOn:
		return wire.NetworkEgress
	}
	return wire.NetworkNone
}

// IDMapper is implemented by SandboxHost platforms whose sandboxes run in a
// user namespace of their own and id-map their workspace for it. A
// workspace whose file system cannot be id-mapped as a whole (kernel
// overlayfs) is mounted over layers id-mapped with IDMap's namespace
// instead, and attached with Workspace.IDMapped.
type IDMapper interface {
	// IDMap returns a user namespace with the sandboxes' mapping (an open
	// /proc/PID/ns/user that stays the platform's: the caller must not
	// close it), the host id that its id 0 maps to and how many ids it
	// maps, or why there is none.
	IDMap() (userns *os.File, root, size uint32, err error)
}

// Sandbox launches execs for one attached workspace. Exec may be called
// concurrently; each call runs in its own fresh sandbox (or, for docker, its
// own exec in the workspace's container) and its processes are all gone when
// Exec returns.
type Sandbox interface {
	Exec(ctx context.Context, spec ExecSpec, stdout, stderr io.Writer) (ExecResult, error)
	// Close detaches the workspace and removes what Attach created.
	Close(ctx context.Context) error
}

// PortDialer is implemented by the sandboxes of platforms with
// Features.Ports: the daemon connects to a port inside the workspace's
// sandbox, in its network namespace, which stays its own (nothing of the
// host's network is opened to it, nor its ports to the host's).
type PortDialer interface {
	// DialPort connects to port on the loopback of the workspace's
	// sandbox network namespace (127.0.0.1, else ::1). It fails with an
	// error of class errclass.Unreachable, naming the port, when nothing
	// listens there (a sandbox that runs nothing listens on nothing);
	// errclass.Invalid for a port outside 1-65535; ErrHostNetwork for a
	// workspace with the host's network; ErrClosed once the sandbox is
	// closed.
	DialPort(ctx context.Context, port int) (net.Conn, error)
}

// Remote is implemented by platforms whose layerfsd runs in a guest
// (Features.RemoteDaemon).
type Remote interface {
	// Endpoint returns the host-side address of the guest daemon's API,
	// as "unix:///path" or "http://host:port", and the bearer token it needs
	// ("" for none).
	Endpoint(ctx context.Context) (addr, token string, err error)
}

// ExecSpec is one command to run in a sandbox. A platform runs it as
// Normalize returns it (defaults filled in) and refuses, with ErrBadSpec,
// one that breaks its rules.
type ExecSpec struct {
	// Argv is run exactly as given. A shell body is
	// []string{"bash", "-o", "pipefail", "-c", body}; see ShellArgv.
	Argv []string
	Env  []string // NAME=VALUE; Normalize adds PATH, HOME and TERM when absent
	// Dir is the working directory relative to /workspace ("" for /workspace).
	Dir string
	// RootWorkdir, when set, is the working directory instead of Dir: an
	// absolute, clean directory of the sandbox's root, resolved inside the
	// sandbox (an image's WorkingDir outside /workspace). Dir must then be
	// empty.
	RootWorkdir string
	Stdin       io.Reader // nil for /dev/null
	Timeout     time.Duration
	// OutputLimit caps stdout and stderr each; bytes past it are discarded
	// and ExecResult.OutputTruncated is set. 0 means DefaultOutputLimit.
	OutputLimit int64
	UID, GID    int
	MemoryBytes int64 // 0: no limit beyond the platform's default
	Pids        int   // 0: DefaultPids
	// MilliCPUs caps the CPU time of the exec's processes together, in
	// thousandths of a CPU (500: half a CPU, 2000: two); 0 no limit.
	MilliCPUs int
	// OpenFiles is the exec's RLIMIT_NOFILE (soft and hard); 0 the
	// platform's default.
	OpenFiles int
	Hostname  string
	// Terminal, when set, runs the command on a pseudo-terminal: its
	// stdin, stdout and stderr, its session's controlling terminal. Its
	// output all comes to stdout; the end of Stdin hangs the terminal up
	// (the session gets SIGHUP), so a terminal's Stdin is a stream that
	// ends when its user leaves.
	Terminal *Terminal
}

// Terminal is an exec's pseudo-terminal.
type Terminal struct {
	Rows, Cols int // 0: 24 rows, 80 columns
	// Resize, when set, carries new sizes while the command runs; the
	// platform stops reading it when the exec ends.
	Resize <-chan wire.TerminalSize
}

// Defaults for ExecSpec fields left zero.
const (
	DefaultOutputLimit = 16 << 20
	DefaultPids        = 1024
	DefaultTimeout     = 10 * time.Minute
)

// ShellArgv is how a shell body is run everywhere in LayerFS.
func ShellArgv(body string) []string { return []string{"bash", "-o", "pipefail", "-c", body} }

// ExecResult is what one exec did. Times named Command are on the sandbox's
// own clock: from just before the command was started inside the sandbox to
// just after it ended.
type ExecResult struct {
	ExitCode        int           `json:"exit_code"` // 128+n when killed by signal n
	Signal          string        `json:"signal,omitempty"`
	TimedOut        bool          `json:"timed_out,omitempty"`
	OutputTruncated bool          `json:"output_truncated,omitempty"`
	Command         time.Duration `json:"command_ns"` // time of the command itself
	Wall            time.Duration `json:"wall_ns"`    // Exec call from entry to return
	// Launch is Wall minus Command: what the platform itself cost.
	Launch time.Duration `json:"launch_ns"`
	// UserNamespace is the command's user namespace mapping as
	// /proc/self/uid_map shows it ("0 2000000000 65536": uid 0 inside is
	// 2000000000 on the host), or "none: " and why it ran in the host's.
	// Empty when the platform does not say.
	UserNamespace string `json:"user_namespace,omitempty"`
	// Network is the exec's network mode and, with egress, what it
	// reached and was refused; nil when the platform does not say.
	Network *wire.NetUsage `json:"network,omitempty"`
}
