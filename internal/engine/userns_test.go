package engine_test

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"layerfs.dev/layerfs/internal/platforms/local"
	"layerfs.dev/layerfs/wire"
)

// TestUserNamespaceOwnership: a command's root is an unprivileged host uid,
// and what it creates is owned as it would be without a user namespace once
// committed and checked out: root's files by 0, a chown to 1000 by 1000.
// The FUSE data path id-maps the workspace; kernel overlayfs cannot be, so
// its execs run in the host's user namespace and the receipt says so.
func TestUserNamespaceOwnership(t *testing.T) { onBothPaths(t, testUserNamespaceOwnership) }

func testUserNamespaceOwnership(t *testing.T, path string) {
	e, _ := newEngineOn(t, path)
	ctx := context.Background()
	if _, err := e.CreateProject(ctx, wire.CreateProject{Name: "p"}); err != nil {
		t.Fatal(err)
	}
	ws, err := e.CreateWorkspace(ctx, wire.WorkspaceSpec{Project: "p", Branch: "main"})
	if err != nil {
		t.Fatal(err)
	}
	out, res := run(t, e, ws.ID, "echo r > r && mkdir -m 0777 d && stat -c %u:%g r d")
	if out != "0:0\n0:0\n" {
		t.Errorf("owners inside: %q", out)
	}
	want, check, owners := local.DefaultIDRange(nil).String(), "r d d/u c", "0:0\n0:0\n1000:1000\n1000:1000\n"
	if path == wire.DataPathOverlay {
		want = "none: the workspace cannot be id-mapped (kernel overlayfs"
		check, owners = "r d d/u", "0:0\n0:0\n1000:1000\n"
	}
	if !strings.HasPrefix(res.Receipt.UserNamespace, want) {
		t.Errorf("receipt's user namespace %q, want %q", res.Receipt.UserNamespace, want)
	}
	uid := 1000
	var o, errb bytes.Buffer
	if r, err := e.Exec(ctx, ws.ID, wire.ExecRequest{Body: "echo u > d/u", UID: &uid, GID: &uid}, &o, &errb); err != nil || r.ExitCode != 0 {
		t.Fatalf("exec as 1000: %v, exit %d, %s", err, r.ExitCode, errb.String())
	}
	if path != wire.DataPathOverlay {
		// Root in its namespace has CAP_CHOWN over the namespace's ids
		// (without one it has no capabilities at all).
		run(t, e, ws.ID, "echo c > c && chown 1000:1000 c")
	}
	if _, err := e.CommitWorkspace(ctx, ws.ID, wire.CommitRequest{Message: "owners"}); err != nil {
		t.Fatal(err)
	}
	again, err := e.CreateWorkspace(ctx, wire.WorkspaceSpec{Project: "p", Branch: "main"})
	if err != nil {
		t.Fatal(err)
	}
	if out, _ := run(t, e, again.ID, "stat -c %u:%g "+check); out != owners {
		t.Errorf("owners after commit and checkout: %q", out)
	}
}
