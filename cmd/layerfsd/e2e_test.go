package main

import (
	"archive/tar"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"layerfs.dev/layerfs/client"
	"layerfs.dev/layerfs/internal/proctest"
	"layerfs.dev/layerfs/internal/testenv"
	"layerfs.dev/layerfs/wire"
)

// These tests run the real daemon binary with the real engine, as a user
// would: built once per test run, started as a child process.

var (
	buildOnce sync.Once
	binPath   string
	buildErr  error
)

func daemonBinary(t *testing.T) string { return daemonBinaryB(t) }

func daemonBinaryB(t testing.TB) string {
	t.Helper()
	buildOnce.Do(func() {
		dir, err := os.MkdirTemp("", "layerfsd-test-")
		if err != nil {
			buildErr = err
			return
		}
		binPath = filepath.Join(dir, "layerfsd")
		out, err := exec.Command("go", "build", "-o", binPath, ".").CombinedOutput()
		if err != nil {
			buildErr = err
			binPath = string(out)
		}
	})
	require.NoError(t, buildErr, "build layerfsd\n%s", binPath)
	return binPath
}

type daemon struct {
	cmd    *exec.Cmd
	store  string
	socket string
	log    *bytes.Buffer
	done   chan error
}

// startDaemon starts layerfsd serve on a fresh store and waits until it answers.
func startDaemon(t *testing.T, store string, extra ...string) *daemon {
	t.Helper()
	return startDaemonBinary(t, daemonBinary(t), store, extra...)
}

// startDaemonBinary is startDaemon with the daemon binary bin.
func startDaemonBinary(t *testing.T, bin, store string, extra ...string) *daemon {
	t.Helper()
	return startDaemonUnder(t, []string{bin}, store, extra...)
}

// startDaemonUnder is startDaemon with the command line argv: a daemon
// binary, or a command that runs one (nsenter ... -- layerfsd).
func startDaemonUnder(t *testing.T, argv []string, store string, extra ...string) *daemon {
	t.Helper()
	testenv.RequireFUSE(t)
	if store == "" {
		store = filepath.Join(t.TempDir(), "store")
	}
	d := &daemon{store: store, socket: filepath.Join(store, SocketName), log: &bytes.Buffer{}, done: make(chan error, 1)}
	args := append(slices.Clone(argv[1:]), "serve", "--store", store, "--log-level", "debug")
	d.cmd = exec.Command(argv[0], append(args, extra...)...)
	d.cmd.Stdout, d.cmd.Stderr = d.log, d.log
	require.NoError(t, d.cmd.Start())
	go func() { d.done <- d.cmd.Wait() }()
	t.Cleanup(func() {
		if d.cmd.ProcessState == nil {
			d.cmd.Process.Signal(syscall.SIGTERM)
			select {
			case <-d.done:
			case <-time.After(30 * time.Second):
				d.cmd.Process.Kill()
			}
		}
		if t.Failed() {
			t.Logf("daemon log:\n%s", d.log)
		}
	})
	deadline := time.Now().Add(30 * time.Second)
	for {
		if c, err := net.Dial("unix", d.socket); err == nil {
			c.Close()
			return d
		}
		select {
		case err := <-d.done:
			t.Fatalf("layerfsd exited at start: %v\n%s", err, d.log)
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("layerfsd did not answer in 30s\n%s", d.log)
		}
	}
}

func (d *daemon) client(t *testing.T) *client.Client {
	t.Helper()
	c, err := client.Dial(t.Context(), "unix://"+d.socket)
	require.NoError(t, err)
	t.Cleanup(func() { c.Close() })
	return c
}

// wait waits for the daemon to exit and returns its exit code.
func (d *daemon) wait(t *testing.T, within time.Duration) int {
	t.Helper()
	select {
	case <-d.done:
		return d.cmd.ProcessState.ExitCode()
	case <-time.After(within):
		t.Fatalf("layerfsd still runs after %v\n%s", within, d.log)
	}
	return -1
}

