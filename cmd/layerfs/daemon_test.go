package main

import (
	"encoding/json"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"layerfs.dev/layerfs/internal/testenv"
	"layerfs.dev/layerfs/wire"
)

// The daemon verbs run as a user runs them: the layerfs and layerfsd
// binaries side by side (auto-start finds layerfsd next to layerfs), each
// command a process, so that exit codes and the background daemon are real.

var (
	binOnce sync.Once
	binDir  string
	binErr  error
)

func binaries(t *testing.T) string {
	t.Helper()
	binOnce.Do(func() {
		binDir, binErr = os.MkdirTemp("", "layerfs-cli-test-")
		if binErr != nil {
			return
		}
		for _, b := range []struct{ out, pkg string }{{"layerfs", "."}, {"layerfsd", "../layerfsd"}} {
			if out, err := exec.Command("go", "build", "-o", filepath.Join(binDir, b.out), b.pkg).CombinedOutput(); err != nil {
				binErr = &buildError{b.pkg, err, string(out)}
				return
			}
		}
	})
	require.NoError(t, binErr)
	return binDir
}

type buildError struct {
	pkg string
	err error
	out string
}

func (e *buildError) Error() string { return "build " + e.pkg + ": " + e.err.Error() + "\n" + e.out }

// proc is the CLI run as a process against one store.
type proc struct {
	t     *testing.T
	store string
	bin   string
	env   []string // added to the environment of every command
}

func newProc(t *testing.T) *proc {
	testenv.RequireFUSE(t)
	p := &proc{t: t, store: filepath.Join(t.TempDir(), "store"), bin: filepath.Join(binaries(t), "layerfs")}
	t.Cleanup(func() {
		// Whatever a test left running, stop it (and print its log on failure).
		p.run("daemon", "stop")
		if t.Failed() {
			if b, err := os.ReadFile(filepath.Join(p.store, daemonLog)); err == nil {
				t.Logf("daemon log:\n%s", b)
			}
		}
	})
	return p
}

func (p *proc) run(args ...string) result {
	p.t.Helper()
	start := time.Now()
	defer func() { p.t.Logf("layerfs %s: %v", strings.Join(args, " "), time.Since(start).Round(time.Millisecond)) }()
	cmd := exec.Command(p.bin, append([]string{"--store", p.store}, args...)...)
	cmd.Env = append(append(os.Environ(), "LAYERFS_DAEMON=", "LAYERFS_IDLE_EXIT=2m"), p.env...)
	var out, errb strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		p.t.Fatal(err)
	}
	return result{code, out.String(), errb.String()}
}

func (p *proc) ok(args ...string) string {
	p.t.Helper()
	r := p.run(args...)
	if r.code != 0 {
		p.t.Fatalf("layerfs %s: exit %d, stderr %q", strings.Join(args, " "), r.code, r.stderr)
	}
	return r.stdout
}

func (p *proc) json(v any, args ...string) {
	p.t.Helper()
	out := p.ok(append(args, "--json")...)
	require.NoError(p.t, json.Unmarshal([]byte(out), v), "layerfs %s --json\n%s", strings.Join(args, " "), out)
}

