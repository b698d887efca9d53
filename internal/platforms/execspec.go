package platforms

import (
	"bytes"
	"cmp"
	"errors"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"strings"
	"time"

	"layerfs.dev/layerfs/wire"
	"layerfs.dev/layerfs/wire/errclass"
)

// ErrBadSpec is the one error of an exec no platform may run: an ExecSpec
// (or the wire.ExecRequest it came from) or the Workspace it runs on that
// breaks a rule of Normalize or Workspace.Validate. Nothing was started.
// The wrapped message names every bad field.
var ErrBadSpec = errclass.New(errclass.Invalid, "invalid exec spec")

// Bounds of an ExecSpec beyond which Normalize refuses it. They keep a
// request from asking for what the kernel would refuse later, in a less
// telling way, or from overflowing the arithmetic of a limit.
const (
	MaxTimeout = 24 * time.Hour
	// MaxArgBytes bounds one argv or env string (Linux's MAX_ARG_STRLEN).
	MaxArgBytes = 128 << 10
	// MaxArgsBytes bounds argv and env together, well inside the quarter
	// of the default 8 MiB stack that execve allows them.
	MaxArgsBytes = 1 << 20
	// MaxDirBytes bounds Dir, so that /workspace/Dir fits in PATH_MAX.
	MaxDirBytes = 4000
	MaxHostname = 64
	// MaxPids is the kernel's PID_MAX_LIMIT.
	MaxPids = 1 << 22
	// MaxOpenFiles is the kernel's default fs.nr_open.
	MaxOpenFiles = 1 << 20
	// MaxMilliCPUs is 1024 CPUs.
	MaxMilliCPUs = 1 << 20
	// MaxMemoryBytes is 1 PiB.
	MaxMemoryBytes = 1 << 50
	// MaxID is the largest uid or gid (2^32-1 is "no id" to the kernel).
	MaxID = 1<<32 - 2
	// MaxTerminal bounds a terminal's rows and columns.
	MaxTerminal = 1000
)

// The size of a terminal whose spec names none.
const (
	DefaultRows = 24
	DefaultCols = 80
)

// DefaultPath, DefaultHome and DefaultTerm are what Normalize adds to an
// exec's environment where it sets none. HOME is /tmp rather than
// /workspace so that the dot-files and caches tools write there do not land
// in the workspace and from there in a commit.
const (
	DefaultPath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
	DefaultHome = "/tmp"
	DefaultTerm = "dumb"
)

// DefaultHostname is a sandbox's hostname when the spec names none and the
// sandbox does not share the host's network.
const DefaultHostname = "layerfs"

// WorkspaceDir is where every sandbox sees its workspace.
const WorkspaceDir = "/workspace"

var (
	envKeyRE    = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)
	hostnameRE  = regexp.MustCompile(`^[A-Za-z0-9]([A-Za-z0-9.-]*[A-Za-z0-9])?$`)
	workspaceRE = regexp.MustCompile(`^[a-z0-9][a-z0-9-]{0,62}$`)
)

// problems collects what is wrong with a spec, each naming its field, so
// that one answer lists them all.
type problems []error

func (p *problems) add(field, format string, args ...any) {
	*p = append(*p, fmt.Errorf("%s: %s", field, fmt.Sprintf(format, args...)))
}

func (p problems) err() error {
	if len(p) == 0 {
		return nil
	}
	return fmt.Errorf("%w: %w", ErrBadSpec, errors.Join(p...))
}

// Normalize is the one place an exec is checked: it returns s with its
// defaults filled in (Timeout, OutputLimit, Pids, and PATH, HOME and TERM
// in Env where it sets none), or ErrBadSpec naming every field that breaks
// a rule. Every platform's Sandbox.Exec runs what Normalize returns and
// nothing else; Normalize of a normalized spec returns it unchanged.
//
// The rules: a non-empty argv[0]; no NUL byte in argv, Env or Dir; each
// Env entry NAME=VALUE with NAME of [A-Za-z_][A-Za-z0-9_]*; Dir a clean
// path relative to /workspace with no ".." (it cannot name a directory
// outside the workspace); RootWorkdir, when set, absolute and clean, with
// no NUL and Dir empty; no negative limit and none past its Max bound;
// a Hostname that is a valid host name.
func (s ExecSpec) Normalize() (ExecSpec, error) {
	var bad problems
	s.checkCommand(&bad)
	s.checkDir(&bad)
	s.checkRootWorkdir(&bad)
	s.checkLimits(&bad)
	if err := bad.err(); err != nil {
		return s, err
	}
	if s.Timeout == 0 {
		s.Timeout = DefaultTimeout
	}
	if s.OutputLimit == 0 {
		s.OutputLimit = DefaultOutputLimit
	}
	if s.Pids == 0 {
		s.Pids = DefaultPids
	}
	if t := s.Terminal; t != nil && (t.Rows == 0 || t.Cols == 0) {
		sized := *t
		sized.Rows, sized.Cols = cmp.Or(t.Rows, DefaultRows), cmp.Or(t.Cols, DefaultCols)
		s.Terminal = &sized
	}
	s.Dir = path.Clean("./" + s.Dir)
	if s.Dir == "." {
		s.Dir = ""
	}
	s.Env = withDefaultEnv(s.Env)
	return s, nil
}