// mountsUnder counts mounts below dir.
func mountsUnder(t *testing.T, dir string) int {
	b, err := os.ReadFile("/proc/self/mountinfo")
	require.NoError(t, err)
	n := 0
	for _, l := range strings.Split(string(b), "\n") {
		if f := strings.Fields(l); len(f) > 4 && strings.HasPrefix(f[4], dir) {
			n++
		}
	}
	return n
}

// TestEndToEnd is the acceptance sequence through the SDK against a
// real layerfsd: project, workspace, an exec that writes a file, another
// that reads it, download, commit, fork from that commit, a second
// workspace that finds the file.
func TestEndToEnd(t *testing.T) {
	for _, path := range []string{wire.DataPathOverlay, wire.DataPathFUSE} {
		t.Run(path, func(t *testing.T) { testEndToEnd(t, path) })
	}
}

func testEndToEnd(t *testing.T, path string) {
	d := startDaemon(t, "", "--data-path", path)
	ctx := t.Context()
	c := d.client(t)
	if fi, err := os.Lstat(d.socket); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("socket mode: %v %v", fi.Mode(), err)
	}
	_, err := c.CreateProject(ctx, wire.CreateProject{Name: "demo"})
	require.NoError(t, err)
	ws, err := c.CreateWorkspace(ctx, client.WorkspaceSpec{Project: "demo", Branch: "main"})
	require.NoError(t, err)
	if got := ws.Info().DataPath; !strings.HasPrefix(got, path+": ") {
		t.Errorf("data path %q, want %s", got, path)
	}
	res, err := ws.Exec(ctx, "mkdir -p out && echo 'hello from the sandbox' > out/greeting.txt", client.ExecOptions{Timeout: time.Minute})
	if err != nil || res.ExitCode != 0 {
		t.Fatalf("write exec: %+v %v", res, err)
	}
	res, err = ws.ExecArgv(ctx, []string{"cat", "out/greeting.txt"}, client.ExecOptions{})
	if err != nil || string(res.Stdout) != "hello from the sandbox\n" {
		t.Fatalf("read exec: %q %v", res.Stdout, err)
	}
	if res.Receipt.WallNs == 0 {
		t.Errorf("exec receipt is empty: %+v", res.Receipt)
	}
	local := filepath.Join(t.TempDir(), "greeting.txt")
	require.NoError(t, ws.Download(ctx, "out/greeting.txt", local))
	if b, _ := os.ReadFile(local); string(b) != "hello from the sandbox\n" {
		t.Errorf("downloaded %q", b)
	}
	cr, err := ws.Commit(ctx, "greeting")
	if err != nil || cr.Result != wire.Created {
		t.Fatalf("commit: %+v %v", cr, err)
	}
	_, err = c.ForkBranch(ctx, "demo", "second", cr.Commit)
	require.NoError(t, err)
	ws2, err := c.CreateWorkspace(ctx, client.WorkspaceSpec{Project: "demo", Branch: "second"})
	require.NoError(t, err)
	res, err = ws2.Exec(ctx, "cat out/greeting.txt", client.ExecOptions{})
	if err != nil || string(res.Stdout) != "hello from the sandbox\n" {
		t.Errorf("second workspace: %q %v", res.Stdout, err)
	}
	// Uploads and downloads that try to leave the workspace are refused.
	if err := ws2.WriteFile(ctx, "../escape", []byte("x"), 0o644); !client.IsInvalid(err) {
		t.Errorf("write ../escape: %v", err)
	}
	for _, w := range []*client.Workspace{ws, ws2} {
		assert.NoError(t, w.End(ctx, client.EndOptions{}), "end")
	}
}

