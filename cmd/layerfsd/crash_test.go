package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"fmt"
	"io"
	mrand "math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"layerfs.dev/layerfs/client"
	"layerfs.dev/layerfs/internal/mountinfo"
	"layerfs.dev/layerfs/internal/proctest"
	"layerfs.dev/layerfs/internal/testenv"
	"layerfs.dev/layerfs/wire"
)

// supervised is a `layerfsd serve --supervise` started by a test: the
// supervisor is the test's child, the daemon its child.
type supervised struct {
	cmd    *exec.Cmd
	store  string
	socket string
	log    *bytes.Buffer
	done   chan error
}

func startSupervisedDaemon(t *testing.T, extra ...string) *supervised {
	t.Helper()
	testenv.RequireFUSE(t)
	store := filepath.Join(t.TempDir(), "store")
	s := &supervised{store: store, socket: filepath.Join(store, SocketName), log: &bytes.Buffer{}, done: make(chan error, 1)}
	s.cmd = exec.Command(daemonBinary(t), append([]string{"serve", "--supervise", "--store", store}, extra...)...)
	s.cmd.Stdout, s.cmd.Stderr = s.log, s.log
	require.NoError(t, s.cmd.Start())
	go func() { s.done <- s.cmd.Wait() }()
	t.Cleanup(func() {
		s.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-s.done:
		case <-time.After(time.Minute):
			s.cmd.Process.Kill()
		}
		if t.Failed() {
			t.Logf("daemon log:\n%s", s.log)
		}
	})
	_, err := s.waitUp(t.Context(), time.Minute)
	require.NoError(t, err)
	return s
}

