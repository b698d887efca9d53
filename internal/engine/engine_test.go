package engine_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"layerfs.dev/layerfs/internal/engine"
	"layerfs.dev/layerfs/internal/kerneloverlay"
	"layerfs.dev/layerfs/internal/mountinfo"
	"layerfs.dev/layerfs/internal/platforms"
	"layerfs.dev/layerfs/internal/platforms/local"
	"layerfs.dev/layerfs/internal/platforms/local/sandbox"
	"layerfs.dev/layerfs/internal/store"
	"layerfs.dev/layerfs/internal/testenv"
	"layerfs.dev/layerfs/wire"
	"layerfs.dev/layerfs/wire/errclass"
)

func TestMain(m *testing.M) {
	if sandbox.InitMain() {
		return
	}
	os.Exit(m.Run())
}

// newEngine makes an engine over a fresh Store with the local platform and
// the default data path.
func newEngine(t *testing.T) (*engine.Engine, *store.DB) {
	t.Helper()
	return newEngineOn(t, "")
}

// onBothPaths runs f with an engine whose workspaces are on each data path.
func onBothPaths(t *testing.T, f func(t *testing.T, path string)) {
	for _, p := range []string{wire.DataPathFUSE, wire.DataPathOverlay} {
		t.Run(p, func(t *testing.T) { f(t, p) })
	}
}

// newEngineOn makes an engine whose workspaces default to data path path.
func newEngineOn(t *testing.T, path string) (*engine.Engine, *store.DB) {
	t.Helper()
	return newEngineWith(t, path, local.New(local.Options{}))
}

// newEngineWith makes an engine whose workspaces default to data path path
// and run on platform p, which it brings up and down.
func newEngineWith(t *testing.T, path string, p platforms.Platform) (*engine.Engine, *store.DB) {
	t.Helper()
	return startEngine(t, store.Options{}, engine.Config{DataPath: path}, p)
}

// startEngine makes an engine configured as cfg over a fresh Store opened
// with opts (a shared one with opts.URL), its sandboxes on platform p,
// which it brings up and down.
func startEngine(t *testing.T, opts store.Options, cfg engine.Config, p platforms.Platform) (*engine.Engine, *store.DB) {
	t.Helper()
	testenv.RequireFUSE(t)
	// Not t.Context(): the engine and the platform outlive the test body,
	// their Shutdown and Down run in a cleanup.
	ctx := context.Background()
	db, err := store.Init(ctx, filepath.Join(t.TempDir(), "store"), opts)
	require.NoError(t, err)
	require.NoError(t, p.Up(ctx))
	cfg.Store, cfg.Platforms = db, []platforms.Platform{p}
	e, err := engine.New(ctx, cfg)
	require.NoError(t, err)
	t.Cleanup(func() {
		assert.NoError(t, e.Shutdown(context.Background()), "shutdown")
		p.Down(context.Background())
		db.Close()
	})
	return e, db
}

func run(t *testing.T, e *engine.Engine, id, body string) (string, wire.ExecResult) {
	t.Helper()
	var out, errb bytes.Buffer
	res, err := e.Exec(t.Context(), id, wire.ExecRequest{Body: body}, &out, &errb)
	require.NoError(t, err, "exec %q", body)
	if res.ExitCode != 0 {
		t.Fatalf("exec %q: exit %d, stderr %q", body, res.ExitCode, errb.String())
	}
	return out.String(), res
}

func TestWorkspaceLifecycle(t *testing.T) { onBothPaths(t, testWorkspaceLifecycle) }