// TestDaemonAutoStartStatusStop: the first verb that needs a daemon starts
// one; status tells about it; stop stops it.
func TestDaemonAutoStartStatusStop(t *testing.T) {
	p := newProc(t)
	if r := p.run("daemon", "status"); r.code != 6 || !strings.Contains(r.stderr, "no daemon answers") {
		t.Errorf("status before start: %+v", r)
	}
	// A history verb without a Store starts nothing and creates nothing;
	// a workspace verb starts the daemon, which creates the Store.
	if r := p.run("project", "list"); r.code != 3 || !strings.Contains(r.stderr, "no store") {
		t.Errorf("project list without a store: %+v", r)
	}
	_, err := os.Stat(p.store)
	assert.ErrorIs(t, err, os.ErrNotExist, "a history verb without a store created %s", p.store)
	r := p.run("ws", "list")
	if r.code != 0 || !strings.Contains(r.stderr, "started layerfsd") {
		t.Fatalf("ws list with no daemon: %+v", r)
	}
	var st wire.DaemonStatus
	p.json(&st, "daemon", "status")
	if st.PID == 0 || st.Socket != filepath.Join(p.store, daemonSocket) || st.IdleExit != "2m0s" {
		t.Errorf("status = %+v", st)
	}
	if fi, err := os.Lstat(st.Socket); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("socket: %v %v", fi, err)
	}
	assert.Contains(t, p.ok("daemon", "status"), "execs running", "status table")
	// A second verb reuses the daemon.
	if r := p.run("ws", "list"); r.code != 0 || strings.Contains(r.stderr, "started") {
		t.Errorf("second ws list: %+v", r)
	}
	assert.Contains(t, p.ok("daemon", "start"), "already runs", "start with a daemon up")
	assert.Contains(t, p.ok("daemon", "stop"), "stopped", "stop")
	if !processGone(st.PID) {
		t.Errorf("pid %d still runs after stop", st.PID)
	}
	_, err = os.Lstat(st.Socket)
	assert.ErrorIs(t, err, os.ErrNotExist, "socket left after stop")
	assert.Contains(t, p.ok("daemon", "stop"), "no daemon running", "second stop")
	assert.Contains(t, p.ok("daemon", "start", "--idle-exit", "1m"), "runs (pid", "explicit start")
}

// TestWsVerbs drives a workspace through the CLI.
func TestWsVerbs(t *testing.T) {
	p := newProc(t)
	p.ok("init")
	p.ok("project", "create", "demo")
	var ws wire.Workspace
	p.json(&ws, "ws", "create", "demo", "main")
	if ws.ID == "" || ws.MountPath == "" {
		t.Fatalf("ws create: %+v", ws)
	}
	assert.Contains(t, p.ok("ws", "list"), ws.ID, "ws list lacks %s", ws.ID)
	// ws path is the directory its owner (this test's user) writes in as
	// their own; the sandbox sees what they wrote.
	mnt := strings.TrimSuffix(p.ok("ws", "path", ws.ID), "\n")
	require.Equal(t, ws.MountPath, mnt)
	require.NoError(t, os.WriteFile(filepath.Join(mnt, "from-host.txt"), []byte("host"), 0o644))
	if out := p.ok("ws", "exec", ws.ID, "--", "cat", "from-host.txt"); out != "host" {
		t.Errorf("the sandbox reads %q of a file written at ws path", out)
	}
	require.NoError(t, os.Remove(filepath.Join(mnt, "from-host.txt")))

	// argv exactly as given: the quotes and the semicolon reach sh intact.
	r := p.run("ws", "exec", ws.ID, "--", "sh", "-c", "echo 'a b'; echo err >&2; exit 3")
	if r.code != 3 || r.stdout != "a b\n" || r.stderr != "err\n" {
		t.Errorf("exec argv: %+v", r)
	}
	r = p.run("ws", "exec", ws.ID, "-c", "echo hi > hello.txt && cat hello.txt")
	if r.code != 0 || r.stdout != "hi\n" {
		t.Errorf("exec body: %+v", r)
	}
	// -c runs bash -o pipefail.
	r = p.run("ws", "exec", ws.ID, "-c", "false | true")
	if r.code != 1 {
		t.Errorf("pipefail: exit %d, want 1", r.code)
	}
	if r := p.run("ws", "exec", ws.ID); r.code != 2 {
		t.Errorf("exec without a command: %+v", r)
	}

	local := t.TempDir()
	os.MkdirAll(filepath.Join(local, "src", "sub"), 0o755)
	os.WriteFile(filepath.Join(local, "src", "sub", "f.txt"), []byte("F"), 0o644)
	p.ok("ws", "cp", filepath.Join(local, "src"), ws.ID+":up")
	if out := p.ok("ws", "exec", ws.ID, "--", "cat", "up/sub/f.txt"); out != "F" {
		t.Errorf("uploaded tree: %q", out)
	}
	p.ok("ws", "cp", ws.ID+":hello.txt", filepath.Join(local, "hello.txt"))
	if b, _ := os.ReadFile(filepath.Join(local, "hello.txt")); string(b) != "hi\n" {
		t.Errorf("downloaded %q", b)
	}
	p.ok("ws", "cp", ws.ID+":up", filepath.Join(local, "down"))
	if b, _ := os.ReadFile(filepath.Join(local, "down", "sub", "f.txt")); string(b) != "F" {
		t.Errorf("downloaded tree: %q", b)
	}
	// A leading "/" is the workspace root, as in docker cp; ".." above it
	// is refused.
	p.ok("ws", "cp", filepath.Join(local, "src", "sub", "f.txt"), ws.ID+":/abs/dir/f.txt")
	p.ok("ws", "cp", ws.ID+":/abs/dir/f.txt", filepath.Join(local, "abs.txt"))
	if b, _ := os.ReadFile(filepath.Join(local, "abs.txt")); string(b) != "F" {
		t.Errorf("round trip through WS:/abs/dir/f.txt: %q", b)
	}
	if r := p.run("ws", "cp", filepath.Join(local, "src", "sub", "f.txt"), ws.ID+":/../f.txt"); r.code == 0 {
		t.Errorf("cp to WS:/../f.txt was accepted: %+v", r)
	}
	if r := p.run("ws", "cp", "a", "b"); r.code != 2 {
		t.Errorf("cp without a workspace side: %+v", r)
	}

	var st wire.WorkspaceStatus
	p.json(&st, "ws", "status", ws.ID)
	if len(st.Changes) == 0 {
		t.Errorf("status shows no changes: %+v", st)
	}
	if r := p.run("ws", "end", ws.ID); r.code != 5 || !strings.Contains(r.stderr, "--discard") {
		t.Errorf("end with changes: %+v", r)
	}
	var cr wire.CommitResult
	p.json(&cr, "ws", "commit", ws.ID, "-m", "from the cli")
	if cr.Result != wire.Created {
		t.Errorf("commit: %+v", cr)
	}
	p.ok("ws", "end", ws.ID)
	assert.NotContains(t, p.ok("ws", "list"), ws.ID, "ended workspace still listed")
}