// waitUp dials until a daemon answers a status call, and returns a client
// and how long that took.
func (s *supervised) waitUp(ctx context.Context, limit time.Duration) (*client.Client, error) {
	deadline := time.Now().Add(limit)
	for {
		c, err := client.Dial(ctx, "unix://"+s.socket)
		if err == nil {
			if _, err = c.Daemon(ctx); err == nil {
				return c, nil
			}
			c.Close()
		}
		select {
		case err := <-s.done:
			return nil, fmt.Errorf("the supervisor exited: %v", err)
		case <-time.After(5 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("no daemon answered in %v: %v", limit, err)
		}
	}
}

// TestCrashMatrix kills the daemon with SIGKILL at random moments while, in
// turn, an exec writes, a commit runs (with a large file, so packs are
// being written), a workspace is created, a GC runs and an upload streams
// in. After each kill the supervisor starts a new daemon, which recovers;
// the test then checks that the next call works, fsck is clean, every
// acknowledged commit is on the branch, every file of an exec that
// returned is in the workspace, and that no sandbox process, zombie or
// stale mount remains.
func TestCrashMatrix(t *testing.T) {
	testenv.RequireRoot(t)
	s := startSupervisedDaemon(t)
	ctx := t.Context()
	c, err := s.waitUp(ctx, time.Minute)
	require.NoError(t, err)
	src := t.TempDir()
	for i := range 20 {
		require.NoError(t, os.WriteFile(filepath.Join(src, fmt.Sprintf("base%d", i)), []byte(strconv.Itoa(i)), 0o644))
	}
	_, err = c.CreateProject(ctx, wire.CreateProject{Name: "p", FromPath: src})
	require.NoError(t, err)
	ws, err := c.CreateWorkspace(ctx, client.WorkspaceSpec{Project: "p", Branch: "main"})
	require.NoError(t, err)
	wsID := ws.ID()
	c.Close()

	marker := "crashmatrix" + proctest.Marker()
	upload := filepath.Join(t.TempDir(), "upload") // alone in its directory
	writeRandom(t, upload, 24<<20)

	rnd := mrand.New(mrand.NewPCG(10, 20))
	doneFiles := map[string]string{} // files of execs that returned -> content
	var commits []string             // commits that returned "created"
	var recoveries []time.Duration
	outcomes := map[string][]string{}
	const kills = 50
	kinds := []string{"exec", "commit", "create", "gc", "upload"}
	for i := range kills {
		kind := kinds[i%len(kinds)]
		c, err := s.waitUp(ctx, time.Minute)
		require.NoError(t, err, "kill %d", i)
		st, err := c.Daemon(ctx)
		require.NoError(t, err)
		ws, err := c.Workspace(ctx, wsID)
		require.NoError(t, err, "kill %d: workspace after recovery", i)
		switch kind {
		case "exec": // an exec that returns before the kill: its file must survive
			name := fmt.Sprintf("acked%d", i)
			if res, err := ws.Exec(ctx, fmt.Sprintf("echo %d > %s", i, name), client.ExecOptions{}); err != nil || res.ExitCode != 0 {
				t.Fatalf("kill %d: %v %+v", i, err, res)
			}
			doneFiles[name] = fmt.Sprintf("%d\n", i)
		case "commit": // a commit that returns before the kill, then something large
			_, err := ws.Exec(ctx, fmt.Sprintf("echo %d > small", i), client.ExecOptions{})
			require.NoError(t, err, "kill %d", i)
			res, err := ws.Commit(ctx, fmt.Sprintf("small %d", i))
			if err != nil || res.Result != wire.Created {
				t.Fatalf("kill %d: commit: %v %+v", i, err, res)
			}
			commits = append(commits, res.Commit)
			_, err = ws.Exec(ctx, fmt.Sprintf("head -c 16M /dev/urandom > big%d", i%3), client.ExecOptions{})
			require.NoError(t, err, "kill %d", i)
		}
		if kind == "gc" { // garbage for the GC: a branch's commit, then the branch gone
			_, err := c.ForkBranch(ctx, "p", fmt.Sprintf("g%d", i), "main")
			require.NoError(t, err)
			_, err = c.CommitDir(ctx, "p", fmt.Sprintf("g%d", i), wire.CommitDir{FromPath: filepath.Dir(upload), Message: "garbage"})
			require.NoError(t, err)
			require.NoError(t, c.DeleteBranch(ctx, "p", fmt.Sprintf("g%d", i)))
		}

		result := make(chan error, 1)
		go func() {
			var err error
			switch kind {
			case "exec":
				name, content := fmt.Sprintf("done%d", i), strconv.Itoa(i)
				body := fmt.Sprintf(": %s; for j in $(seq 1 400); do echo $j > w$((j%%20)); done; echo %s > %s", marker, content, name)
				var res *client.ExecResult
				if res, err = ws.Exec(ctx, body, client.ExecOptions{}); err == nil && res.ExitCode == 0 {
					doneFiles[name] = content + "\n"
				} else if err == nil {
					err = fmt.Errorf("exit %d: %s", res.ExitCode, res.Stderr)
				}
			case "commit":
				var res wire.CommitResult
				if res, err = ws.Commit(ctx, fmt.Sprintf("commit %d", i)); err == nil && res.Result == wire.Created {
					commits = append(commits, res.Commit)
				}
			case "create":
				var w2 *client.Workspace
				if w2, err = c.CreateWorkspace(ctx, client.WorkspaceSpec{Project: "p", Branch: "main"}); err == nil {
					err = w2.End(ctx, client.EndOptions{})
				}
			case "gc":
				_, err = c.GC(ctx, wire.GCRequest{})
			case "upload":
				err = ws.Upload(ctx, upload, fmt.Sprintf("up%d", i%2))
			}
			result <- err
		}()
		time.Sleep(time.Duration(rnd.IntN(60)) * time.Millisecond)
		require.NoError(t, syscall.Kill(st.PID, syscall.SIGKILL), "kill %d", i)
		killed := time.Now()
		var opErr error
		select {
		case opErr = <-result:
		case <-time.After(2 * time.Minute):
			t.Fatalf("kill %d: the %s call did not return after its daemon died", i, kind)
		}
		switch {
		case opErr == nil:
			outcomes[kind+": completed before the kill"] = append(outcomes[kind+": completed before the kill"], strconv.Itoa(i))
		case client.IsDaemonLost(opErr):
			outcomes[kind+": daemon_lost"] = append(outcomes[kind+": daemon_lost"], strconv.Itoa(i))
		default:
			outcomes[kind+": "+opErr.Error()] = append(outcomes[kind+": "+opErr.Error()], strconv.Itoa(i))
		}
		c.Close()

		c, err = s.waitUp(ctx, time.Minute)
		require.NoError(t, err, "kill %d (%s)", i, kind)
		_, err = c.Workspaces(ctx)
		require.NoError(t, err, "kill %d (%s): first call after recovery", i, kind)
		recoveries = append(recoveries, time.Since(killed))
		checkAfterCrash(t, ctx, c, s, wsID, marker, doneFiles, commits, fmt.Sprintf("kill %d (%s)", i, kind))
		c.Close()
	}
	slices.Sort(recoveries)
	t.Logf("%d kills; time to the first working call after a kill: median %v, worst %v", kills,
		recoveries[len(recoveries)/2].Round(time.Millisecond), recoveries[len(recoveries)-1].Round(time.Millisecond))
	for _, k := range slices.Sorted(mapsKeys(outcomes)) {
		t.Logf("  %s: %d (kills %s)", k, len(outcomes[k]), strings.Join(outcomes[k], ","))
	}
	t.Logf("checked after every kill: %d acknowledged commits on the branch, %d files of execs that returned", len(commits), len(doneFiles))
}

func mapsKeys[V any](m map[string]V) func(func(string) bool) {
	return func(yield func(string) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

// checkAfterCrash checks what must hold after a daemon crash and recovery.
func checkAfterCrash(t *testing.T, ctx context.Context, c *client.Client, s *supervised, wsID, marker string, doneFiles map[string]string, commits []string, what string) {
	t.Helper()
	rep, err := c.Fsck(ctx)
	if err != nil || !rep.OK {
		t.Fatalf("%s: fsck: %v %+v", what, err, rep.Problems)
	}
	log, err := c.Log(ctx, "p", "main", 0)
	require.NoError(t, err, "%s: log", what)
	onBranch := map[string]bool{}
	for _, cm := range log {
		onBranch[cm.ID] = true
	}
	for _, id := range commits {
		if !onBranch[id] {
			t.Fatalf("%s: acknowledged commit %s is not on main", what, id)
		}
	}
	ws, err := c.Workspace(ctx, wsID)
	require.NoError(t, err, what)
	if ws.Info().State != wire.StateMounted {
		t.Fatalf("%s: workspace is %s after recovery", what, ws.Info().State)
	}
	for name, want := range doneFiles {
		got, err := ws.ReadFile(ctx, name)
		if err != nil || string(got) != want {
			t.Fatalf("%s: %s of an exec that returned: %q, %v; want %q", what, name, got, err, want)
		}
	}
	// Nothing of the killed daemon's sandboxes runs, and the supervisor
	// has reaped what it left.
	deadline := time.Now().Add(30 * time.Second)
	for {
		left, _ := proctest.WithCmdline(marker)
		left = slices.DeleteFunc(left, func(p string) bool { return strings.Contains(p, "-test.") })
		zombies := zombieChildren(s.cmd.Process.Pid)
		if len(left) == 0 && len(zombies) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: left behind: processes %v, zombies of the supervisor %v", what, left, zombies)
		}
		time.Sleep(50 * time.Millisecond)
	}
	// The live mounts of every workspace, each answering: one on the fuse
	// data path, two on overlay (the overlay and its FUSE lower), and the
	// host view at the mount path where sandboxes have a user namespace.
	ms, err := mountinfo.Read(mountinfo.Self)
	require.NoError(t, err)
	below := mountinfo.Below(ms, filepath.Join(s.store, "workspaces"))
	wss, err := c.Workspaces(ctx)
	require.NoError(t, err)
	want := 0
	for _, w := range wss {
		want++
		if strings.HasPrefix(w.DataPath, wire.DataPathOverlay) {
			want++
		}
		if w.Owner != nil {
			want++
		}
	}
	if len(below) != want {
		t.Fatalf("%s: %d mounts below the Store for %d workspaces, want %d: %+v", what, len(below), len(wss), want, below)
	}
	for _, m := range below {
		_, err := os.ReadDir(m.Dir)
		require.NoError(t, err, "%s: mount %s", what, m.Dir)
	}
}

// zombieChildren lists the zombie children of pid.
func zombieChildren(pid int) []string {
	kids, _ := proctest.Children(pid)
	return slices.DeleteFunc(kids, func(k string) bool {
		p, _, _ := strings.Cut(k, " ")
		n, _ := strconv.Atoi(p)
		state, _, ok := proctest.Status(n)
		return !ok || state != 'Z'
	})
}

// writeRandom writes n random bytes to file.
func writeRandom(t *testing.T, file string, n int) {
	t.Helper()
	b := make([]byte, n)
	rand.Read(b)
	require.NoError(t, os.WriteFile(file, b, 0o644))
}

// TestUpgradeInPlace stops a daemon with SIGTERM while a workspace holds
// uncommitted work and starts another daemon binary on the Store: the
// workspace is mounted again with its changes, and commits.
func TestUpgradeInPlace(t *testing.T) {
	d := startDaemon(t, "")
	ctx := t.Context()
	ws := workspaceInP(t, d.client(t))
	if res, err := ws.Exec(ctx, "mkdir -p src && echo work in progress > src/wip", client.ExecOptions{}); err != nil || res.ExitCode != 0 {
		t.Fatalf("exec: %+v %v", res, err)
	}
	require.NoError(t, d.cmd.Process.Signal(syscall.SIGTERM))
	if code := d.wait(t, time.Minute); code != 0 {
		t.Fatalf("old daemon exit %d", code)
	}
	newer := filepath.Join(t.TempDir(), "layerfsd-newer")
	b, err := os.ReadFile(daemonBinary(t))
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(newer, b, 0o755))
	d2 := startDaemonBinary(t, newer, d.store)
	c2 := d2.client(t)
	ws2, err := c2.Workspace(ctx, ws.ID())
	if err != nil || ws2.Info().State != wire.StateMounted {
		t.Fatalf("workspace after the upgrade: %+v %v", ws2, err)
	}
	if got, err := ws2.ReadFile(ctx, "src/wip"); err != nil || string(got) != "work in progress\n" {
		t.Fatalf("uncommitted file after the upgrade: %q %v", got, err)
	}
	if cr, err := ws2.Commit(ctx, "after the upgrade"); err != nil || cr.Result != wire.Created {
		t.Fatalf("commit after the upgrade: %+v %v", cr, err)
	}
}

// TestSandboxInitKilled kills the init of a running exec alone: the exec
// ends (as killed), nothing of its sandbox stays, and the workspace and the
// daemon go on serving.
func TestSandboxInitKilled(t *testing.T) {
	d := startDaemon(t, "")
	ctx := t.Context()
	ws := workspaceInP(t, d.client(t))
	marker := proctest.Marker()
	started := make(chan struct{})
	done := inBackground(func() (*client.ExecResult, error) {
		return ws.Exec(ctx, "echo started; sleep "+marker+"; echo not reached", client.ExecOptions{Stdout: &signalWriter{started: started}})
	})
	<-started
	var initPid int
	deadline := time.Now().Add(30 * time.Second)
	for initPid == 0 && time.Now().Before(deadline) {
		if sleepers := proctest.Sleepers(marker); len(sleepers) == 1 {
			initPid = sandboxInit(sleepers[0])
		}
		time.Sleep(10 * time.Millisecond)
	}
	if initPid == 0 {
		t.Fatal("the exec's init was not found")
	}
	require.NoError(t, syscall.Kill(initPid, syscall.SIGKILL))
	o := <-done
	if o.err == nil && o.res.ExitCode == 0 {
		t.Errorf("an exec whose init was killed succeeded: %+v", o.res)
	}
	t.Logf("exec with its init killed: %+v, %v", o.res, o.err)
	for deadline := time.Now().Add(30 * time.Second); len(proctest.Sleepers(marker)) > 0; {
		if time.Now().After(deadline) {
			t.Fatalf("sandbox processes left: %v", proctest.Sleepers(marker))
		}
		time.Sleep(20 * time.Millisecond)
	}
	if res, err := ws.Exec(ctx, "echo fine", client.ExecOptions{}); err != nil || string(res.Stdout) != "fine\n" {
		t.Fatalf("next exec: %+v %v", res, err)
	}
}

// sandboxInit returns the sandbox init above pid (the nearest ancestor
// whose argv[0] is the init's), 0 if none.
func sandboxInit(pid int) int {
	for pid > 1 {
		if b, _ := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cmdline"); bytes.HasPrefix(b, []byte("layerfs-sandbox-init\x00")) {
			return pid
		}
		_, ppid, ok := proctest.Status(pid)
		if !ok {
			return 0
		}
		pid = ppid
	}
	return 0
}