func testWorkspaceLifecycle(t *testing.T, path string) {
	e, _ := newEngineOn(t, path)
	ctx := t.Context()
	_, err := e.CreateProject(ctx, wire.CreateProject{Name: "p"})
	require.NoError(t, err)
	ws, err := e.CreateWorkspace(ctx, wire.WorkspaceSpec{Project: "p", Branch: "main"})
	require.NoError(t, err)
	if ws.State != wire.StateMounted || !strings.HasPrefix(ws.DataPath, path+": ") {
		t.Fatalf("workspace %+v, want data path %s", ws, path)
	}
	if path == wire.DataPathOverlay {
		assert.Contains(t, ws.DataPath, "metadata erofs", "the commit's metadata from an image")
	}
	_, res1 := run(t, e, ws.ID, "mkdir -p src && echo hello > src/a.txt")
	if u := res1.Receipt.Upper; u.Files != 1 || u.Dirs != 1 || u.Bytes != 6 {
		t.Errorf("first exec: upper took %+v, want 1 file of 6 bytes and 1 directory", u)
	}
	out, res := run(t, e, ws.ID, "cat src/a.txt; pwd")
	if out != "hello\n/workspace\n" {
		t.Fatalf("second exec read %q", out)
	}
	// On overlay, reads of the upper never reach the daemon.
	if res.Receipt.CommandNs <= 0 || res.Receipt.WallNs < res.Receipt.CommandNs || (path == wire.DataPathFUSE && res.Receipt.FUSE.Requests == 0) {
		t.Fatalf("receipt %+v", res.Receipt)
	}
	var buf bytes.Buffer
	if n, err := e.ReadFile(ctx, ws.ID, "src/a.txt", &buf); err != nil || n != 6 || buf.String() != "hello\n" {
		t.Fatalf("download: %q %d %v", buf.String(), n, err)
	}
	st, err := e.WorkspaceStatus(ctx, ws.ID)
	require.NoError(t, err)
	if len(st.Changes) == 0 || st.UpperBytes == 0 {
		t.Fatalf("status shows no change: %+v", st)
	}
	require.ErrorIs(t, e.EndWorkspace(ctx, ws.ID, false), errclass.Uncommitted, "end with changes")
	cr, err := e.CommitWorkspace(ctx, ws.ID, wire.CommitRequest{Message: "add a"})
	if err != nil || cr.Result != wire.Created {
		t.Fatalf("commit: %+v %v", cr, err)
	}
	// The mount stays live after the commit and a second commit is relative to the first.
	run(t, e, ws.ID, "echo more >> src/a.txt")
	cr2, err := e.CommitWorkspace(ctx, ws.ID, wire.CommitRequest{Message: "append"})
	if err != nil || cr2.Result != wire.Created {
		t.Fatalf("second commit: %+v %v", cr2, err)
	}
	// A commit reads the upper directly: no request reaches the mount but
	// the kernel's late RELEASE and FORGET of the exec's files.
	for op, st := range cr2.Receipt.FUSE.ByOp {
		if op != "RELEASE" && op != "FORGET" && op != "BATCH_FORGET" && op != "RELEASEDIR" {
			t.Errorf("second commit sent %d %s to the mount", st.Count, op)
		}
	}
	if c, _ := e.Commit(ctx, "p", cr2.Commit); c.Parent != cr.Commit || c.Stats.Changed != 1 {
		t.Fatalf("second commit %+v: want parent %s and one change", c, cr.Commit)
	}
	if cr3, err := e.CommitWorkspace(ctx, ws.ID, wire.CommitRequest{}); err != nil || cr3.Result != wire.UpToDate {
		t.Fatalf("commit without changes: %+v %v", cr3, err)
	}
	require.NoError(t, e.EndWorkspace(ctx, ws.ID, false), "end after commit")
	_, err = os.Stat(ws.MountPath)
	require.ErrorIs(t, err, os.ErrNotExist, "mount path left behind")

	// Fork from the first commit and find the file as it was then.
	_, err = e.ForkBranch(ctx, "p", wire.ForkBranch{Name: "fix", From: cr.Commit})
	require.NoError(t, err)
	ws2, err := e.CreateWorkspace(ctx, wire.WorkspaceSpec{Project: "p", Branch: "fix"})
	require.NoError(t, err)
	if out, _ := run(t, e, ws2.ID, "cat src/a.txt"); out != "hello\n" {
		t.Fatalf("forked workspace reads %q", out)
	}
	require.NoError(t, e.EndWorkspace(ctx, ws2.ID, false))
}

func TestIsolationAndHeadMoved(t *testing.T) { onBothPaths(t, testIsolationAndHeadMoved) }

