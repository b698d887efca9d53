package engine_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"layerfs.dev/layerfs/internal/engine"
	"layerfs.dev/layerfs/internal/platforms/local"
	"layerfs.dev/layerfs/internal/proctest"
	"layerfs.dev/layerfs/wire"
)

// asUser runs script in dir as uid:gid, its working directory outside
// the workspace (the test process serves the mounts).
func asUser(t *testing.T, uid, gid uint32, dir, script string) string {
	t.Helper()
	cmd := exec.Command("sh", "-ec", "cd "+dir+"\n"+script)
	cmd.Dir = "/"
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uid, Gid: gid}}
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "as %d:%d in %s: %s\n%s", uid, gid, dir, script, out)
	return string(out)
}

// reachable makes a mount path below a directory every user can reach.
func reachable(t *testing.T) string {
	t.Helper()
	top := t.TempDir()
	for _, d := range []string{top, filepath.Dir(top)} {
		require.NoError(t, os.Chmod(d, 0o755))
	}
	return filepath.Join(top, "ws")
}

// TestHostViewWrites: on the default daemon (sandboxes in their user
// namespace), the mount path is the owner's: the owner and root create,
// write, rename, chmod and remove there as themselves; what they create is
// the sandbox's root's inside and in the commit, and what the sandbox's
// root creates is the owner's on the host.
func TestHostViewWrites(t *testing.T) { onBothPaths(t, testHostViewWrites) }

func testHostViewWrites(t *testing.T, path string) {
	e, _ := newEngineOn(t, path)
	ctx := t.Context()
	_, err := e.CreateProject(ctx, wire.CreateProject{Name: "p"})
	require.NoError(t, err)
	base := local.DefaultIDRange(nil).Host
	for _, o := range []wire.Owner{{UID: 0, GID: 0}, {UID: 1000, GID: 1000}} {
		t.Run(fmt.Sprintf("owner %d", o.UID), func(t *testing.T) {
			ws, err := e.CreateWorkspace(ctx, wire.WorkspaceSpec{Project: "p", Branch: "main", Owner: &o, MountPath: reachable(t)})
			require.NoError(t, err)
			t.Cleanup(func() { e.EndWorkspace(context.Background(), ws.ID, true) })
			require.NotNil(t, ws.Owner, "the answer names the owner")
			assert.Equal(t, o, *ws.Owner)
			if path == wire.DataPathOverlay {
				assert.Equal(t, "passthrough", ws.HostView)
			}
			mnt := ws.MountPath
			for _, who := range []uint32{o.UID, 0} {
				d := fmt.Sprintf("by%d", who)
				asUser(t, who, who, mnt, fmt.Sprintf(`mkdir -p %[1]s; echo hi > %[1]s/x.txt; echo more >> %[1]s/x.txt
					mv %[1]s/x.txt %[1]s/y.txt; chmod 640 %[1]s/y.txt; echo t > %[1]s/tmp; rm %[1]s/tmp
					ln -sf y.txt %[1]s/link; sed -i s/hi/HI/ %[1]s/y.txt; mkdir -p %[1]s/sub; rmdir %[1]s/sub`, d))
				out, _ := run(t, e, ws.ID, fmt.Sprintf("stat -c '%%u:%%g %%a %%n' %[1]s %[1]s/y.txt; cat %[1]s/y.txt", d))
				assert.Equal(t, fmt.Sprintf("0:0 755 %[1]s\n0:0 640 %[1]s/y.txt\nHI\nmore\n", d), out, "in the sandbox, what %d made", who)
			}
			run(t, e, ws.ID, "echo s > sandbox.txt && echo u > user.txt && chown 1000:1000 user.txt")
			owners := asUser(t, o.UID, o.GID, mnt, "stat -c '%u:%g %n' sandbox.txt user.txt; cat sandbox.txt; echo edited >> sandbox.txt")
			assert.Equal(t, fmt.Sprintf("%d:%d sandbox.txt\n%s user.txt\ns\n", o.UID, o.GID, map[bool]string{
				true: "1000:1000", false: fmt.Sprintf("%d:%d", base+1000, base+1000)}[o.UID == 0]), owners,
				"on the host, the sandbox's root's file is the owner's; its uid 1000's is host 1000's, or the range's where the owner is 1000")
			out, _ := run(t, e, ws.ID, "cat sandbox.txt")
			assert.Equal(t, "s\nedited\n", out)
			_, err = e.CommitWorkspace(ctx, ws.ID, wire.CommitRequest{Message: "host"})
			require.NoError(t, err)
			again, err := e.CreateWorkspace(ctx, wire.WorkspaceSpec{Project: "p", Branch: "main"})
			require.NoError(t, err)
			out, _ = run(t, e, again.ID, fmt.Sprintf("stat -c '%%u:%%g %%n' by%d/y.txt sandbox.txt", o.UID))
			assert.Equal(t, fmt.Sprintf("0:0 by%d/y.txt\n0:0 sandbox.txt\n", o.UID), out, "committed")
			require.NoError(t, e.EndWorkspace(ctx, again.ID, true))
			require.NoError(t, e.EndWorkspace(ctx, ws.ID, true))
			assertUnmounted(t, mnt)
		})
	}
}

// assertUnmounted fails when anything is still mounted at dir.
func assertUnmounted(t *testing.T, dir string) {
	t.Helper()
	b, err := os.ReadFile("/proc/self/mountinfo")
	require.NoError(t, err)
	assert.NotContains(t, string(b), " "+dir+" ", "a mount left at %s", dir)
}

// TestHostViewOwnerRefused: an owner among the sandboxes' ids is refused,
// naming the field.
func TestHostViewOwnerRefused(t *testing.T) {
	e, _ := newEngine(t)
	_, err := e.CreateProject(t.Context(), wire.CreateProject{Name: "p"})
	require.NoError(t, err)
	bad := wire.Owner{UID: local.DefaultIDRange(nil).Host + 5}
	_, err = e.CreateWorkspace(t.Context(), wire.WorkspaceSpec{Project: "p", Branch: "main", Owner: &bad})
	require.Error(t, err)
	assert.True(t, strings.Contains(err.Error(), "owner: uid"), err.Error())
	var _ *engine.Engine = e
}

// TestEndBusyHostView: a workspace ends at once while a host process has
// its working directory and a file open in its mount path; the process's
// next call there fails instead of hanging, and nothing stays mounted.
func TestEndBusyHostView(t *testing.T) {
	e, _ := newEngine(t)
	ctx := t.Context()
	_, err := e.CreateProject(ctx, wire.CreateProject{Name: "p"})
	require.NoError(t, err)
	ws, err := e.CreateWorkspace(ctx, wire.WorkspaceSpec{Project: "p", Branch: "main"})
	require.NoError(t, err)
	require.NotNil(t, ws.Owner)
	require.NoError(t, os.WriteFile(filepath.Join(ws.MountPath, "f"), []byte("x"), 0o644))
	holder := proctest.Hold(t, ws.MountPath, "f")
	ended := make(chan error, 1)
	go func() { ended <- e.EndWorkspace(ctx, ws.ID, true) }()
	select {
	case err := <-ended:
		require.NoError(t, err)
	case <-time.After(time.Minute):
		t.Fatal("ending a workspace whose view a host process holds hangs")
	}
	assertUnmounted(t, ws.MountPath)
	holder.Release()
	waited := make(chan error, 1)
	go func() { waited <- holder.Cmd.Wait() }()
	select {
	case err := <-waited:
		assert.Error(t, err, "the holder's cat of a file in the ended view")
	case <-time.After(30 * time.Second):
		t.Fatal("a call in the ended view hangs")
	}
}
