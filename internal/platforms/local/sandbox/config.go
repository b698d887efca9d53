package sandbox

import (
	"errors"
	"fmt"
	"path/filepath"
	"time"

	"layerfs.dev/layerfs/internal/platforms"
	"layerfs.dev/layerfs/internal/platforms/internal/userns"
	"layerfs.dev/layerfs/wire"
	"layerfs.dev/layerfs/wire/errclass"
)

// Errors reported by Run, checked with errors.Is; each but ErrSetup is of a
// class of package errclass. A Config that cannot be run (a relative or
// missing workspace, a spec that breaks the exec contract, a limit this
// host cannot enforce) is platforms.ErrBadSpec, and nothing was started.
var (
	// ErrSetup: the sandbox init failed before the command started
	// (a mount, the pivot, the cgroup). The command did not run. It has
	// no class of its own: an error wrapping it is of its cause's class
	// (a full file system, a canceled context), else internal.
	ErrSetup = errors.New("sandbox setup failed")
	// ErrUnsupported: this operating system has no namespace sandboxes.
	ErrUnsupported = errclass.New(errclass.Unavailable, "namespace sandboxes need linux")
	// ErrNoUserNamespace: the launcher was given a user namespace
	// (Launcher.UserNamespace) and cannot run this exec in it. The exec is
	// refused, never run in the host's user namespace instead.
	ErrNoUserNamespace = errclass.New(errclass.Unavailable, "the sandbox cannot have its user namespace")
)

// Config is one exec: where its workspace is, what root it sees and what
// it runs.
type Config struct {
	// Workspace is the absolute host path bound read-write at /workspace.
	Workspace string
	// RootDir, when set, is an image directory whose top-level entries
	// become the sandbox's read-only root instead of the host's runtime.
	RootDir string
	// RootWritable makes RootDir itself the sandbox's root, writable: the
	// directory is the workspace's own copy-on-write root (an image's tree
	// under an upper layer of the workspace's), so what an exec installs
	// there stays for the workspace's next execs. The sandbox's mount
	// points (/workspace, /tmp, /proc, /sys, /dev) are made in it where it
	// lacks them.
	RootWritable bool
	// Network gives the sandbox the host's network namespace; otherwise it
	// gets a fresh one holding only lo.
	Network bool
	// Egress, when set (and Network false), gives the fresh namespace a
	// link to an egress before the exec is sent to its init: an init
	// whose link cannot be made is discarded and the exec fails, with no
	// network.
	Egress NetAttacher
	// IDMapped says that the workspace's file system shows its files with
	// the host ids of the launcher's user namespace already (kernel
	// overlayfs over layers id-mapped with Launcher.IDMap's namespace, see
	// kerneloverlay.IDMap): the init clones it as it is, and the command
	// still runs in its user namespace. Otherwise the init id-maps the
	// workspace's clone itself, where its file system allows.
	IDMapped bool
	Spec     platforms.ExecSpec
}

// NetAttacher gives a sandbox's network namespace its egress link.
type NetAttacher interface {
	// Key names the egress: an init attached to it serves only execs of
	// the same key.
	Key() string
	// Attach adds the link to the network namespace of process pid.
	Attach(pid int) (NetLink, error)
}

// NetLink is one sandbox's egress link.
type NetLink interface {
	// Usage is what the link carried and decided so far.
	Usage() wire.NetUsage
	// Settled is Usage once the link's connections have ended and their
	// bytes are counted, or after wait.
	Settled(wait time.Duration) wire.NetUsage
	// Close removes the link; it can be called more than once.
	Close()
}

// normalized checks a Config before anything is started and returns it
// with its spec normalized (platforms.ExecSpec.Normalize).
func (c Config) normalized() (Config, error) {
	if !filepath.IsAbs(c.Workspace) {
		return c, fmt.Errorf("%w: workspace %q is not an absolute path", platforms.ErrBadSpec, c.Workspace)
	}
	if c.RootDir != "" && !filepath.IsAbs(c.RootDir) {
		return c, fmt.Errorf("%w: root dir %q is not an absolute path", platforms.ErrBadSpec, c.RootDir)
	}
	s, err := c.Spec.Normalize()
	if err != nil {
		return c, err
	}
	c.Spec = s
	return c, nil
}

