package engine_test

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"layerfs.dev/layerfs/internal/engine"
	"layerfs.dev/layerfs/internal/enginetest"
	"layerfs.dev/layerfs/internal/image"
	"layerfs.dev/layerfs/internal/mountinfo"
	"layerfs.dev/layerfs/internal/platforms"
	"layerfs.dev/layerfs/internal/platforms/docker"
	"layerfs.dev/layerfs/internal/platforms/local"
	"layerfs.dev/layerfs/internal/store"
	"layerfs.dev/layerfs/internal/testenv"
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
	// The two roots lie on one shared lower: one FUSE view of the image.
	ms, err := mountinfo.Read(mountinfo.Self)
	require.NoError(t, err)
	views := 0
	for _, m := range ms {
		if strings.Contains(m.Dir, "/.roots/") && strings.HasPrefix(m.FSType, "fuse") {
			views++
		}
	}
	require.Equal(t, 1, views, "views of the image's tree")
	// Roots are made ahead for the next workspaces on the image.
	pooled := func() int {
		ms, err := mountinfo.Read(mountinfo.Self)
		require.NoError(t, err)
		n := 0
		for _, m := range ms {
			if strings.Contains(m.Dir, "/.roots/pool/") {
				n++
			}
		}
		return n
	}
	require.Eventually(t, func() bool { return pooled() == 2 }, 10*time.Second, 10*time.Millisecond, "roots made ahead")

	// A remount (a daemon restart) keeps the root's changes; the pool's
	// roots go with the daemon, and what a dead one left of them goes
	// when the next starts.
	require.NoError(t, e.Shutdown(ctx))
	require.Zero(t, pooled(), "roots made ahead after shutdown")
	stale := filepath.Join(db.WorkspacesDir(), ".roots", "pool", "root-stale", "mnt")
	require.NoError(t, os.MkdirAll(stale, 0o755))
	require.NoError(t, unix.Mount("tmpfs", stale, "tmpfs", 0, "size=1m"))
	plat := local.New(local.Options{})
	require.NoError(t, plat.Up(ctx))
	t.Cleanup(func() { plat.Down(context.Background()) })
	e2, err := engine.New(ctx, engine.Config{Store: db, Platforms: []platforms.Platform{plat}})
	require.NoError(t, err)
	require.NoError(t, e2.Recover(ctx))
	t.Cleanup(func() { e2.Shutdown(context.Background()) })
	_, err = os.Stat(filepath.Dir(stale))
	require.ErrorIs(t, err, os.ErrNotExist, "a dead daemon's pool is cleaned")
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

