package sandbox

import (
	"errors"
	"fmt"
	"path"
	"path/filepath"
	"strings"
	"time"

	"layerfs.dev/layerfs/internal/platforms"
	"layerfs.dev/layerfs/internal/platforms/internal/userns"
	"layerfs.dev/layerfs/wire/errclass"
)

// Errors reported by Run, checked with errors.Is; each but ErrSetup is of a
// class of package errclass.
var (
	// ErrInvalidConfig: the Config cannot be run (relative workspace,
	// bad Dir, negative limits, empty argv). Nothing was started.
	ErrInvalidConfig = errclass.New(errclass.Invalid, "invalid sandbox config")
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
	// Network gives the sandbox the host's network namespace; otherwise it
	// gets a fresh one holding only lo.
	Network bool
	// IDMapped says that the workspace's file system shows its files with
	// the host ids of the launcher's user namespace already (kernel
	// overlayfs over layers id-mapped with Launcher.IDMap's namespace, see
	// kerneloverlay.IDMap): the init clones it as it is, and the command
	// still runs in its user namespace. Otherwise the init id-maps the
	// workspace's clone itself, where its file system allows.
	IDMapped bool
	Spec     platforms.ExecSpec
}

// DefaultHostname is the sandbox's hostname when the spec names none.
const DefaultHostname = "layerfs"

// DefaultPath is the PATH a sandbox gets when the exec's Env sets none.
const DefaultPath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// validate checks a Config before anything is started.
func (c Config) validate() error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: %w", ErrInvalidConfig, fmt.Errorf(format, args...))
	}
	if !filepath.IsAbs(c.Workspace) {
		return bad("workspace %q is not an absolute path", c.Workspace)
	}
	if c.RootDir != "" && !filepath.IsAbs(c.RootDir) {
		return bad("root dir %q is not an absolute path", c.RootDir)
	}
	s := c.Spec
	if len(s.Argv) == 0 || s.Argv[0] == "" {
		return bad("empty argv")
	}
	if _, err := cleanDir(s.Dir); err != nil {
		return bad("%w", err)
	}
	if s.Timeout < 0 {
		return bad("negative timeout %v", s.Timeout)
	}
	if s.OutputLimit < 0 || s.MemoryBytes < 0 || s.Pids < 0 || s.MilliCPUs < 0 || s.OpenFiles < 0 {
		return bad("negative limit")
	}
	if s.UID < 0 || s.GID < 0 {
		return bad("negative uid or gid")
	}
	for _, kv := range s.Env {
		if !strings.Contains(kv, "=") || strings.HasPrefix(kv, "=") {
			return bad("env entry %q is not KEY=VALUE", kv)
		}
	}
	if len(s.Hostname) > 64 {
		return bad("hostname longer than 64 bytes")
	}
	return nil
}

// cleanDir turns ExecSpec.Dir into a path below /workspace. It refuses
// absolute paths and any ".." so that the working directory can be named
// only inside the workspace (symlinks inside it stay inside the sandbox,
// which sees nothing of the host anyway).
func cleanDir(dir string) (string, error) {
	if dir == "" || dir == "." {
		return "/workspace", nil
	}
	if strings.HasPrefix(dir, "/") {
		return "", fmt.Errorf("dir %q must be relative to /workspace", dir)
	}
	for _, part := range strings.Split(dir, "/") {
		if part == ".." {
			return "", fmt.Errorf("dir %q leaves /workspace", dir)
		}
	}
	return path.Join("/workspace", dir), nil
}

// sandboxEnv is the command's environment: the exec's Env on top of PATH,
// HOME and TERM defaults. HOME is /tmp rather than /workspace so that the
// dot-files and caches tools write there do not land in the workspace and
// from there in a commit.
func sandboxEnv(env []string) []string {
	out := make([]string, 0, len(env)+3)
	has := map[string]bool{}
	for _, kv := range env {
		k, _, _ := strings.Cut(kv, "=")
		has[k] = true
	}
	for _, d := range []string{"PATH=" + DefaultPath, "HOME=/tmp", "TERM=dumb"} {
		k, _, _ := strings.Cut(d, "=")
		if !has[k] {
			out = append(out, d)
		}
	}
	return append(out, env...)
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
