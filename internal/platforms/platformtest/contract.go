package platformtest

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"layerfs.dev/layerfs/internal/platforms"
	"layerfs.dev/layerfs/wire"
	"layerfs.dev/layerfs/wire/errclass"
)

// ranMarker is what the command of every bad case would create in the
// workspace had it run.
const ranMarker = "bad-spec-ran"

// markArgv is the command of every bad case: it leaves ranMarker behind.
func markArgv() []string { return []string{"touch", "/workspace/" + ranMarker} }

// BadSpec is an exec every platform refuses with platforms.ErrBadSpec,
// starting nothing, and whose error names Field.
type BadSpec struct {
	Name, Field string
	Spec        platforms.ExecSpec
}

// BadSpecs are the exec contract's refusals, one case per rule of
// platforms.ExecSpec.Normalize: a working directory outside the
// workspace, ".." in the one field that names a path, bad environment
// entries, NUL bytes, negative limits and values past every bound.
func BadSpecs() []BadSpec {
	with := func(f func(*platforms.ExecSpec)) platforms.ExecSpec {
		s := platforms.ExecSpec{Argv: markArgv()}
		f(&s)
		return s
	}
	huge := strings.Repeat("x", platforms.MaxArgBytes+1)
	half := strings.Repeat("x", platforms.MaxArgBytes-16)
	many := make([]string, 0, 9)
	for range 9 {
		many = append(many, "K="+half)
	}
	return []BadSpec{
		{"no argv", "argv", platforms.ExecSpec{}},
		{"empty argv[0]", "argv", platforms.ExecSpec{Argv: []string{"", "x"}}},
		{"NUL in argv", "argv[2]", with(func(s *platforms.ExecSpec) { s.Argv = append(s.Argv, "a\x00b") })},
		{"huge argv string", "argv[2]", with(func(s *platforms.ExecSpec) { s.Argv = append(s.Argv, huge) })},
		{"huge env together", "argv", with(func(s *platforms.ExecSpec) { s.Env = many })},
		{"absolute dir", "dir", with(func(s *platforms.ExecSpec) { s.Dir = "/etc" })},
		{"dir is ..", "dir", with(func(s *platforms.ExecSpec) { s.Dir = ".." })},
		{"dir climbs out", "dir", with(func(s *platforms.ExecSpec) { s.Dir = "a/../../etc" })},
		{"dir with .. inside", "dir", with(func(s *platforms.ExecSpec) { s.Dir = "a/../b" })},
		{"dir ends in ..", "dir", with(func(s *platforms.ExecSpec) { s.Dir = "a/.." })},
		{"NUL in dir", "dir", with(func(s *platforms.ExecSpec) { s.Dir = "a\x00b" })},
		{"huge dir", "dir", with(func(s *platforms.ExecSpec) { s.Dir = strings.Repeat("d/", platforms.MaxDirBytes) })},
		{"env without =", "env[0]", with(func(s *platforms.ExecSpec) { s.Env = []string{"NOEQUALS"} })},
		{"env empty key", "env[0]", with(func(s *platforms.ExecSpec) { s.Env = []string{"=v"} })},
		{"env key with a digit first", "env[1]", with(func(s *platforms.ExecSpec) { s.Env = []string{"OK=1", "1A=x"} })},
		{"env key with a space", "env[0]", with(func(s *platforms.ExecSpec) { s.Env = []string{"A B=x"} })},
		{"env key with a dash", "env[0]", with(func(s *platforms.ExecSpec) { s.Env = []string{"A-B=x"} })},
		{"env key with NUL", "env[0]", with(func(s *platforms.ExecSpec) { s.Env = []string{"A\x00B=x"} })},
		{"env value with NUL", "env[0]", with(func(s *platforms.ExecSpec) { s.Env = []string{"A=x\x00y"} })},
		{"huge env value", "env[0]", with(func(s *platforms.ExecSpec) { s.Env = []string{"A=" + huge} })},
		{"negative timeout", "timeout", with(func(s *platforms.ExecSpec) { s.Timeout = -time.Second })},
		{"huge timeout", "timeout", with(func(s *platforms.ExecSpec) { s.Timeout = platforms.MaxTimeout + time.Second })},
		{"negative output limit", "output_limit", with(func(s *platforms.ExecSpec) { s.OutputLimit = -1 })},
		{"negative memory", "memory_bytes", with(func(s *platforms.ExecSpec) { s.MemoryBytes = -1 })},
		{"huge memory", "memory_bytes", with(func(s *platforms.ExecSpec) { s.MemoryBytes = platforms.MaxMemoryBytes + 1 })},
		{"negative pids", "pids", with(func(s *platforms.ExecSpec) { s.Pids = -1 })},
		{"huge pids", "pids", with(func(s *platforms.ExecSpec) { s.Pids = platforms.MaxPids + 1 })},
		{"negative CPU", "milli_cpus", with(func(s *platforms.ExecSpec) { s.MilliCPUs = -1 })},
		{"huge CPU", "milli_cpus", with(func(s *platforms.ExecSpec) { s.MilliCPUs = platforms.MaxMilliCPUs + 1 })},
		{"negative open files", "open_files", with(func(s *platforms.ExecSpec) { s.OpenFiles = -1 })},
		{"huge open files", "open_files", with(func(s *platforms.ExecSpec) { s.OpenFiles = platforms.MaxOpenFiles + 1 })},
		{"negative uid", "uid", with(func(s *platforms.ExecSpec) { s.UID = -1 })},
		{"huge uid", "uid", with(func(s *platforms.ExecSpec) { s.UID = platforms.MaxID + 1 })},
		{"negative gid", "gid", with(func(s *platforms.ExecSpec) { s.GID = -1 })},
		{"bad hostname", "hostname", with(func(s *platforms.ExecSpec) { s.Hostname = "a/b" })},
		{"huge hostname", "hostname", with(func(s *platforms.ExecSpec) { s.Hostname = strings.Repeat("h", platforms.MaxHostname+1) })},
	}
}