// TestSIGTERMGrace: a running exec finishes during shutdown, new work is
// refused, mounts are gone and the socket removed, exit 0.
func TestSIGTERMGrace(t *testing.T) {
	d := startDaemon(t, "", "--grace", "30s")
	ctx := t.Context()
	ws := workspaceInP(t, d.client(t))
	started := make(chan struct{})
	w := &signalWriter{started: started}
	done := inBackground(func() (*client.ExecResult, error) {
		return ws.Exec(ctx, "echo started; sleep 1; echo finished", client.ExecOptions{Stdout: w})
	})
	<-started
	require.NoError(t, d.cmd.Process.Signal(syscall.SIGTERM))
	o := <-done
	if o.err != nil || o.res.ExitCode != 0 {
		t.Errorf("exec during shutdown: %+v %v", o.res, o.err)
	}
	if code := d.wait(t, 30*time.Second); code != 0 {
		t.Errorf("exit code %d", code)
	}
	_, err := os.Lstat(d.socket)
	assert.ErrorIs(t, err, os.ErrNotExist, "socket left behind")
	if n := mountsUnder(t, d.store); n != 0 {
		t.Errorf("%d mounts left under the store", n)
	}
	// The next daemon takes over the store (and recovers the workspace).
	d2 := startDaemon(t, d.store)
	wss, err := d2.client(t).Workspaces(ctx)
	if err != nil || len(wss) != 1 {
		t.Errorf("workspaces after restart: %+v %v", wss, err)
	}
}

// signalWriter closes started on the first write.
type signalWriter struct {
	once    sync.Once
	started chan struct{}
	buf     bytes.Buffer
}

func (w *signalWriter) Write(p []byte) (int, error) {
	w.once.Do(func() { close(w.started) })
	return w.buf.Write(p)
}

func TestSecondDaemonRefused(t *testing.T) {
	d := startDaemon(t, "")
	out, err := exec.Command(daemonBinary(t), "serve", "--store", d.store).CombinedOutput()
	if err == nil || !strings.Contains(string(out), "another layerfsd") {
		t.Errorf("second daemon: %v\n%s", err, out)
	}
	// A second daemon on another store but the same socket path is refused too.
	out, err = exec.Command(daemonBinary(t), "serve", "--store", t.TempDir(), "--socket", d.socket).CombinedOutput()
	if err == nil || !strings.Contains(string(out), "another daemon answers") {
		t.Errorf("second daemon on the socket: %v\n%s", err, out)
	}
}

func TestStaleSocketAndIdleExit(t *testing.T) {
	testenv.RequireFUSE(t)
	store := filepath.Join(t.TempDir(), "store")
	os.MkdirAll(store, 0o700)
	l, err := net.Listen("unix", filepath.Join(store, SocketName))
	require.NoError(t, err)
	l.(*net.UnixListener).SetUnlinkOnClose(false)
	l.Close()
	start := time.Now()
	d := startDaemon(t, store, "--idle-exit", "1s")
	if code := d.wait(t, 20*time.Second); code != 0 {
		t.Errorf("idle exit code %d", code)
	}
	if took := time.Since(start); took < time.Second {
		t.Errorf("exited after %v, before the idle time", took)
	}
}

func TestTCPToken(t *testing.T) {
	testenv.RequireFUSE(t)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := l.Addr().String()
	l.Close()
	tok := filepath.Join(t.TempDir(), "token")
	os.WriteFile(tok, []byte("tcp-secret\n"), 0o600)
	startDaemon(t, "", "--tcp", addr, "--token-file", tok)
	ctx := t.Context()
	if _, err := client.Dial(ctx, "http://"+addr); !client.IsUnauthorized(err) {
		t.Errorf("no token: %v", err)
	}
	if _, err := client.Dial(ctx, "http://"+addr, client.WithToken("wrong")); !client.IsUnauthorized(err) {
		t.Errorf("wrong token: %v", err)
	}
	c, err := client.Dial(ctx, "http://"+addr, client.WithToken("tcp-secret"))
	require.NoError(t, err)
	_, err = c.Projects(ctx)
	assert.NoError(t, err)
}