// TestOnlyTheDaemonHoldsFUSE checks, while a workspace is mounted and
// sandboxes (warm and running) exist, that no process but the daemon holds
// the workspace's FUSE connection: the kernel names the connection of every
// /dev/fuse descriptor in its fdinfo.
func TestOnlyTheDaemonHoldsFUSE(t *testing.T) {
	d := startDaemon(t, "")
	ctx := t.Context()
	c := d.client(t)
	ws := workspaceInP(t, c)
	st, err := c.Daemon(ctx)
	require.NoError(t, err)
	ms, err := mountinfo.Read(mountinfo.Self)
	require.NoError(t, err)
	// The workspace's FUSE mount: at its mount path on the fuse data
	// path, its lower beside it on overlay.
	var conn string
	for _, m := range mountinfo.Below(ms, filepath.Dir(ws.MountPath())) {
		if strings.HasPrefix(m.FSType, "fuse") {
			conn = strings.TrimPrefix(m.Device, "0:")
		}
	}
	if conn == "" {
		t.Fatalf("no FUSE mount for the workspace at %s", ws.MountPath())
	}
	marker := proctest.Marker()
	started := make(chan struct{})
	done := inBackground(func() (*client.ExecResult, error) {
		return ws.Exec(ctx, "echo started; sleep "+marker, client.ExecOptions{Stdout: &signalWriter{started: started}, Timeout: 30 * time.Second})
	})
	<-started
	for deadline := time.Now().Add(30 * time.Second); len(proctest.Sleepers(marker)) == 0 && time.Now().Before(deadline); {
		time.Sleep(10 * time.Millisecond)
	}
	// Among the processes that could have inherited it (the daemon's
	// descendants: warm inits, the running init and its command) none
	// holds the connection, or any FUSE device. (Other processes on the
	// host are not checked: a device whose mount is gone keeps the number
	// of a connection that a later mount may reuse.)
	holders := proctest.FUSEHolders(conn)
	if !slices.Contains(holders, st.PID) {
		t.Errorf("FUSE connection %s is held by %v, not by the daemon %d", conn, holders, st.PID)
	}
	desc := proctest.Descendants(st.PID)
	if len(desc) < 2 {
		t.Fatalf("the daemon has %d descendants; want at least the running init and its command", len(desc))
	}
	for _, pid := range desc {
		if fds := proctest.FUSEDescriptors(pid); len(fds) > 0 {
			t.Errorf("the daemon's descendant %d holds /dev/fuse as fd %v", pid, fds)
		}
	}
	for _, p := range proctest.Sleepers(marker) {
		syscall.Kill(p, syscall.SIGKILL)
	}
	<-done
}

