package engine_test

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"layerfs.dev/layerfs/internal/testenv"
	"layerfs.dev/layerfs/wire"
)

// A workspace's quota bounds what its execs write, through every data
// path; hitting it is ENOSPC inside and a full quota in the receipt, and
// another workspace and the Store's file system do not notice.
func TestQuota(t *testing.T) {
	e, db := newEngine(t)
	if _, err := exec.LookPath("mkfs.ext4"); err != nil {
		testenv.Skip(t, "needs mkfs.ext4 (Debian package e2fsprogs)")
	}
	ctx := t.Context()
	_, err := e.CreateProject(ctx, wire.CreateProject{Name: "p"})
	require.NoError(t, err)
	const quota = 32 << 20
	ws, err := e.CreateWorkspace(ctx, wire.WorkspaceSpec{Project: "p", Branch: "main", QuotaBytes: quota})
	require.NoError(t, err)
	other, err := e.CreateWorkspace(ctx, wire.WorkspaceSpec{Project: "p", Branch: "main"})
	require.NoError(t, err)
	img := filepath.Join(db.WorkspacesDir(), ws.ID+".img")
	_, err = os.Stat(img)
	require.NoError(t, err, "no quota image")

	// Bytes: a file twice the quota stops at it.
	var out, errb bytes.Buffer
	res, err := e.Exec(ctx, ws.ID, wire.ExecRequest{Body: "dd if=/dev/zero of=big bs=1M count=64 status=none"}, &out, &errb)
	require.NoError(t, err)
	if res.ExitCode == 0 || !strings.Contains(errb.String(), "No space left on device") {
		t.Errorf("writing past the quota: exit %d, stderr %q; want ENOSPC", res.ExitCode, errb.String())
	}
	q := res.Receipt.Quota
	if q == nil || !q.Full || q.Bytes > quota || q.BytesUsed < quota/2 {
		t.Errorf("receipt quota %+v: want full, at most %d bytes", q, quota)
	}
	// The other workspace writes as usual, and the first one can still
	// delete. (The space of a deleted file returns once every descriptor
	// of it is closed, which FUSE does asynchronously: not checked here.)
	run(t, e, other.ID, "dd if=/dev/zero of=big bs=1M count=40 status=none")
	if _, res = run(t, e, ws.ID, "rm big"); res.Receipt.Quota == nil {
		t.Errorf("no quota in the receipt")
	}
	if _, res = run(t, e, other.ID, "true"); res.Receipt.Quota != nil {
		t.Errorf("a workspace without a quota has one in its receipt: %+v", res.Receipt.Quota)
	}

	// Inodes, in a workspace with room for the bytes.
	files, err := e.CreateWorkspace(ctx, wire.WorkspaceSpec{Project: "p", Branch: "main", QuotaBytes: 64 << 20, QuotaInodes: 1024})
	require.NoError(t, err)
	errb.Reset()
	res, err = e.Exec(ctx, files.ID, wire.ExecRequest{Body: "mkdir many && cd many && for i in $(seq 3000); do : > f$i || exit 1; done"}, &out, &errb)
	require.NoError(t, err)
	if q := res.Receipt.Quota; res.ExitCode == 0 || !strings.Contains(errb.String(), "No space left on device") ||
		q == nil || !q.Full || q.InodesUsed != q.Inodes || q.Inodes > 2048 {
		t.Errorf("creating files past the quota: exit %d, stderr %q, quota %+v; want ENOSPC and no inode left", res.ExitCode, errb.String(), q)
	}
	require.NoError(t, e.EndWorkspace(ctx, files.ID, true))

	require.NoError(t, e.EndWorkspace(ctx, ws.ID, true))
	_, err = os.Stat(img)
	assert.ErrorIs(t, err, os.ErrNotExist, "quota image left after end")
	_, err = os.Stat(filepath.Join(db.WorkspacesDir(), ws.ID))
	assert.ErrorIs(t, err, os.ErrNotExist, "workspace dir left after end")
	require.NoError(t, e.EndWorkspace(ctx, other.ID, true))
}