// TestLoad: 16 workspaces each running 20 execs concurrently through the
// SDK; every result is correct, and afterwards the daemon has no more
// mounts, child processes or file descriptors than before.
func TestLoad(t *testing.T) {
	d := startDaemon(t, "")
	ctx := t.Context()
	c := d.client(t)
	_, err := c.CreateProject(ctx, wire.CreateProject{Name: "load"})
	require.NoError(t, err)
	pid := d.cmd.Process.Pid
	// The local platform's warm pool holds inits with the pipes of their
	// next exec; it fills at low priority after the daemon starts and after
	// each exec takes one, so the baseline is taken once it has settled.
	fdsBefore := settledFDs(t, pid)
	kidsBefore := countChildren(t, pid)
	mountsBefore := mountsUnder(t, d.store)

	const workspaces, execs = 16, 20
	var wg sync.WaitGroup
	errs := make(chan error, workspaces*execs)
	for w := range workspaces {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ws, err := c.CreateWorkspace(ctx, client.WorkspaceSpec{Project: "load", Branch: "main"})
			if err != nil {
				errs <- err
				return
			}
			var inner sync.WaitGroup
			for i := range execs {
				inner.Add(1)
				go func() {
					defer inner.Done()
					want := fmt.Sprintf("w%d-e%d", w, i)
					res, err := ws.Exec(ctx, fmt.Sprintf("echo %s > f-%d && cat f-%d", want, i, i), client.ExecOptions{Timeout: 2 * time.Minute})
					switch {
					case err != nil:
						errs <- err
					case res.ExitCode != 0 || strings.TrimSpace(string(res.Stdout)) != want:
						errs <- fmt.Errorf("workspace %d exec %d: exit %d, stdout %q, stderr %q", w, i, res.ExitCode, res.Stdout, res.Stderr)
					}
				}()
			}
			inner.Wait()
			if err := ws.End(ctx, client.EndOptions{Discard: true}); err != nil {
				errs <- err
			}
		}()
	}
	wg.Wait()
	close(errs)
	n := 0
	for err := range errs {
		if n++; n <= 5 {
			t.Error(err)
		}
	}
	if n > 5 {
		t.Errorf("... and %d more errors", n-5)
	}
	// Idle connections of this client hold daemon fds: drop them first.
	c.Close()
	var fds, kids, mounts int
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		fds, kids, mounts = countFDs(t, pid), countChildren(t, pid), mountsUnder(t, d.store)
		if fds <= fdsBefore && kids <= kidsBefore && mounts <= mountsBefore {
			return
		}
	}
	t.Errorf("leaks: fds %d -> %d, children %d -> %d, mounts %d -> %d\nopen fds:\n%s", fdsBefore, fds, kidsBefore, kids, mountsBefore, mounts, fdTargets(pid))
}

// fdTargets lists what a process's file descriptors point at.
func fdTargets(pid int) string {
	dir := fmt.Sprintf("/proc/%d/fd", pid)
	es, _ := os.ReadDir(dir)
	var b strings.Builder
	for _, e := range es {
		l, _ := os.Readlink(filepath.Join(dir, e.Name()))
		fmt.Fprintf(&b, "  %s -> %s\n", e.Name(), l)
	}
	return b.String()
}

// maxSQLiteFDs bounds the descriptors the Store's SQLite connection pools
// may hold open (the writer and up to 8 readers, each with the database and
// its WAL, plus the shared memory file): they are a bounded pool that grows
// with concurrency, not a leak.
const maxSQLiteFDs = 2*(1+8) + 1

// countFDs counts a process's file descriptors other than the Store's
// SQLite connections, which must stay within maxSQLiteFDs.
func countFDs(t *testing.T, pid int) int {
	dir := fmt.Sprintf("/proc/%d/fd", pid)
	es, err := os.ReadDir(dir)
	require.NoError(t, err)
	n, sqlite := 0, 0
	for _, e := range es {
		l, _ := os.Readlink(filepath.Join(dir, e.Name()))
		if strings.Contains(filepath.Base(l), "store.db") {
			sqlite++
			continue
		}
		n++
	}
	if sqlite > maxSQLiteFDs {
		t.Errorf("%d descriptors on the Store's database files, more than its pools allow (%d)", sqlite, maxSQLiteFDs)
	}
	return n
}