// BadRequest is an API exec request the daemon refuses as invalid, on
// every platform, naming Field.
type BadRequest struct {
	Name, Field string
	Req         wire.ExecRequest
}

// BadRequests are the refusals of the request form (wire.ExecRequest),
// checked by platforms.FromRequest before a platform sees a spec.
func BadRequests() []BadRequest {
	neg := -1
	with := func(f func(*wire.ExecRequest)) wire.ExecRequest {
		r := wire.ExecRequest{Argv: markArgv()}
		f(&r)
		return r
	}
	return []BadRequest{
		{"nothing to run", "argv", wire.ExecRequest{}},
		{"argv and body", "argv", with(func(r *wire.ExecRequest) { r.Body = "true" })},
		{"NUL in body", "body", wire.ExecRequest{Body: "touch /workspace/" + ranMarker + "\x00"}},
		{"negative timeout_ms", "timeout_ms", with(func(r *wire.ExecRequest) { r.TimeoutMs = -5 })},
		{"huge timeout_ms", "timeout_ms", with(func(r *wire.ExecRequest) { r.TimeoutMs = platforms.MaxTimeout.Milliseconds() + 1 })},
		{"dir above the root", "dir", with(func(r *wire.ExecRequest) { r.Dir = "../.." })},
		{"dir climbing from /", "dir", with(func(r *wire.ExecRequest) { r.Dir = "/../etc" })},
		{"huge dir", "dir", with(func(r *wire.ExecRequest) { r.Dir = strings.Repeat("d/", platforms.MaxDirBytes) })},
		{"env without =", "env[0]", with(func(r *wire.ExecRequest) { r.Env = []string{"NOEQUALS"} })},
		{"env key with a dash", "env[0]", with(func(r *wire.ExecRequest) { r.Env = []string{"A-B=x"} })},
		{"negative uid", "uid", with(func(r *wire.ExecRequest) { r.UID = &neg })},
		{"negative gid", "gid", with(func(r *wire.ExecRequest) { r.GID = &neg })},
		{"huge pids", "pids", with(func(r *wire.ExecRequest) { r.Pids = platforms.MaxPids + 1 })},
		{"negative memory", "memory_bytes", with(func(r *wire.ExecRequest) { r.MemoryBytes = -1 })},
	}
}

// CheckRefusal fails t unless err is the exec contract's refusal of a
// case whose bad field is field.
func CheckRefusal(t *testing.T, name, field string, err error) {
	t.Helper()
	switch {
	case err == nil:
		t.Errorf("%s: accepted, want platforms.ErrBadSpec", name)
	case !errors.Is(err, platforms.ErrBadSpec) || !errors.Is(err, errclass.Invalid):
		t.Errorf("%s: %v, want platforms.ErrBadSpec (errclass.Invalid)", name, err)
	case !strings.Contains(err.Error(), field+":"):
		t.Errorf("%s: %v, want the error to name %s", name, err, field)
	}
}

// testContract: every BadSpec is refused before anything runs, a
// workspace with ".." in a path is not attached, and a normalized spec
// runs as it is.
func testContract(t *testing.T, e *env) {
	for _, bad := range BadSpecs() {
		_, err := e.sb.Exec(ctxFor(t, execTimeout), bad.Spec, nil, nil)
		CheckRefusal(t, bad.Name, bad.Field, err)
	}
	if _, err := os.Stat(filepath.Join(e.ws, ranMarker)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a refused exec ran (%s in the workspace: %v)", ranMarker, err)
	}
	ws := e.newWorkspace(t)
	for _, bad := range []struct {
		name, field string
		w           platforms.Workspace
	}{
		{"bad id", "workspace id", platforms.Workspace{ID: "Bad_ID", HostPath: ws}},
		{"relative host path", "host path", platforms.Workspace{ID: workspaceID(), HostPath: "relative"}},
		{".. in host path", "host path", platforms.Workspace{ID: workspaceID(), HostPath: ws + "/../" + filepath.Base(ws)}},
		{"missing host path", "host path", platforms.Workspace{ID: workspaceID(), HostPath: filepath.Join(ws, "missing")}},
		{".. in root dir", "root dir", platforms.Workspace{ID: workspaceID(), HostPath: ws, RootDir: "/usr/../usr"}},
		{"relative root dir", "root dir", platforms.Workspace{ID: workspaceID(), HostPath: ws, RootDir: "usr"}},
	} {
		sb, err := e.sh.Attach(ctxFor(t, upTimeout), bad.w)
		if err == nil {
			_ = sb.Close(context.Background())
		}
		CheckRefusal(t, "Attach with "+bad.name, bad.field, err)
	}
	spec, err := platforms.ExecSpec{Argv: platforms.ShellArgv(`echo "$PATH|$HOME|$TERM"; pwd`), Dir: "."}.Normalize()
	if err != nil {
		t.Fatalf("Normalize: %v", err)
	}
	_, out, _ := e.exec(t, spec)
	if want := platforms.DefaultPath + "|" + platforms.DefaultHome + "|" + platforms.DefaultTerm + "\n/workspace\n"; out != want {
		t.Errorf("a normalized spec printed %q, want %q", out, want)
	}
}