// initConfig is one exec, as the launcher sends it to an init: JSON read
// to EOF from a pipe that comes, with the exec's other descriptors, in
// one message on the init's control socket (see execMessage).
type initConfig struct {
	Workspace string        `json:"workspace"`
	RootDir   string        `json:"root_dir,omitempty"`
	Network   bool          `json:"network,omitempty"`
	Argv      []string      `json:"argv"`
	Env       []string      `json:"env"`
	Dir       string        `json:"dir"` // absolute, inside the sandbox
	Timeout   time.Duration `json:"timeout"`
	UID       int           `json:"uid"`
	GID       int           `json:"gid"`
	Hostname  string        `json:"hostname"`
	// TTY: the command runs on a terminal of this size (see terminal).
	TTY *ttySize `json:"tty,omitempty"`
	// Rlimits stand in for the cgroup limits the host lacks.
	RlimitAS    uint64 `json:"rlimit_as,omitempty"`
	RlimitNproc uint64 `json:"rlimit_nproc,omitempty"`
	// RlimitNofile is the exec's own open files limit (ExecSpec.OpenFiles).
	RlimitNofile uint64 `json:"rlimit_nofile,omitempty"`
	// Seccomp: the command must run under the syscall filter that came in
	// the environment (seccompEnv), which the init loaded before it
	// waited for its first exec; an init without one refuses the exec.
	Seccomp bool `json:"seccomp,omitempty"`
	// Last: the launcher will not reuse the init, which exits after its
	// report instead of making its sandbox ready for another exec.
	Last bool `json:"last,omitempty"`
	// Job, when set, makes the exec a job of a resident init (see
	// resident_linux.go): the init keeps its sandbox as it is for the
	// jobs that follow, runs them side by side and names each report by
	// its job. The first job makes an init resident; it never serves an
	// exec of its own again.
	Job uint64 `json:"job,omitempty"`
	// Service: the job's command keeps running; the init reports its
	// start (its pid) at once and its end when it comes.
	Service bool `json:"service,omitempty"`
}

// ttySize is a terminal's size in characters.
type ttySize struct {
	Rows uint16 `json:"rows"`
	Cols uint16 `json:"cols"`
}

// initReport is what the init sends back on its control socket, as JSON,
// once the exec's whole tree is gone.
type initReport struct {
	Started  bool          `json:"started"`
	ExitCode int           `json:"exit_code"`
	Signal   string        `json:"signal,omitempty"`
	TimedOut bool          `json:"timed_out,omitempty"`
	Command  time.Duration `json:"command_ns"`
	// Error is a setup failure (Started false) or a failure to start the
	// command, such as a missing binary (Started false, ExitCode 127).
	Error string `json:"error,omitempty"`
	// Retire: the init exits after this report (Last, an error, a timeout,
	// or state the exec left in the init that another exec must not
	// inherit, such as its rlimits).
	Retire bool `json:"retire,omitempty"`
	// CPU is the CPU time the init and the exec's processes used from the
	// exec's arrival to this report.
	CPU time.Duration `json:"cpu_ns"`
	// Marks are CLOCK_MONOTONIC readings (ns) of the init's phases, shared
	// with the launcher's clock (there is no time namespace).
	Marks []mark `json:"marks,omitempty"`
	// Job names the job of a resident init the report is about; 0 for an
	// exec of a plain init.
	Job uint64 `json:"job,omitempty"`
	// Pid is a service's pid in the sandbox's PID namespace, in the
	// report of its start.
	Pid int `json:"pid,omitempty"`
	// Ended: the job's command has ended (every job's last report).
	Ended bool `json:"ended,omitempty"`
	// NotStarted says why a job's command could not be started (it was
	// not found, or is not executable); ExitCode is then 127 or 126.
	NotStarted string `json:"not_started,omitempty"`
}

// mark is one named CLOCK_MONOTONIC reading.
type mark struct {
	Name string `json:"name"`
	NS   int64  `json:"ns"`
}

// IDRange is the host ids a sandbox's ids 0 to Size-1 map to.
type IDRange = userns.Range

// DefaultIDRange is the mapping used when nothing else is configured (see
// userns.Default).
var DefaultIDRange = userns.Default