func testIsolationAndHeadMoved(t *testing.T, path string) {
	e, _ := newEngineOn(t, path)
	ctx := t.Context()
	e.CreateProject(ctx, wire.CreateProject{Name: "p"})
	a, err := e.CreateWorkspace(ctx, wire.WorkspaceSpec{Project: "p", Branch: "main"})
	require.NoError(t, err)
	b, err := e.CreateWorkspace(ctx, wire.WorkspaceSpec{Project: "p", Branch: "main"})
	require.NoError(t, err)
	run(t, e, a.ID, "echo a > only-a")
	run(t, e, b.ID, "echo b > only-b; test ! -e only-a")
	_, err = e.CommitWorkspace(ctx, a.ID, wire.CommitRequest{})
	require.NoError(t, err)
	r, err := e.CommitWorkspace(ctx, b.ID, wire.CommitRequest{})
	if err != nil || r.Result != wire.HeadMoved || r.Commit == "" || r.Head == r.Commit {
		t.Fatalf("commit after the head moved: %+v %v", r, err)
	}
	// Nothing lost: the changes are still there and still uncommitted.
	if out, _ := run(t, e, b.ID, "cat only-b"); out != "b\n" {
		t.Fatalf("after head-moved the workspace reads %q", out)
	}
	require.ErrorIs(t, e.EndWorkspace(ctx, b.ID, false), errclass.Uncommitted, "end after head-moved")
	// The stored commit can be forked.
	_, err = e.ForkBranch(ctx, "p", wire.ForkBranch{Name: "b-work", From: r.Commit})
	require.NoError(t, err)
	require.NoError(t, e.EndWorkspace(ctx, b.ID, true))
	require.NoError(t, e.EndWorkspace(ctx, a.ID, true))
}

func TestBadRequests(t *testing.T) {
	e, _ := newEngine(t)
	ctx := t.Context()
	e.CreateProject(ctx, wire.CreateProject{Name: "p"})
	for _, spec := range []wire.WorkspaceSpec{
		{Project: "nope", Branch: "main"},
		{Project: "p", Branch: "nope"},
		{Project: "p", Branch: "main", At: "layer:9"},
		{Project: "../p", Branch: "main"},
		{Project: "p", Branch: "main", Network: "bridge"},
		{Project: "p", Branch: "main", Platform: "vms"},
		{Project: "p", Branch: "main", MountPath: "relative/path"},
	} {
		_, err := e.CreateWorkspace(ctx, spec)
		if !errors.Is(err, errclass.Invalid) && !errors.Is(err, errclass.NotFound) {
			t.Errorf("create %+v: %v, want invalid or not found", spec, err)
		}
	}
	ws, err := e.CreateWorkspace(ctx, wire.WorkspaceSpec{Project: "p", Branch: "main"})
	require.NoError(t, err)
	for _, req := range []wire.ExecRequest{
		{},
		{Body: "true", Argv: []string{"true"}},
		{Body: "true", TimeoutMs: -1},
		{Body: "true", Dir: "../etc"},
		{Body: "true", Env: []string{"NOEQUALS"}},
	} {
		_, err := e.Exec(ctx, ws.ID, req, nil, nil)
		assert.ErrorIs(t, err, errclass.Invalid, "exec %+v", req)
	}
	_, err = e.Exec(ctx, "ws-nope", wire.ExecRequest{Body: "true"}, nil, nil)
	assert.ErrorIs(t, err, errclass.NotFound, "exec in an unknown workspace")
	assert.ErrorIs(t, e.WriteFile(ctx, ws.ID, "../x", 0o644, strings.NewReader("x")), errclass.Invalid, "upload with ..")
	st, _ := e.WorkspaceStatus(ctx, ws.ID)
	if len(st.Changes) != 0 {
		t.Errorf("refused requests changed the workspace: %+v", st.Changes)
	}
	// Argv runs exactly as given, without a shell.
	var out bytes.Buffer
	res, err := e.Exec(ctx, ws.ID, wire.ExecRequest{Argv: []string{"printf", "%s|", "a b", "$HOME", "*"}}, &out, nil)
	if err != nil || res.ExitCode != 0 || out.String() != "a b|$HOME|*|" {
		t.Fatalf("argv exec: %q %+v %v", out.String(), res, err)
	}
	if res, _ := e.Exec(ctx, ws.ID, wire.ExecRequest{Body: "exit 7"}, nil, nil); res.ExitCode != 7 {
		t.Fatalf("exit code %d, want 7", res.ExitCode)
	}
}

func TestNativeWorkspace(t *testing.T) {
	e, _ := newEngine(t)
	ctx := t.Context()
	ws, err := e.CreateWorkspace(ctx, wire.WorkspaceSpec{Native: true})
	require.NoError(t, err)
	run(t, e, ws.ID, "echo x > f")
	if b, err := os.ReadFile(filepath.Join(ws.MountPath, "f")); err != nil || string(b) != "x\n" {
		t.Fatalf("native file %q %v", b, err)
	}
	_, err = e.CommitWorkspace(ctx, ws.ID, wire.CommitRequest{})
	require.ErrorIs(t, err, errclass.Invalid, "commit of a native workspace")
	require.NoError(t, e.EndWorkspace(ctx, ws.ID, false))
	_, err = os.Stat(ws.MountPath)
	require.ErrorIs(t, err, os.ErrNotExist, "native directory left")
}

