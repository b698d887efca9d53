package apitest

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"layerfs.dev/layerfs/internal/api"
	"layerfs.dev/layerfs/wire"
)

// Target is an implementation under test.
type Target struct {
	// Engine serves every service; the suite makes projects of its own in
	// it and ends the workspaces it made.
	Engine api.Engine
	// Misdirect, when set, returns a workspace that another host of the
	// engine's fleet serves, and that host as the engine must name it
	// (Seen is not compared); the suite then checks the misdirected answer
	// of every call on it. Nil skips those checks (an embedded Store has
	// one host).
	Misdirect func(t *testing.T) (id string, host wire.Node)
}

// check is one check of the suite.
type check struct {
	name string
	run  func(f *fixture)
}

// Run runs every check of the suite against tg, each as a subtest.
func Run(t *testing.T, tg Target) {
	var checks []check
	for _, group := range [][]check{historyChecks, workspaceChecks, mergeChecks, execChecks, serviceChecks, portChecks, fileChecks, watchChecks, storeChecks} {
		checks = append(checks, group...)
	}
	for _, c := range checks {
		t.Run(c.name, func(t *testing.T) { c.run(&fixture{t: t, eng: tg.Engine, ctx: t.Context()}) })
	}
	t.Run("Misdirected", func(t *testing.T) {
		if tg.Misdirect == nil {
			t.Skip("the target has no other host")
		}
		id, host := tg.Misdirect(t)
		checkMisdirected(&fixture{t: t, eng: tg.Engine, ctx: t.Context()}, id, host)
	})
}

// fixture is what a check works with: the engine under test and the steps
// checks repeat, each failing the check on an error.
type fixture struct {
	t   *testing.T
	eng api.Engine
	ctx context.Context
}

// project makes a project of the check's own, with a name no other check
// or run of the suite uses.
func (f *fixture) project() string {
	f.t.Helper()
	b := make([]byte, 4)
	rand.Read(b)
	name := "contract-" + strings.ToLower(strings.NewReplacer("/", "-", "_", "-").Replace(f.t.Name()))
	name = name[:min(len(name), 48)] + "-" + hex.EncodeToString(b)
	p, err := f.eng.CreateProject(f.ctx, wire.CreateProject{Name: name})
	require.NoError(f.t, err, "create project %s", name)
	require.Equal(f.t, name, p.Name)
	return name
}

// workspace makes a workspace on branch of project, ended (its changes
// discarded) when the check ends.
func (f *fixture) workspace(project, branch string) wire.Workspace {
	f.t.Helper()
	return f.workspaceWith(wire.WorkspaceSpec{Project: project, Branch: branch})
}

// workspaceWith makes a workspace from spec, ended when the check ends.
func (f *fixture) workspaceWith(spec wire.WorkspaceSpec) wire.Workspace {
	f.t.Helper()
	ws, err := f.eng.CreateWorkspace(f.ctx, spec)
	require.NoError(f.t, err, "create workspace %+v", spec)
	f.t.Cleanup(func() { f.eng.EndWorkspace(context.Background(), ws.ID, true) })
	return ws
}

// write writes a file of workspace id with mode 0644.
func (f *fixture) write(id, path, data string) {
	f.t.Helper()
	require.NoError(f.t, f.eng.WriteFile(f.ctx, id, path, 0o644, strings.NewReader(data)), "write %s", path)
}

// read reads a file of workspace id.
func (f *fixture) read(id, path string) string {
	f.t.Helper()
	var buf bytes.Buffer
	n, err := f.eng.ReadFile(f.ctx, id, path, &buf)
	require.NoError(f.t, err, "read %s", path)
	require.Equal(f.t, int64(buf.Len()), n, "read %s: the size reported", path)
	return buf.String()
}

// sh runs body in workspace id and returns its stdout; a non-zero exit
// fails the check.
func (f *fixture) sh(id, body string) string {
	f.t.Helper()
	var out, errb bytes.Buffer
	res, err := f.eng.Exec(f.ctx, id, wire.ExecRequest{Body: body}, &out, &errb)
	require.NoError(f.t, err, "exec %q", body)
	require.Equal(f.t, 0, res.ExitCode, "exec %q: stderr %q", body, errb.String())
	return out.String()
}

// head is the head of a branch.
func (f *fixture) head(project, branch string) string {
	f.t.Helper()
	b, err := f.eng.Branch(f.ctx, project, branch)
	require.NoError(f.t, err, "branch %s", branch)
	return b.Head
}

// isClass checks that err is of the error class class.
func (f *fixture) isClass(err, class error, what string) {
	f.t.Helper()
	if !errors.Is(err, class) {
		f.t.Errorf("%s: %v, want the class %v", what, err, class)
	}
}