func (s ExecSpec) checkCommand(bad *problems) {
	if len(s.Argv) == 0 || s.Argv[0] == "" {
		bad.add("argv", "an exec needs a command (argv[0] is empty)")
	}
	total := 0
	for i, a := range s.Argv {
		total += len(a) + 1
		checkArg(bad, fmt.Sprintf("argv[%d]", i), a)
	}
	for i, kv := range s.Env {
		total += len(kv) + 1
		field := fmt.Sprintf("env[%d]", i)
		k, _, ok := strings.Cut(kv, "=")
		if !ok || !envKeyRE.MatchString(k) {
			bad.add(field, "%.64q: want NAME=VALUE with NAME of [A-Za-z_][A-Za-z0-9_]*", kv)
			continue
		}
		checkArg(bad, field, kv)
	}
	if total > MaxArgsBytes {
		bad.add("argv", "argv and env are %d bytes together, more than %d", total, MaxArgsBytes)
	}
	if s.Hostname != "" && (len(s.Hostname) > MaxHostname || !hostnameRE.MatchString(s.Hostname)) {
		bad.add("hostname", "%.80q: want at most %d of [A-Za-z0-9.-], starting and ending with a letter or digit", s.Hostname, MaxHostname)
	}
}

func checkArg(bad *problems, field, a string) {
	switch {
	case strings.ContainsRune(a, 0):
		bad.add(field, "contains a NUL byte")
	case len(a) > MaxArgBytes:
		bad.add(field, "is %d bytes, more than %d", len(a), MaxArgBytes)
	}
}

func (s ExecSpec) checkDir(bad *problems) {
	d := s.Dir
	switch {
	case len(d) > MaxDirBytes:
		bad.add("dir", "is %d bytes, more than %d", len(d), MaxDirBytes)
	case strings.ContainsRune(d, 0):
		bad.add("dir", "contains a NUL byte")
	case strings.HasPrefix(d, "/"):
		bad.add("dir", "%q is absolute: want a path relative to %s", d, WorkspaceDir)
	case hasDotDot(d):
		bad.add("dir", "%q has a \"..\" component: the working directory must be inside %s", d, WorkspaceDir)
	}
}

func (s ExecSpec) checkRootWorkdir(bad *problems) {
	d := s.RootWorkdir
	switch {
	case d == "":
	case len(d) > MaxDirBytes:
		bad.add("root_workdir", "is %d bytes, more than %d", len(d), MaxDirBytes)
	case strings.ContainsRune(d, 0):
		bad.add("root_workdir", "contains a NUL byte")
	case !strings.HasPrefix(d, "/") || path.Clean(d) != d:
		bad.add("root_workdir", "%q: want an absolute, clean path", d)
	case s.Dir != "" && s.Dir != ".":
		bad.add("root_workdir", "set with dir %q: give one", s.Dir)
	}
}

// Workdir is where the command starts, inside the sandbox: RootWorkdir,
// else /workspace/Dir.
func (s ExecSpec) Workdir() string {
	if s.RootWorkdir != "" {
		return s.RootWorkdir
	}
	return path.Join(WorkspaceDir, s.Dir)
}

func hasDotDot(p string) bool {
	for _, c := range strings.Split(p, "/") {
		if c == ".." {
			return true
		}
	}
	return false
}

func (s ExecSpec) checkLimits(bad *problems) {
	inRange := func(field string, v, max int64) {
		if v < 0 || v > max {
			bad.add(field, "%d: want 0 (the default) to %d", v, max)
		}
	}
	if s.Timeout < 0 || s.Timeout > MaxTimeout {
		bad.add("timeout", "%v: want 0 (the default, %v) to %v", s.Timeout, DefaultTimeout, MaxTimeout)
	}
	inRange("output_limit", s.OutputLimit, 1<<62)
	inRange("memory_bytes", s.MemoryBytes, MaxMemoryBytes)
	inRange("pids", int64(s.Pids), MaxPids)
	inRange("milli_cpus", int64(s.MilliCPUs), MaxMilliCPUs)
	inRange("open_files", int64(s.OpenFiles), MaxOpenFiles)
	inRange("uid", int64(s.UID), MaxID)
	inRange("gid", int64(s.GID), MaxID)
	if s.Terminal != nil {
		inRange("tty.rows", int64(s.Terminal.Rows), MaxTerminal)
		inRange("tty.cols", int64(s.Terminal.Cols), MaxTerminal)
	}
}