// TestForkOnImage: a fork's root holds what its source's root held when
// it was forked (a deletion of an image's file included), apart from the
// source's later writes, across a daemon restart and a GC; the fork's
// image commit holds what it inherited and what it wrote.
func TestForkOnImage(t *testing.T) {
	e, db := newEngine(t)
	ctx := t.Context()
	importMinimal(t, e, db)
	_, err := e.CreateProject(ctx, wire.CreateProject{Name: "p"})
	require.NoError(t, err)
	ws, err := e.CreateWorkspace(ctx, wire.WorkspaceSpec{Project: "p", Branch: "main", Image: "team/app:1"})
	require.NoError(t, err)
	zero := 0
	asRoot := func(e *engine.Engine, id, body string) {
		t.Helper()
		var o, eb bytes.Buffer
		r, err := e.Exec(ctx, id, wire.ExecRequest{Body: body, UID: &zero, GID: &zero}, &o, &eb)
		require.NoError(t, err)
		require.Zero(t, r.ExitCode, "%s: stderr %q", body, eb.String())
	}
	asRoot(e, ws.ID, "mkdir -p /usr/local/tool && echo v1 > /usr/local/tool/v && rm /etc/group")

	fr, err := e.ForkWorkspace(ctx, ws.ID, wire.ForkRequest{})
	require.NoError(t, err)
	fork := fr.Workspaces[0]
	require.Equal(t, ws.Image, fork.Image, "the fork names its source's image")
	const probe = "cat /usr/local/tool/v; [ -e /etc/group ] && echo group || echo no-group; cat /usr/local/later 2>/dev/null || echo no-later"
	out, _ := run(t, e, fork.ID, probe)
	require.Equal(t, "v1\nno-group\nno-later\n", out, "the fork's root is its source's")

	asRoot(e, ws.ID, "echo v2 > /usr/local/tool/v && echo later > /usr/local/later")
	out, _ = run(t, e, fork.ID, probe)
	require.Equal(t, "v1\nno-group\nno-later\n", out, "the source's later writes stay the source's")
	asRoot(e, fork.ID, "echo f > /usr/local/fork")
	out, _ = run(t, e, ws.ID, "cat /usr/local/tool/v; cat /usr/local/fork 2>/dev/null || echo no-fork")
	require.Equal(t, "v2\nno-fork\n", out, "the fork's writes stay the fork's")

	// The source gone, a GC run and the daemon restarted, the fork's
	// root stands.
	require.NoError(t, e.EndWorkspace(ctx, ws.ID, true))
	_, err = e.GC(ctx, wire.GCRequest{})
	require.NoError(t, err)
	require.NoError(t, e.Shutdown(ctx))
	plat := local.New(local.Options{})
	require.NoError(t, plat.Up(ctx))
	t.Cleanup(func() { plat.Down(context.Background()) })
	e2, err := engine.New(ctx, engine.Config{Store: db, Platforms: []platforms.Platform{plat}})
	require.NoError(t, err)
	require.NoError(t, e2.Recover(ctx))
	t.Cleanup(func() { e2.Shutdown(context.Background()) })
	out, _ = run(t, e2, fork.ID, probe+"; cat /usr/local/fork")
	require.Equal(t, "v1\nno-group\nno-later\nf\n", out)

	// A fork of the fork stands on both.
	fr2, err := e2.ForkWorkspace(ctx, fork.ID, wire.ForkRequest{})
	require.NoError(t, err)
	out, _ = run(t, e2, fr2.Workspaces[0].ID, probe+"; cat /usr/local/fork")
	require.Equal(t, "v1\nno-group\nno-later\nf\n", out)

	// The fork's image holds what it inherited and what it wrote.
	res, err := e2.CommitImage(ctx, fork.ID, wire.ImageCommit{Name: "team/app:fork"})
	require.NoError(t, err)
	ws3, err := e2.CreateWorkspace(ctx, wire.WorkspaceSpec{Project: "p", Branch: "main", Image: res.Image.Name})
	require.NoError(t, err)
	out, _ = run(t, e2, ws3.ID, probe+"; cat /usr/local/fork")
	require.Equal(t, "v1\nno-group\nno-later\nf\n", out)
	base, err := e2.Image(ctx, "team/app:1")
	require.NoError(t, err)
	require.Len(t, res.Image.Layers, len(base.Layers)+1, "one layer on the image")
	require.Equal(t, base.Files+1, res.Image.Files, "+tool/v +fork -group")
}