func TestRemountKeepsChanges(t *testing.T) { onBothPaths(t, testRemountKeepsChanges) }

func testRemountKeepsChanges(t *testing.T, path string) {
	e, db := newEngineOn(t, path)
	ctx := t.Context()
	e.CreateProject(ctx, wire.CreateProject{Name: "p"})
	ws, err := e.CreateWorkspace(ctx, wire.WorkspaceSpec{Project: "p", Branch: "main"})
	require.NoError(t, err)
	run(t, e, ws.ID, "echo kept > k; mkdir d; echo 1 > d/one")
	cr, err := e.CommitWorkspace(ctx, ws.ID, wire.CommitRequest{})
	require.NoError(t, err)
	run(t, e, ws.ID, "echo later > l; rm d/one")
	// A new engine on the same store, as a restarted daemon, after this one
	// stopped serving without ending the workspace.
	require.NoError(t, e.Shutdown(ctx))
	if path == wire.DataPathOverlay {
		// The commit's metadata image was built ahead, for its next
		// workspace (Shutdown waits for that).
		c, err := e.Commit(ctx, "p", cr.Commit)
		require.NoError(t, err)
		_, err = os.Stat(filepath.Join(db.CacheDir(), "meta", c.Root+".content.erofs"))
		assert.NoError(t, err, "metadata image of the new commit")
	}
	p := local.New(local.Options{})
	p.Up(ctx)
	defer p.Down(ctx)
	e2, err := engine.New(ctx, engine.Config{Store: db, Platforms: []platforms.Platform{p}, DataPath: path})
	require.NoError(t, err)
	defer e2.Shutdown(ctx)
	require.NoError(t, e2.Recover(ctx))
	if out, _ := run(t, e2, ws.ID, "cat k l; test ! -e d/one && echo gone"); out != "kept\nlater\ngone\n" {
		t.Fatalf("after remount: %q", out)
	}
	r, err := e2.CommitWorkspace(ctx, ws.ID, wire.CommitRequest{})
	if err != nil || r.Result != wire.Created {
		t.Fatalf("commit after remount: %+v %v", r, err)
	}
	page, err := e2.Diff(ctx, "p", "layer:1", "main", "", 0)
	require.NoError(t, err)
	got := []string{}
	for _, c := range page.Changes {
		got = append(got, c.Kind+" "+c.Path)
	}
	if strings.Join(got, ",") != "added d,added k,added l" {
		t.Fatalf("diff after remount commit: %v", got)
	}
	if rep, err := e2.Fsck(ctx, wire.FsckRequest{}); err != nil || !rep.OK {
		t.Fatalf("fsck: %+v %v", rep, err)
	}
	require.NoError(t, e2.EndWorkspace(ctx, ws.ID, false))
}