// withDefaultEnv is env with PATH, HOME and TERM appended where it sets
// none.
func withDefaultEnv(env []string) []string {
	out := make([]string, 0, len(env)+3)
	out = append(out, env...)
	for _, d := range [][2]string{{"PATH", DefaultPath}, {"HOME", DefaultHome}, {"TERM", DefaultTerm}} {
		if !hasEnv(env, d[0]) {
			out = append(out, d[0]+"="+d[1])
		}
	}
	return out
}

func hasEnv(env []string, key string) bool {
	for _, kv := range env {
		if k, _, _ := strings.Cut(kv, "="); k == key {
			return true
		}
	}
	return false
}

// FromRequest turns an API request into a normalized spec: body becomes
// ShellArgv(body), timeout_ms a Timeout, dir a path relative to /workspace
// by wire.WorkspacePath (a leading "/" names the workspace root; ".." may
// not climb above it), and uid and gid default to the given ids. Errors
// are ErrBadSpec and name the request's fields.
func FromRequest(req wire.ExecRequest, uid, gid int) (ExecSpec, error) {
	var bad problems
	s := ExecSpec{Argv: req.Argv, Env: req.Env, UID: uid, GID: gid,
		OutputLimit: req.OutputLimit, MemoryBytes: req.MemoryBytes, Pids: req.Pids,
		MilliCPUs: req.MilliCPUs, OpenFiles: req.OpenFiles}
	switch {
	case len(req.Argv) > 0 && req.Body != "":
		bad.add("argv", "argv and body are exclusive: give one")
	case req.Body != "":
		checkArg(&bad, "body", req.Body)
		s.Argv = ShellArgv(req.Body)
	case len(req.Argv) == 0:
		bad.add("argv", "one of argv and body is required")
	}
	if req.TimeoutMs < 0 || req.TimeoutMs > MaxTimeout.Milliseconds() {
		bad.add("timeout_ms", "%d: want 0 (the default) to %d", req.TimeoutMs, MaxTimeout.Milliseconds())
	} else {
		s.Timeout = time.Duration(req.TimeoutMs) * time.Millisecond
	}
	if req.UID != nil {
		s.UID = *req.UID
	}
	if req.GID != nil {
		s.GID = *req.GID
	}
	if len(req.Dir) > MaxDirBytes {
		bad.add("dir", "is %d bytes, more than %d", len(req.Dir), MaxDirBytes)
	} else if d, err := wire.WorkspacePath(req.Dir); err != nil {
		bad.add("dir", "%q: %v", req.Dir, err)
	} else if d != "." {
		s.Dir = d
	}
	if len(req.Stdin) > 0 {
		s.Stdin = bytes.NewReader(req.Stdin)
	}
	if req.TTY != nil {
		s.Terminal = &Terminal{Rows: req.TTY.Rows, Cols: req.TTY.Cols}
	}
	if err := bad.err(); err != nil {
		return s, err
	}
	return s.Normalize()
}

// Validate checks what every platform needs of a workspace to attach it:
// an ID safe in names (1-63 of [a-z0-9-], as container and cgroup names
// take it), HostPath an existing directory named by a clean absolute path,
// and RootDir, when set, the same. Errors are ErrBadSpec.
func (w Workspace) Validate() error {
	var bad problems
	if !workspaceRE.MatchString(w.ID) {
		bad.add("workspace id", "%.80q: want 1-63 of [a-z0-9-], starting with a letter or digit", w.ID)
	}
	checkHostDir(&bad, "host path", w.HostPath)
	if w.RootDir != "" {
		checkHostDir(&bad, "root dir", w.RootDir)
	}
	return bad.err()
}

func checkHostDir(bad *problems, field, p string) {
	switch {
	case p == "":
		bad.add(field, "is required")
		return
	case strings.ContainsRune(p, 0):
		bad.add(field, "contains a NUL byte")
		return
	case !filepath.IsAbs(p):
		bad.add(field, "%q is not an absolute path", p)
		return
	case filepath.Clean(p) != p || hasDotDot(p):
		bad.add(field, "%q is not clean (want %q)", p, filepath.Clean(p))
		return
	}
	if fi, err := os.Stat(p); err != nil {
		bad.add(field, "%v", err)
	} else if !fi.IsDir() {
		bad.add(field, "%q is not a directory", p)
	}
}
