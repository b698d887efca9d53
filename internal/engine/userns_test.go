package engine_test

import (
	"archive/tar"
	"bytes"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"layerfs.dev/layerfs/internal/engine"
	"layerfs.dev/layerfs/internal/platforms/docker"
	"layerfs.dev/layerfs/internal/platforms/local"
	"layerfs.dev/layerfs/internal/testenv"
	"layerfs.dev/layerfs/wire"
)

// TestUserNamespaceOwnership: a command's root is an unprivileged host uid,
// and what it creates is owned as it would be without a user namespace once
// committed and checked out: root's files by 0, a chown to 1000 by 1000.
// The FUSE data path id-maps the workspace mount (on local; docker's
// commands then run in the host's namespace: a FUSE mount cannot be
// id-mapped); the overlay data path is mounted over id-mapped layers.
func TestUserNamespaceOwnership(t *testing.T) {
	onBothPaths(t, func(t *testing.T, path string) {
		e, _ := newEngineOn(t, path)
		testUserNamespaceOwnership(t, e)
	})
	t.Run("docker", func(t *testing.T) {
		testenv.RequireDocker(t)
		e, _ := newEngineWith(t, wire.DataPathOverlay, docker.New(docker.Options{}))
		testUserNamespaceOwnership(t, e)
	})
}

func testUserNamespaceOwnership(t *testing.T, e *engine.Engine) {
	ctx := t.Context()
	_, err := e.CreateProject(ctx, wire.CreateProject{Name: "p"})
	require.NoError(t, err)
	ws, err := e.CreateWorkspace(ctx, wire.WorkspaceSpec{Project: "p", Branch: "main"})
	require.NoError(t, err)
	out, res := run(t, e, ws.ID, "echo r > r && mkdir -m 0777 d && stat -c %u:%g r d")
	if strings.HasPrefix(res.Receipt.UserNamespace, "none: ") {
		testenv.Skip(t, "no user namespace on this host: "+res.Receipt.UserNamespace)
	}
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