// settledFDs waits until a process's descriptor count (countFDs) has not
// changed for a second, and returns it.
func settledFDs(t *testing.T, pid int) int {
	n, since := countFDs(t, pid), time.Now()
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline) && time.Since(since) < time.Second; {
		time.Sleep(100 * time.Millisecond)
		if m := countFDs(t, pid); m != n {
			n, since = m, time.Now()
		}
	}
	return n
}

// countChildren counts the processes whose parent is pid.
func countChildren(t *testing.T, pid int) int {
	kids, err := proctest.Children(pid)
	require.NoError(t, err)
	return len(kids)
}

// TestBadInputReal sends hostile requests to a real daemon: each gets a 4xx
// with a JSON error, and neither the host nor the workspace changes.
func TestBadInputReal(t *testing.T) {
	d := startDaemon(t, "", "--max-upload", "1048576")
	ctx := t.Context()
	c := d.client(t)
	ws := workspaceInP(t, c)
	outside := t.TempDir() // a host directory the workspace must not reach
	os.WriteFile(filepath.Join(outside, "secret"), []byte("host secret"), 0o600)
	res, err := ws.Exec(ctx, "ln -s "+outside+" abs && ln -s ../../../../../../../.. up && echo keep > keep.txt", client.ExecOptions{})
	if err != nil || res.ExitCode != 0 {
		t.Fatalf("setup exec: %+v %v", res, err)
	}
	_, err = ws.Commit(ctx, "links")
	require.NoError(t, err)

	hc := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var dd net.Dialer
		return dd.DialContext(ctx, "unix", d.socket)
	}}}
	base := "http://layerfsd/v1/workspaces/" + ws.ID()
	var evilTar bytes.Buffer
	tw := tar.NewWriter(&evilTar)
	for _, h := range []*tar.Header{
		{Name: "fine.txt", Typeflag: tar.TypeReg, Size: 1, Mode: 0o644},
		{Name: "../../escape.txt", Typeflag: tar.TypeReg, Size: 1, Mode: 0o644},
	} {
		tw.WriteHeader(h)
		tw.Write([]byte("x"))
	}
	tw.Close()
	var fineTar bytes.Buffer
	tw = tar.NewWriter(&fineTar)
	tw.WriteHeader(&tar.Header{Name: "fine.txt", Typeflag: tar.TypeReg, Size: 1, Mode: 0o644})
	tw.Write([]byte("x"))
	tw.Close()
	var linkTar bytes.Buffer
	tw = tar.NewWriter(&linkTar)
	tw.WriteHeader(&tar.Header{Name: "l", Typeflag: tar.TypeSymlink, Linkname: outside, Mode: 0o777})
	tw.WriteHeader(&tar.Header{Name: "l/planted", Typeflag: tar.TypeReg, Size: 1, Mode: 0o644})
	tw.Write([]byte("x"))
	tw.Close()

	for _, c := range []struct {
		name, method, url string
		body              io.Reader
		status            int
	}{
		{"write through an absolute symlink", "PUT", base + "/files/abs/planted", strings.NewReader("x"), 0},
		{"write through a climbing symlink", "PUT", base + "/files/up/tmp/planted", strings.NewReader("x"), 0},
		{"read through an absolute symlink", "GET", base + "/files/abs/secret", nil, 0},
		{"read through a climbing symlink", "GET", base + "/files/up/etc/hostname", nil, 0},
		{"tar into a symlink", "PUT", base + "/tar?path=abs", bytes.NewReader(fineTar.Bytes()), 0},
		{"read dotdot", "GET", base + "/files/%2e%2e/%2e%2e/etc/passwd", nil, 400},
		{"write absolute", "PUT", base + "/files/%2Fetc%2Fplanted", strings.NewReader("x"), 400},
		{"tar with dotdot", "PUT", base + "/tar", bytes.NewReader(evilTar.Bytes()), 400},
		{"tar through its own symlink", "PUT", base + "/tar", bytes.NewReader(linkTar.Bytes()), 400},
		{"tar path dotdot", "GET", base + "/tar?path=../..", nil, 400},
		{"negative timeout", "POST", base + "/execs", strings.NewReader(`{"body": "true", "timeout_ms": -1}`), 400},
		{"unknown field", "POST", base + "/execs", strings.NewReader(`{"body": "true", "timeout": 5}`), 400},
		{"unknown workspace", "POST", "http://layerfsd/v1/workspaces/ws-000000000000/execs", strings.NewReader(`{"body": "true"}`), 404},
		{"project name with a slash", "POST", "http://layerfsd/v1/projects", strings.NewReader(`{"name": "a/b"}`), 400},
	} {
		t.Run(c.name, func(t *testing.T) {
			req, _ := http.NewRequest(c.method, c.url, c.body)
			resp, err := hc.Do(req)
			require.NoError(t, err)
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			var eb wire.ErrorBody
			if resp.StatusCode < 400 || resp.StatusCode >= 500 || json.Unmarshal(b, &eb) != nil || eb.Error.Code == "" {
				t.Errorf("status %d, body %q: want a 4xx JSON error", resp.StatusCode, b)
			}
			if c.status != 0 && resp.StatusCode != c.status {
				t.Errorf("status %d, want %d (%s)", resp.StatusCode, c.status, b)
			}
		})
	}
	// 2 GiB bodies are refused, streamed and never held whole.
	for _, length := range []int64{2 << 30, -1} {
		req, _ := http.NewRequest("PUT", base+"/files/big", io.LimitReader(zeroReader{}, 2<<30))
		req.ContentLength = length
		resp, err := hc.Do(req)
		require.NoError(t, err, "2 GiB upload (length %d)", length)
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 413 || !strings.Contains(string(b), wire.CodeTooLarge) {
			t.Errorf("2 GiB upload (length %d): %d %s", length, resp.StatusCode, b)
		}
	}

	// Nothing reached the host, and the workspace is as committed.
	if es, _ := os.ReadDir(outside); len(es) != 1 {
		t.Errorf("the outside directory changed: %v", es)
	}
	for _, p := range []string{"/etc/planted", "/tmp/planted", "/escape.txt"} {
		_, err := os.Lstat(p)
		assert.ErrorIs(t, err, os.ErrNotExist, "%s was created on the host", p)
	}
	st, err := ws.Status(ctx)
	if err != nil || len(st.Changes) != 0 {
		t.Errorf("workspace changed: %+v %v", st.Changes, err)
	}
}