// TestBuildImage: a build file's steps make an image a workspace runs on;
// a rebuild runs nothing again, and one after an edit of the last step
// runs only it; what the build does not support, a failing RUN and a COPY
// out of the context are refused with their reason.
func TestBuildImage(t *testing.T) {
	e, db := newEngine(t)
	ctx := t.Context()
	importMinimal(t, e, db)
	bctx := t.TempDir()
	require.NoError(t, os.MkdirAll(filepath.Join(bctx, "src/lib"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(bctx, "src/main.sh"), []byte("echo main\n"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(bctx, "src/lib/util.sh"), []byte("echo util\n"), 0o644))
	file := func(last string) string {
		return "FROM base\nARG GREETING=hi\nENV APP=/srv/app\nWORKDIR $APP\nCOPY --chown=1000:1000 src/ ./\n" +
			"RUN echo \"$GREETING\" > greeting && mkdir -p /opt/tool && echo built > /opt/tool/v\nUSER app\n" + last + "\n"
	}
	res, err := e.BuildImage(ctx, wire.ImageBuild{Name: "team/built:1", File: file("RUN echo one > /home/app/last"), Context: bctx})
	require.NoError(t, err)
	require.Equal(t, "/srv/app", res.Image.Config.WorkingDir)
	require.Equal(t, "app", res.Image.Config.User)
	for _, s := range res.Steps {
		require.False(t, s.Cached, "a first build runs %s", s.Instruction)
	}
	_, err = e.CreateProject(ctx, wire.CreateProject{Name: "p"})
	require.NoError(t, err)
	ws, err := e.CreateWorkspace(ctx, wire.WorkspaceSpec{Project: "p", Branch: "main", Image: "team/built:1"})
	require.NoError(t, err)
	out, _ := run(t, e, ws.ID, "pwd; cat greeting /opt/tool/v /home/app/last; stat -c %u lib/util.sh; bash main.sh; echo $APP")
	require.Equal(t, "/srv/app\nhi\nbuilt\none\n1000\nmain\n/srv/app\n", out)

	again, err := e.BuildImage(ctx, wire.ImageBuild{Name: "team/built:1", File: file("RUN echo one > /home/app/last"), Context: bctx})
	require.NoError(t, err)
	require.Equal(t, res.Image.Digest, again.Image.Digest, "a rebuild of the same file and context is the same image")
	for _, s := range again.Steps {
		if strings.HasPrefix(s.Instruction, "RUN") || strings.HasPrefix(s.Instruction, "COPY") {
			require.True(t, s.Cached, "a rebuild reuses %s", s.Instruction)
		}
	}
	edited, err := e.BuildImage(ctx, wire.ImageBuild{Name: "team/built:2", File: file("RUN echo two > /home/app/last"), Context: bctx})
	require.NoError(t, err)
	var ran []string
	for _, s := range edited.Steps {
		if !s.Cached && (strings.HasPrefix(s.Instruction, "RUN") || strings.HasPrefix(s.Instruction, "COPY")) {
			ran = append(ran, s.Instruction)
		}
	}
	require.Equal(t, []string{"RUN echo two > /home/app/last"}, ran, "only the edited step runs")

	_, err = e.BuildImage(ctx, wire.ImageBuild{Name: "x", File: "FROM base\nHEALTHCHECK CMD true\n"})
	require.ErrorIs(t, err, errclass.Invalid)
	require.ErrorContains(t, err, "line 2: HEALTHCHECK")
	_, err = e.BuildImage(ctx, wire.ImageBuild{Name: "x", File: "FROM base\nRUN echo oops >&2; exit 3\n"})
	require.ErrorIs(t, err, engine.ErrBuildStep)
	require.ErrorContains(t, err, "exit code 3: oops")
	_, err = e.BuildImage(ctx, wire.ImageBuild{Name: "x", File: "FROM base\nCOPY ../../etc/passwd /x\n", Context: bctx})
	require.ErrorIs(t, err, errclass.Invalid)
	_, err = e.BuildImage(ctx, wire.ImageBuild{Name: "x", File: "FROM missing\n"})
	require.ErrorIs(t, err, errclass.NotFound)
}

// TestWorkspaceOnImageDocker: on docker, the container's root is the
// workspace's own root over the image, from the Store (no registry, no
// copy of the image into Docker): the image's files and defaults, writes
// kept in the workspace's root and committed as a new image.
func TestWorkspaceOnImageDocker(t *testing.T) {
	testenv.RequireDocker(t)
	e, db := newEngineWith(t, "", docker.New(docker.Options{}))
	ctx := t.Context()
	importMinimal(t, e, db)
	// minimalRoot has no /opt: a new top-level directory.
	_, err := e.CreateProject(ctx, wire.CreateProject{Name: "p"})
	require.NoError(t, err)
	ws, err := e.CreateWorkspace(ctx, wire.WorkspaceSpec{Project: "p", Branch: "main", Image: "team/app:1"})
	require.NoError(t, err)
	out, res := run(t, e, ws.ID, "cat /etc/os-release; pwd; id -u; echo $GREETING")
	require.Equal(t, "ID=minimal\n/srv\n1000\nhello\n", out)
	require.Equal(t, ws.Image, res.Receipt.Image)
	zero := 0
	var o, eb bytes.Buffer
	r, err := e.Exec(ctx, ws.ID, wire.ExecRequest{Body: "mkdir -p /usr/local/tool /opt/top && echo d > /usr/local/tool/v && echo t > /opt/top/v && echo w > /workspace/f",
		UID: &zero, GID: &zero}, &o, &eb)
	require.NoError(t, err)
	require.Zero(t, r.ExitCode, "stderr %q", eb.String())
	out, _ = run(t, e, ws.ID, "cat /usr/local/tool/v /opt/top/v /workspace/f; ls /proc/self/fd >/dev/null && echo proc")
	require.Equal(t, "d\nt\nw\nproc\n", out, "the root's changes last, a new top-level directory too; the sandbox's mounts are there")
	st, err := e.WorkspaceStatus(ctx, ws.ID)
	require.NoError(t, err)
	require.Len(t, st.Changes, 1, "/workspace is the project's: %+v", st.Changes)
	img, err := e.CommitImage(ctx, ws.ID, wire.ImageCommit{Name: "team/app:docker"})
	require.NoError(t, err)
	cid, err := store.ParseID(img.Image.Commit)
	require.NoError(t, err)
	c, err := db.Commit(ctx, cid)
	require.NoError(t, err)
	top, err := db.Tree(ctx, c.Root)
	require.NoError(t, err)
	var names []string
	for _, e := range top.Entries {
		names = append(names, e.Name)
	}
	require.Contains(t, names, "opt")
	for _, own := range []string{".layerfs", "workspace", "tmp", "proc"} {
		require.NotContains(t, names, own, "the sandbox's mount points are not the image's")
	}
	ws2, err := e.CreateWorkspace(ctx, wire.WorkspaceSpec{Project: "p", Branch: "main", Image: img.Image.Name})
	require.NoError(t, err)
	out, _ = run(t, e, ws2.ID, "cat /usr/local/tool/v /opt/top/v")
	require.Equal(t, "d\nt\n", out)
}
