package engine_test

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"io"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"layerfs.dev/layerfs/internal/engine"
	"layerfs.dev/layerfs/internal/platforms"
	"layerfs.dev/layerfs/internal/platforms/docker"
	"layerfs.dev/layerfs/internal/platforms/local"
	"layerfs.dev/layerfs/internal/testenv"
	"layerfs.dev/layerfs/wire"
	"layerfs.dev/layerfs/wire/errclass"
)

// TestUserNamespaceOwnership: a command's root is an unprivileged host uid,
// and what it creates is owned as it would be without a user namespace once
// committed and checked out: root's files by 0, a chown to 1000 by 1000.
// The FUSE data path id-maps the workspace mount (FUSE_ALLOW_IDMAP); the
// overlay data path is mounted over id-mapped layers. Both, on local and
// on docker.
func TestUserNamespaceOwnership(t *testing.T) {
	onBothPaths(t, func(t *testing.T, path string) {
		e, _ := newEngineOn(t, path)
		testUserNamespaceOwnership(t, e)
	})
	t.Run("docker", func(t *testing.T) {
		testenv.RequireDocker(t)
		onBothPaths(t, func(t *testing.T, path string) {
			e, _ := newEngineWith(t, path, docker.New(docker.Options{}))
			testUserNamespaceOwnership(t, e)
		})
	})
}

func testUserNamespaceOwnership(t *testing.T, e *engine.Engine) {
	ctx := t.Context()
	_, err := e.CreateProject(ctx, wire.CreateProject{Name: "p"})
	require.NoError(t, err)
	ws, err := e.CreateWorkspace(ctx, wire.WorkspaceSpec{Project: "p", Branch: "main"})
	require.NoError(t, err)
	out, res := run(t, e, ws.ID, "echo r > r && mkdir -m 0777 d && stat -c %u:%g r d")
	if want := local.DefaultIDRange(nil).String(); res.Receipt.UserNamespace != want {
		t.Errorf("receipt's user namespace %q, want %q", res.Receipt.UserNamespace, want)
	}
	if out != "0:0\n0:0\n" {
		t.Errorf("owners inside: %q", out)
	}
	// What the daemon writes is root's, in the sandbox and on disk; what
	// it reads reports the ids on disk.
	require.NoError(t, e.WriteFile(ctx, ws.ID, "api", 0o644, strings.NewReader("a\n")))
	if out, _ := run(t, e, ws.ID, "stat -c %u:%g api"); out != "0:0\n" {
		t.Errorf("a file the daemon wrote is %q inside, want 0:0", out)
	}
	var tarball bytes.Buffer
	require.NoError(t, e.GetTar(ctx, ws.ID, "r", &tarball))
	h, err := tar.NewReader(&tarball).Next()
	require.NoError(t, err, "tar of r")
	if h.Uid != 0 || h.Gid != 0 {
		t.Errorf("tar of r: owner %d:%d, want 0:0", h.Uid, h.Gid)
	}
	uid := 1000
	var o, errb bytes.Buffer
	if r, err := e.Exec(ctx, ws.ID, wire.ExecRequest{Body: "echo u > d/u", UID: &uid, GID: &uid}, &o, &errb); err != nil || r.ExitCode != 0 {
		t.Fatalf("exec as 1000: %v, exit %d, %s", err, r.ExitCode, errb.String())
	}
	// Root in its namespace has CAP_CHOWN over the namespace's ids
	// (without one it has no capabilities at all).
	run(t, e, ws.ID, "echo c > c && chown 1000:1000 c")
	_, err = e.CommitWorkspace(ctx, ws.ID, wire.CommitRequest{Message: "owners"})
	require.NoError(t, err)
	again, err := e.CreateWorkspace(ctx, wire.WorkspaceSpec{Project: "p", Branch: "main"})
	require.NoError(t, err)
	if out, _ := run(t, e, again.ID, "stat -c %u:%g r d d/u c api"); out != "0:0\n0:0\n1000:1000\n1000:1000\n0:0\n" {
		t.Errorf("owners after commit and checkout: %q", out)
	}
}

// TestExecHeldToIsolation: an exec whose result says it ran outside the
// user namespace its platform gives is an error, not a note in a receipt.
// The platform here is local with its results rewritten, the one way to
// make a sandbox report less than its platform promised.
func TestExecHeldToIsolation(t *testing.T) {
	e, _ := newEngineWith(t, wire.DataPathOverlay, &lessIsolated{Platform: local.New(local.Options{})})
	ctx := t.Context()
	_, err := e.CreateProject(ctx, wire.CreateProject{Name: "p"})
	require.NoError(t, err)
	ws, err := e.CreateWorkspace(ctx, wire.WorkspaceSpec{Project: "p", Branch: "main"})
	require.NoError(t, err)
	_, err = e.Exec(ctx, ws.ID, wire.ExecRequest{Body: "true"}, io.Discard, io.Discard)
	if !errors.Is(err, errclass.Internal) || !strings.Contains(err.Error(), `ran in user namespace "none: in the host's"`) {
		t.Fatalf("exec: %v, want an internal error naming the user namespace it ran in", err)
	}
	iso, err := e.Isolation(ctx)
	require.NoError(t, err)
	if len(iso) != 1 || iso[0].UserNamespace != local.DefaultIDRange(nil).String() {
		t.Errorf("isolation %+v", iso)
	}
}

// lessIsolated is the local platform whose sandboxes report that they ran
// in the host's user namespace.
type lessIsolated struct{ *local.Platform }

func (p *lessIsolated) Attach(ctx context.Context, w platforms.Workspace) (platforms.Sandbox, error) {
	sb, err := p.Platform.Attach(ctx, w)
	return lessIsolatedSandbox{sb}, err
}

type lessIsolatedSandbox struct{ platforms.Sandbox }

func (s lessIsolatedSandbox) Exec(ctx context.Context, spec platforms.ExecSpec, stdout, stderr io.Writer) (platforms.ExecResult, error) {
	res, err := s.Sandbox.Exec(ctx, spec, stdout, stderr)
	res.UserNamespace = "none: in the host's"
	return res, err
}