type zeroReader struct{}

func (zeroReader) Read(p []byte) (int, error) { clear(p); return len(p), nil }

// BenchmarkExecTrue is `true` through the SDK against a real daemon: the
// wall time a client sees, and (reported) the daemon's receipt of it.
func BenchmarkExecTrue(b *testing.B) {
	testenv.RequireFUSE(b)
	store := filepath.Join(b.TempDir(), "store")
	cmd := exec.Command(daemonBinaryB(b), "serve", "--store", store)
	require.NoError(b, cmd.Start())
	defer func() { cmd.Process.Signal(syscall.SIGTERM); cmd.Wait() }()
	ctx := b.Context()
	var c *client.Client
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		var err error
		if c, err = client.Dial(ctx, "unix://"+filepath.Join(store, SocketName)); err == nil {
			break
		}
		if time.Now().After(deadline) {
			b.Fatal(err)
		}
	}
	ws := workspaceInP(b, c)
	var launch, wall int64
	for b.Loop() {
		res, err := ws.ExecArgv(ctx, []string{"true"}, client.ExecOptions{})
		if err != nil || res.ExitCode != 0 {
			b.Fatal(res, err)
		}
		launch += res.Receipt.LaunchNs
		wall += res.Receipt.WallNs
	}
	b.ReportMetric(float64(wall)/float64(b.N)/1e3, "daemon-wall-µs/op")
	b.ReportMetric(float64(launch)/float64(b.N)/1e3, "launch-µs/op")
}
