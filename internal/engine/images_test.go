package engine_test

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"layerfs.dev/layerfs/internal/engine"
	"layerfs.dev/layerfs/internal/enginetest"
	"layerfs.dev/layerfs/internal/image"
	"layerfs.dev/layerfs/internal/platforms"
	"layerfs.dev/layerfs/internal/platforms/local"
	"layerfs.dev/layerfs/internal/store"
	"layerfs.dev/layerfs/wire"
	"layerfs.dev/layerfs/wire/errclass"
)

// importMinimal imports minimalRoot as "base" and makes "app" of it with
// a config that names WorkingDir /srv, User app and an Env.
func importMinimal(t *testing.T, e *engine.Engine, db *store.DB) wire.Image {
	t.Helper()
	ctx := t.Context()
	_, err := e.ImportImage(ctx, wire.ImageImport{Name: "base", Kind: wire.ImageFromDir, Source: enginetest.MinimalRoot(t)})
	require.NoError(t, err)
	base, err := db.Image(ctx, "base")
	require.NoError(t, err)
	b, err := image.NewBuilder(ctx, db, &base)
	require.NoError(t, err)
	b.Config.Config.WorkingDir, b.Config.Config.User = "/srv", "app"
	b.Config.Config.Env = append(b.Config.Config.Env, "GREETING=hello")
	b.Note("config")
	_, err = b.Name(ctx, "team/app:1", "test")
	require.NoError(t, err)
	img, err := e.Image(ctx, "team/app:1")
	require.NoError(t, err)
	return img
}

// TestWorkspaceOnImage: every exec's root is the image's tree with the
// image's Env, WorkingDir and User as defaults; /workspace is the
// project's; the root is the workspace's own copy-on-write, kept across
// execs and remounts and apart from other workspaces; its changes become
// a new image; receipts and the workspace name the image's digest.
func TestWorkspaceOnImage(t *testing.T) {
	e, db := newEngine(t)
	ctx := t.Context()
	img := importMinimal(t, e, db)
	_, err := e.CreateProject(ctx, wire.CreateProject{Name: "p"})
	require.NoError(t, err)

	_, err = e.CreateWorkspace(ctx, wire.WorkspaceSpec{Project: "p", Branch: "main", Image: "missing"})
	require.ErrorIs(t, err, errclass.NotFound)
	_, err = e.CreateWorkspace(ctx, wire.WorkspaceSpec{Project: "p", Branch: "main", Image: "team/app:1@sha256:" + strings.Repeat("0", 64)})
	require.ErrorIs(t, err, errclass.NotFound, "a pinned digest the image does not have")

	ws, err := e.CreateWorkspace(ctx, wire.WorkspaceSpec{Project: "p", Branch: "main", Image: "team/app:1@" + img.Digest})
	require.NoError(t, err)
	require.Equal(t, "team/app:1@"+img.Digest, ws.Image)

	out, res := run(t, e, ws.ID, "cat /etc/os-release; pwd; id -u; id -g; echo $GREETING $HOME; ls /")
	require.Equal(t, "ID=minimal\n/srv\n1000\n1000\nhello /home/app\nbin\ndev\netc\nhome\nlib\nlib64\nproc\nroot\nsrv\nsys\ntmp\nusr\nvar\nworkspace\n", out)
	require.Equal(t, ws.Image, res.Receipt.Image, "the receipt names the image")

	// The root is writable (as root) and kept for the workspace's life;
	// /workspace is the project's.
	var o, eb bytes.Buffer
	zero := 0
	r, err := e.Exec(ctx, ws.ID, wire.ExecRequest{Body: "mkdir -p /usr/local/tool && echo v1 > /usr/local/tool/v && echo w > /workspace/f && stat -c %u /usr/local/tool/v",
		UID: &zero, GID: &zero}, &o, &eb)
	require.NoError(t, err)
	require.Zero(t, r.ExitCode, "stderr %q", eb.String())
	require.Equal(t, "0\n", o.String())
	out, _ = run(t, e, ws.ID, "cat /usr/local/tool/v; cat /workspace/f; { echo x > /usr/bin/cat; } 2>/dev/null || echo refused")
	require.Equal(t, "v1\nw\nrefused\n", out, "app cannot write root's files")

	st, err := e.WorkspaceStatus(ctx, ws.ID)
	require.NoError(t, err)
	require.Equal(t, ws.Image, st.Image)
	require.Len(t, st.Changes, 1, "only /workspace/f is a change of the project: %+v", st.Changes)

	// Another workspace on the image sees none of it.
	ws2, err := e.CreateWorkspace(ctx, wire.WorkspaceSpec{Project: "p", Branch: "main", Image: "team/app:1"})
	require.NoError(t, err)
	out, _ = run(t, e, ws2.ID, "[ -e /usr/local/tool ] && echo yes || echo no")
	require.Equal(t, "no\n", out)

	// A remount (a daemon restart) keeps the root's changes.
	require.NoError(t, e.Shutdown(ctx))
	plat := local.New(local.Options{})
	require.NoError(t, plat.Up(ctx))
	t.Cleanup(func() { plat.Down(context.Background()) })
	e2, err := engine.New(ctx, engine.Config{Store: db, Platforms: []platforms.Platform{plat}})
	require.NoError(t, err)
	require.NoError(t, e2.Recover(ctx))
	t.Cleanup(func() { e2.Shutdown(context.Background()) })
	out, _ = run(t, e2, ws.ID, "cat /usr/local/tool/v")
	require.Equal(t, "v1\n", out)

	// The root's changes as a new image on the old one.
	res2, err := e2.CommitImage(ctx, ws.ID, wire.ImageCommit{Name: "team/app:2"})
	require.NoError(t, err)
	require.Len(t, res2.Image.Layers, len(img.Layers)+1)
	require.NotEqual(t, img.Digest, res2.Image.Digest)
	require.Equal(t, "/srv", res2.Image.Config.WorkingDir, "the config goes on")
	ws3, err := e2.CreateWorkspace(ctx, wire.WorkspaceSpec{Project: "p", Branch: "main", Image: "team/app:2"})
	require.NoError(t, err)
	out, _ = run(t, e2, ws3.ID, "cat /usr/local/tool/v")
	require.Equal(t, "v1\n", out)

	// A project's default image.
	_, err = e2.SetProjectImage(ctx, "p", wire.ProjectImage{Image: "nope"})
	require.ErrorIs(t, err, errclass.NotFound)
	p, err := e2.SetProjectImage(ctx, "p", wire.ProjectImage{Image: "team/app:2"})
	require.NoError(t, err)
	require.Equal(t, "team/app:2", p.Image)
	ws4, err := e2.CreateWorkspace(ctx, wire.WorkspaceSpec{Project: "p", Branch: "main"})
	require.NoError(t, err)
	require.Equal(t, "team/app:2@"+res2.Image.Digest, ws4.Image)

	// Removing an image leaves the workspaces on it working.
	require.NoError(t, e2.RemoveImage(ctx, "team/app:2"))
	out, _ = run(t, e2, ws3.ID, "cat /usr/local/tool/v")
	require.Equal(t, "v1\n", out)
	for _, id := range []string{ws.ID, ws2.ID, ws3.ID, ws4.ID} {
		require.NoError(t, e2.EndWorkspace(ctx, id, true))
	}
	_, err = e2.GC(ctx, wire.GCRequest{})
	require.NoError(t, err)
	imgs, err := e2.Images(ctx)
	require.NoError(t, err)
	require.Len(t, imgs, 2, "base and team/app:1")
}
