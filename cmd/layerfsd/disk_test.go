package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"layerfs.dev/layerfs/client"
	"layerfs.dev/layerfs/internal/bench"
	"layerfs.dev/layerfs/internal/testenv"
	"layerfs.dev/layerfs/wire"
)

// TestFullDisk runs a Store (and so its workspaces' upper layers) on a
// small file system and fills it: first from a sandbox, which must get
// ENOSPC while the daemon keeps serving, then during a commit, which must
// fail with a clear error, leave the branch head where it was and the Store
// clean, and work again once there is room.
// On both data paths; a committed file first read once the disk is full is
// served from memory (store.memCache).
func TestFullDisk(t *testing.T) {
	testenv.RequireFUSE(t)
	for _, dataPath := range []string{"fuse", "overlay"} {
		t.Run(dataPath, func(t *testing.T) { testFullDisk(t, dataPath) })
	}
}

func testFullDisk(t *testing.T, dataPath string) {
	ctx := t.Context()
	mnt, cleanup, err := bench.LoopFS(ctx, t.TempDir(), "ext4:160M")
	if err != nil {
		testenv.Skip(t, "loop file system: "+err.Error())
	}
	t.Cleanup(func() {
		assert.NoError(t, cleanup(), "loop file system cleanup")
	})
	d := startDaemon(t, filepath.Join(mnt, "store"), "--data-path", dataPath)
	c := d.client(t)
	src := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(src, "base"), []byte("base\n"), 0o644))
	// cold is first read once the disk is full: no cache copy of it can be made.
	cold := bytes.Repeat([]byte("cold data, read first on a full disk\n"), 1<<15)
	require.NoError(t, os.WriteFile(filepath.Join(src, "cold"), cold, 0o644))
	_, err = c.CreateProject(ctx, wire.CreateProject{Name: "p", FromPath: src})
	require.NoError(t, err)
	a, err := c.CreateWorkspace(ctx, client.WorkspaceSpec{Project: "p", Branch: "main"})
	require.NoError(t, err)
	b, err := c.CreateWorkspace(ctx, client.WorkspaceSpec{Project: "p", Branch: "main"})
	require.NoError(t, err)
	sh := func(ws *client.Workspace, body string) *client.ExecResult {
		t.Helper()
		res, err := ws.Exec(ctx, body, client.ExecOptions{})
		require.NoError(t, err, "exec %q", body)
		return res
	}
	head := func() string {
		t.Helper()
		br, err := c.Branch(ctx, "p", "main")
		require.NoError(t, err)
		return br.Head
	}
	fsck := func(when string) {
		t.Helper()
		if rep, err := c.Fsck(ctx); err != nil || !rep.OK {
			t.Fatalf("fsck %s: %v %+v", when, err, rep.Problems)
		}
	}

	// The upper's file system fills from inside a sandbox.
	res := sh(a, "head -c 400M /dev/urandom > big")
	if res.ExitCode == 0 || !strings.Contains(string(res.Stderr), "No space left on device") {
		t.Fatalf("filling the disk: exit %d, stderr %q; want ENOSPC", res.ExitCode, res.Stderr)
	}
	if res := sh(b, "cat base"); res.ExitCode != 0 || string(res.Stdout) != "base\n" {
		t.Fatalf("the other workspace with the disk full: %+v", res)
	}
	if res := sh(b, "cat cold"); res.ExitCode != 0 || !bytes.Equal(res.Stdout, cold) {
		t.Fatalf("reading a committed file not yet cached, with the disk full: exit %d, %d bytes, stderr %q", res.ExitCode, len(res.Stdout), res.Stderr)
	}

	// A commit that cannot fit: a clear error, the head unmoved, the Store clean.
	before := head()
	_, err = a.Commit(ctx, "too big")
	require.Error(t, err, "a commit that cannot fit on the disk succeeded")
	if !client.IsNoSpace(err) || !strings.Contains(err.Error(), "no space left on device") {
		t.Errorf("commit on a full disk: %v; want an error that says the disk is full", err)
	}
	if h := head(); h != before {
		t.Fatalf("a failed commit moved the head: %s -> %s", before, h)
	}
	fsck("after a commit failed for want of space")

	// With room again (the file removed, and whatever the failed commit
	// stored collected by gc), the workspace and the commit work.
	if res := sh(a, "rm big"); res.ExitCode != 0 {
		t.Fatalf("rm: %+v", res)
	}
	if _, err := c.GC(ctx, wire.GCRequest{}); err != nil {
		out, _ := exec.Command("sh", "-c", "df -h "+mnt+"; du -sh "+mnt+"/store/* "+mnt+"/store/workspaces/*/*; ls -la "+mnt+"/store/packs").CombinedOutput()
		t.Fatalf("gc: %v\n%s", err, out)
	}
	if res := sh(a, "head -c 8M /dev/urandom > fits && echo ok"); res.ExitCode != 0 || string(res.Stdout) != "ok\n" {
		t.Fatalf("after freeing space: %+v", res)
	}
	cr, err := a.Commit(ctx, "fits")
	if err != nil || cr.Result != wire.Created {
		t.Fatalf("commit with room: %v %+v", err, cr)
	}
	fsck("after the commit that fit")
}