// TestBenchCrash runs the crash bench briefly: a supervised daemon killed
// during an exec answers again, and the figures come out.
func TestBenchCrash(t *testing.T) {
	p := newProc(t)
	out := p.ok("bench", "crash", "--kills", "3")
	if !strings.Contains(out, "3 kills") || !strings.Contains(out, "median") || !strings.Contains(out, "daemon_lost") {
		t.Errorf("bench crash printed:\n%s", out)
	}
}

// TestDaemonCrashRecovers kills the auto-started daemon with SIGKILL while
// a workspace is mounted: its supervisor starts a new one, which mounts the
// workspace again, and the next command works.
func TestDaemonCrashRecovers(t *testing.T) {
	p := newProc(t)
	p.ok("init")
	p.ok("project", "create", "demo")
	var ws wire.Workspace
	p.json(&ws, "ws", "create", "demo", "main")
	p.ok("ws", "exec", ws.ID, "-c", "echo kept > f")
	var st wire.DaemonStatus
	p.json(&st, "daemon", "status")
	if st.Supervisor == 0 {
		t.Fatalf("the auto-started daemon has no supervisor: %+v", st)
	}
	require.NoError(t, syscall.Kill(st.PID, syscall.SIGKILL))
	if out := p.ok("ws", "exec", ws.ID, "-c", "cat f"); out != "kept\n" {
		t.Errorf("after the crash: %q", out)
	}
	var st2 wire.DaemonStatus
	p.json(&st2, "daemon", "status")
	if st2.PID == st.PID || st2.Supervisor != st.Supervisor {
		t.Errorf("after the crash: daemon %d (was %d), supervisor %d (was %d)", st2.PID, st.PID, st2.Supervisor, st.Supervisor)
	}
}