// TestDurability checks the durability setting: the daemon's default
// (commit: overlayfs's volatile option on the overlay path), a workspace
// that names fsync, bad values; and that a volatile workspace's upper is
// settled when the daemon stops, and remounted with a note when overlayfs's
// mark of a volatile mount comes from another boot (the host stopped).
func TestDurability(t *testing.T) {
	e, db := newEngineOn(t, wire.DataPathOverlay)
	ctx := t.Context()
	e.CreateProject(ctx, wire.CreateProject{Name: "p"})
	for _, spec := range []wire.WorkspaceSpec{
		{Project: "p", Branch: "main", Durability: "never"},
		{Native: true, Durability: wire.DurabilityFsync},
	} {
		_, err := e.CreateWorkspace(ctx, spec)
		assert.ErrorIs(t, err, errclass.Invalid, "create %+v", spec)
	}
	superOptions := func(ws wire.Workspace) string {
		ms, err := mountinfo.Read(mountinfo.Self)
		require.NoError(t, err)
		data := filepath.Join(db.WorkspacesDir(), ws.ID, "data") // the mount path is the host's view of it
		m, ok := mountinfo.Containing(ms, data)
		require.True(t, ok && m.Dir == data, "the workspace's overlay")
		return m.SuperOptions
	}
	strict, err := e.CreateWorkspace(ctx, wire.WorkspaceSpec{Project: "p", Branch: "main", Durability: wire.DurabilityFsync})
	require.NoError(t, err)
	assert.Equal(t, wire.DurabilityFsync, strict.Durability)
	assert.NotContains(t, superOptions(strict), "volatile")
	// Two of the default durability: one whose daemon will seem to have
	// crashed, one whose host will.
	var vol [2]wire.Workspace
	for i := range vol {
		vol[i], err = e.CreateWorkspace(ctx, wire.WorkspaceSpec{Project: "p", Branch: "main"})
		require.NoError(t, err)
		assert.Equal(t, wire.DurabilityCommit, vol[i].Durability, "the default")
		assert.Contains(t, superOptions(vol[i]), "volatile")
		run(t, e, vol[i].ID, "echo kept > k && sync k")
	}

	require.NoError(t, e.Shutdown(ctx))
	dir := func(ws wire.Workspace) string { return filepath.Join(db.WorkspacesDir(), ws.ID) }
	mark := func(ws wire.Workspace) string { return filepath.Join(dir(ws), "work", "work", "incompat", "volatile") }
	for _, ws := range vol {
		_, err = os.Stat(mark(ws))
		require.ErrorIs(t, err, os.ErrNotExist, "overlayfs's volatile mark after the daemon stopped")
		// As a crash leaves it: the mark is there, and the boot it was
		// made in is recorded beside it.
		require.NoError(t, os.MkdirAll(mark(ws), 0o755))
	}
	// The second's was made in another boot: its host stopped.
	require.NoError(t, unix.Setxattr(filepath.Join(dir(vol[1]), "work"), kerneloverlay.MountBootXattr, []byte("another boot\n"), 0))

	p := local.New(local.Options{})
	require.NoError(t, p.Up(ctx))
	defer p.Down(ctx)
	e2, err := engine.New(ctx, engine.Config{Store: db, Platforms: []platforms.Platform{p}})
	require.NoError(t, err)
	defer e2.Shutdown(ctx)
	require.NoError(t, e2.Recover(ctx))
	for i, ws := range append(vol[:], strict) {
		st, err := e2.WorkspaceStatus(ctx, ws.ID)
		require.NoError(t, err)
		assert.Equal(t, i == 1, strings.Contains(st.DataPath, "the host stopped while it was mounted"), "%s: data path %q", ws.ID, st.DataPath)
		assert.Equal(t, ws.Durability, st.Durability)
	}
	for _, ws := range vol {
		if out, _ := run(t, e2, ws.ID, "cat k"); out != "kept\n" {
			t.Fatalf("%s after remount: %q", ws.ID, out)
		}
	}
}