// TestCrashDocker kills a daemon whose workspace runs on the docker
// platform while an exec runs in its container: the next daemon removes the
// dead one's container, so nothing of the sandbox runs on, and serves the
// workspace again.
func TestCrashDocker(t *testing.T) {
	testenv.RequireDocker(t)
	s := startSupervisedDaemon(t, "--platform", "docker")
	ctx := t.Context()
	c, err := s.waitUp(ctx, 2*time.Minute)
	require.NoError(t, err)
	defer c.Close()
	_, err = c.CreateProject(ctx, wire.CreateProject{Name: "p"})
	require.NoError(t, err)
	ws, err := c.CreateWorkspace(ctx, client.WorkspaceSpec{Project: "p", Branch: "main", Platform: "docker"})
	require.NoError(t, err)
	if res, err := ws.Exec(ctx, "echo kept > f", client.ExecOptions{}); err != nil || res.ExitCode != 0 {
		t.Fatalf("exec: %+v %v", res, err)
	}
	st, err := c.Daemon(ctx)
	require.NoError(t, err)
	marker := proctest.Marker()
	done := inBackground(func() (*client.ExecResult, error) {
		return ws.Exec(ctx, "sleep "+marker, client.ExecOptions{})
	})
	for deadline := time.Now().Add(time.Minute); len(proctest.Sleepers(marker)) == 0; {
		if time.Now().After(deadline) {
			t.Fatal("the exec's sleep did not start")
		}
		time.Sleep(20 * time.Millisecond)
	}
	require.NoError(t, syscall.Kill(st.PID, syscall.SIGKILL))
	if o := <-done; !client.IsDaemonLost(o.err) {
		t.Errorf("the exec's caller got %+v, %v; want daemon_lost", o.res, o.err)
	}
	c2, err := s.waitUp(ctx, 2*time.Minute)
	require.NoError(t, err)
	defer c2.Close()
	for deadline := time.Now().Add(time.Minute); len(proctest.Sleepers(marker)) > 0; {
		if time.Now().After(deadline) {
			t.Fatalf("the dead daemon's container still runs its exec: %v", proctest.Sleepers(marker))
		}
		time.Sleep(50 * time.Millisecond)
	}
	ws2, err := c2.Workspace(ctx, ws.ID())
	require.NoError(t, err)
	if res, err := ws2.Exec(ctx, "cat f", client.ExecOptions{}); err != nil || string(res.Stdout) != "kept\n" {
		t.Fatalf("exec after recovery: %+v %v", res, err)
	}
	require.NoError(t, ws2.End(ctx, client.EndOptions{Discard: true}))
}