// TestBranchDeleteUnderWorkspace: a branch that a workspace stands on
// cannot be deleted (busy), and the workspace's next commit still
// publishes on it. Before the CLI went through the daemon, the delete
// succeeded and the commit failed with "branch main of demo: not found".
func TestBranchDeleteUnderWorkspace(t *testing.T) {
	p := newProc(t)
	p.ok("init")
	p.ok("project", "create", "demo")
	var ws wire.Workspace
	p.json(&ws, "ws", "create", "demo", "main")
	r := p.run("branch", "delete", "demo", "main")
	if r.code != 5 || !strings.Contains(r.stderr, "busy") || !strings.Contains(r.stderr, ws.ID) {
		t.Errorf("branch delete under a workspace: %+v, want a busy error (exit 5) naming %s", r, ws.ID)
	}
	p.ok("ws", "exec", ws.ID, "-c", "echo x > f")
	var cr wire.CommitResult
	p.json(&cr, "ws", "commit", ws.ID, "-m", "after the refused delete")
	if cr.Result != wire.Created {
		t.Errorf("commit after the refused delete: %+v", cr)
	}
	p.ok("ws", "end", ws.ID)
	p.ok("branch", "delete", "demo", "main")
}

// TestRemoteDaemon: with $LAYERFS_DAEMON=tcp://... every verb is served by
// that daemon and its Store; the --store of the command is not touched.
func TestRemoteDaemon(t *testing.T) {
	p := newProc(t)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := l.Addr().String()
	l.Close()
	dir := t.TempDir()
	remote := filepath.Join(dir, "remote-store")
	tok := filepath.Join(dir, "token")
	require.NoError(t, os.WriteFile(tok, []byte("remote-secret\n"), 0o600))
	d := exec.Command(filepath.Join(binaries(t), "layerfsd"), "serve", "--store", remote, "--tcp", addr, "--token-file", tok)
	var dlog strings.Builder
	d.Stdout, d.Stderr = &dlog, &dlog
	require.NoError(t, d.Start())
	t.Cleanup(func() {
		_ = d.Process.Signal(syscall.SIGTERM)
		_ = d.Wait()
		if t.Failed() {
			t.Logf("remote daemon's log:\n%s", dlog.String())
		}
	})
	p.env = []string{"LAYERFS_DAEMON=tcp://" + addr, "LAYERFS_TOKEN=remote-secret"}
	var st wire.DaemonStatus
	for deadline := time.Now().Add(time.Minute); ; {
		r := p.run("daemon", "status", "--json")
		if r.code == 0 {
			require.NoError(t, json.Unmarshal([]byte(r.stdout), &st))
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the remote daemon did not answer: %+v", r)
		}
		time.Sleep(50 * time.Millisecond)
	}
	require.Equal(t, remote, st.Store, "daemon status: store")
	src := filepath.Join(dir, "src")
	require.NoError(t, os.MkdirAll(src, 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(src, "f"), []byte("f\n"), 0o644))
	p.ok("project", "create", "demo", "--from", src)
	p.ok("branch", "fork", "demo", "dev", "--from", "main")
	var bs []wire.Branch
	p.json(&bs, "branch", "list", "demo")
	if len(bs) != 2 {
		t.Errorf("branch list over TCP: %+v", bs)
	}
	var stats wire.StoreStats
	p.json(&stats, "stats")
	if stats.Projects != 1 || stats.Branches != 2 {
		t.Errorf("stats over TCP: %+v", stats)
	}
	_, err = os.Stat(p.store)
	assert.ErrorIs(t, err, os.ErrNotExist, "the verbs created the local store %s", p.store)
	// A wrong token is refused.
	p.env = []string{"LAYERFS_DAEMON=tcp://" + addr, "LAYERFS_TOKEN=wrong"}
	if r := p.run("project", "list"); r.code != 7 || !strings.Contains(r.stderr, "unauthorized") {
		t.Errorf("a wrong token: %+v", r)
	}
}