// TestExecIsolation checks from inside an exec what must be out of reach:
// the host's /root and /home, the Store directory, the daemon's socket,
// other workspaces and the host's network; writes outside /workspace and
// /tmp fail; a fork bomb and a memory hog are contained while another
// workspace keeps being served.
func TestExecIsolation(t *testing.T) {
	e, db := newEngine(t)
	ctx := t.Context()
	e.CreateProject(ctx, wire.CreateProject{Name: "p"})
	a, err := e.CreateWorkspace(ctx, wire.WorkspaceSpec{Project: "p", Branch: "main"})
	require.NoError(t, err)
	b, err := e.CreateWorkspace(ctx, wire.WorkspaceSpec{Project: "p", Branch: "main"})
	require.NoError(t, err)
	run(t, e, b.ID, "echo secret-b > in-b")
	sock := filepath.Join(db.Dir(), "layerfsd.sock")
	ln, err := net.Listen("unix", sock)
	require.NoError(t, err)
	defer ln.Close()
	tcp, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer tcp.Close()
	go func() {
		for {
			c, err := tcp.Accept()
			if err != nil {
				return
			}
			c.Write([]byte("host-network\n"))
			c.Close()
		}
	}()
	port := tcp.Addr().(*net.TCPAddr).Port

	// Each probe must fail inside the sandbox; the probe says how.
	for what, probe := range map[string]string{
		"the host's /root":    "ls -A /root | grep -q .",
		"the host's /home":    "test -d /home",
		"the Store directory": "test -e " + db.Dir(),
		"the daemon's socket": "test -e " + sock,
		"another workspace":   "test -e " + b.MountPath + " || test -e " + filepath.Dir(b.MountPath) + " || [ $(grep -c ' - fuse' /proc/self/mountinfo) -gt 1 ]",
		"the host's network":  fmt.Sprintf("exec 3<>/dev/tcp/127.0.0.1/%d && head -1 <&3", port),
		"writing outside":     "echo x > /etc/probe || echo x > /usr/probe || echo x > /probe",
		"mounting":            "mount -t tmpfs none /workspace",
		// Capabilities in the host's user namespace (root of a user
		// namespace of its own has that namespace's).
		"raising privileges": "grep -q '^CapEff:.*[1-9a-f]' /proc/self/status && grep -Eq '^ *0 +0 ' /proc/self/uid_map",
	} {
		res, err := e.Exec(ctx, a.ID, wire.ExecRequest{Body: probe, TimeoutMs: 20000}, io.Discard, io.Discard)
		require.NoError(t, err, what)
		if res.ExitCode == 0 {
			t.Errorf("%s is reachable from a sandbox (probe %q succeeded)", what, probe)
		}
	}
	if _, res := run(t, e, a.ID, "echo ok > /workspace/w && echo ok > /tmp/t && cat /workspace/w /tmp/t"); res.ExitCode != 0 {
		t.Fatal("writes to /workspace and /tmp must work")
	}

	// Containment: a fork bomb and a memory hog in a, a normal exec in b.
	var wg sync.WaitGroup
	for _, hog := range []wire.ExecRequest{
		{Body: "bomb() { bomb | bomb & }; bomb; sleep 3", Pids: 64, TimeoutMs: 15000},
		{Body: "python3 -c 'x = bytearray(1 << 30); print(len(x))'", MemoryBytes: 64 << 20, TimeoutMs: 15000},
	} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			res, err := e.Exec(ctx, a.ID, hog, io.Discard, io.Discard)
			if !assert.NoError(t, err, "hog %q", hog.Body) {
				return
			}
			if hog.MemoryBytes > 0 && res.ExitCode == 0 {
				t.Errorf("a 1 GiB allocation succeeded under a 64 MiB limit")
			}
		}()
	}
	for range 5 {
		if out, _ := run(t, e, b.ID, "cat in-b"); out != "secret-b\n" {
			t.Fatalf("workspace b served %q while a was hogged", out)
		}
	}
	wg.Wait()
	if out, _ := run(t, e, a.ID, "echo alive"); out != "alive\n" {
		t.Fatalf("after the hogs: %q", out)
	}
	for _, w := range []string{a.ID, b.ID} {
		require.NoError(t, e.EndWorkspace(ctx, w, true))
	}
}

// TestHardLinkedBase: a base with hard links is served on fuse even where
// overlay is the default (overlayfs would split the link on a write), and
// a write through one name is seen through the other.
func TestHardLinkedBase(t *testing.T) {
	e, _ := newEngineOn(t, wire.DataPathOverlay)
	ctx := t.Context()
	_, err := e.CreateProject(ctx, wire.CreateProject{Name: "p"})
	require.NoError(t, err)
	ws, err := e.CreateWorkspace(ctx, wire.WorkspaceSpec{Project: "p", Branch: "main"})
	require.NoError(t, err)
	if !strings.HasPrefix(ws.DataPath, wire.DataPathOverlay+": ") {
		t.Fatalf("a base without hard links: data path %q, want overlay", ws.DataPath)
	}
	run(t, e, ws.ID, "echo one > a && ln a b")
	if cr, err := e.CommitWorkspace(ctx, ws.ID, wire.CommitRequest{Message: "link"}); err != nil || cr.Result != wire.Created {
		t.Fatalf("commit: %+v %v", cr, err)
	}
	// Still overlay, and the link made in the upper holds.
	if out, _ := run(t, e, ws.ID, "echo two > a && cat b"); out != "two\n" {
		t.Fatalf("through b after writing a, on the workspace that made the link: %q", out)
	}
	require.NoError(t, e.EndWorkspace(ctx, ws.ID, true))
	ws, err = e.CreateWorkspace(ctx, wire.WorkspaceSpec{Project: "p", Branch: "main"})
	require.NoError(t, err)
	if !strings.HasPrefix(ws.DataPath, wire.DataPathFUSE+": ") || !strings.Contains(ws.DataPath, "hard-linked") {
		t.Fatalf("a base with hard links: data path %q, want fuse and why", ws.DataPath)
	}
	if out, _ := run(t, e, ws.ID, "echo three > a && cat b && stat -c %h b"); out != "three\n2\n" {
		t.Fatalf("through b after writing a: %q", out)
	}
	require.NoError(t, e.EndWorkspace(ctx, ws.ID, true))
}