// TestKilledWithItsOwnFileOpen kills the daemon while it holds a file of
// its own mount open (an upload whose body stalls). Exiting, the kernel
// closes that file, which sends a FLUSH to the mount's server: the dying
// process itself, which can never answer. It would stay a zombie holding
// the Store's lock forever; the supervisor aborts its connections, and the
// next daemon serves.
func TestKilledWithItsOwnFileOpen(t *testing.T) {
	testenv.RequireRoot(t)
	s := startSupervisedDaemon(t)
	ctx := t.Context()
	c, err := s.waitUp(ctx, time.Minute)
	require.NoError(t, err)
	defer c.Close()
	ws := workspaceInP(t, c)
	st, err := c.Daemon(ctx)
	require.NoError(t, err)
	body, feed := io.Pipe()
	defer feed.Close()
	go func() {
		feed.Write(make([]byte, 1<<20))
		<-ctx.Done() // then stall
	}()
	done := make(chan error, 1)
	go func() { done <- ws.WriteFrom(ctx, "stall", body, -1, 0o644) }()
	// The upload goes to a temporary file beside its target first.
	upper := filepath.Join(s.store, "workspaces", ws.ID(), "upper", ".stall.upload-*")
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(10 * time.Millisecond) {
		if m, _ := filepath.Glob(upper); len(m) == 1 {
			if fi, err := os.Stat(m[0]); err == nil && fi.Size() > 0 {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatal("the upload never reached the upper layer")
		}
	}
	require.NoError(t, syscall.Kill(st.PID, syscall.SIGKILL))
	c2, err := s.waitUp(ctx, time.Minute)
	require.NoError(t, err, "after killing a daemon with its own file open")
	defer c2.Close()
	_, err = c2.Workspace(ctx, ws.ID())
	require.NoError(t, err)
	if state, _, ok := proctest.Status(st.PID); ok && state != 'Z' {
		t.Errorf("the killed daemon %d is still there, state %c", st.PID, state)
	}
	// The client still feeds the request body; once it stops, the call
	// ends with an error.
	feed.Close()
	select {
	case err := <-done:
		assert.Error(t, err, "the upload to a killed daemon succeeded")
	case <-time.After(time.Minute):
		t.Error("the upload did not end after its daemon died and its body ended")
	}
}

// TestCrashHostView kills the daemon while a host process sits in a
// workspace's mount path (its host view) with a file open there: the
// process's next call fails at once instead of hanging, the next daemon
// serves the view again at the same path (one mount there, not stacked),
// and a host write there reaches the sandbox, owned by its root.
func TestCrashHostView(t *testing.T) {
	s := startSupervisedDaemon(t)
	ctx := t.Context()
	c, err := s.waitUp(ctx, time.Minute)
	require.NoError(t, err)
	defer c.Close()
	ws := workspaceInP(t, c)
	mnt := ws.Info().MountPath
	require.NotNil(t, ws.Info().Owner, "the mount path is a view (the daemon's sandboxes have a user namespace)")
	require.NoError(t, os.WriteFile(filepath.Join(mnt, "before"), []byte("x"), 0o644))
	// A host process in the view: its working directory there, a file open.
	holder := proctest.Hold(t, mnt, "before")
	st, err := c.Daemon(ctx)
	require.NoError(t, err)
	require.NoError(t, syscall.Kill(st.PID, syscall.SIGKILL))
	c2, err := s.waitUp(ctx, time.Minute)
	require.NoError(t, err)
	defer c2.Close()
	ws2, err := c2.Workspace(ctx, ws.ID())
	require.NoError(t, err)
	ms, err := mountinfo.Read(mountinfo.Self)
	require.NoError(t, err)
	n := 0
	for _, m := range ms {
		if m.Dir == mnt {
			n++
		}
	}
	assert.Equal(t, 1, n, "mounts at the mount path after recovery")
	require.NoError(t, os.WriteFile(filepath.Join(mnt, "after"), []byte("y"), 0o644))
	res, err := ws2.Exec(ctx, "stat -c '%u:%g' before after && cat after", client.ExecOptions{})
	require.NoError(t, err)
	assert.Equal(t, "0:0\n0:0\ny", string(res.Stdout))
	// The holder's old view is cut off: its calls fail, they do not hang.
	done := make(chan error, 1)
	go func() {
		done <- exec.Command("sh", "-c", "cat /proc/"+fmt.Sprint(holder.Cmd.Process.Pid)+"/cwd/before").Run()
	}()
	select {
	case err := <-done:
		assert.Error(t, err, "a call in the dead daemon's view")
	case <-time.After(30 * time.Second):
		t.Fatal("a call in the dead daemon's view hangs")
	}
	holder.Release()
	require.NoError(t, ws2.End(ctx, client.EndOptions{Discard: true}))
}
