package main

import (
	"context"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"layerfs.dev/layerfs/client"
	"layerfs.dev/layerfs/internal/api"
	"layerfs.dev/layerfs/internal/enginetest"
	"layerfs.dev/layerfs/wire"
)

// The test binary serves as the sandbox init of the engines that
// enginetest starts in it.
func TestMain(m *testing.M) { enginetest.Main(m) }

var quiet = slog.New(slog.DiscardHandler)

// workspaceInP creates project "p" (unless it exists) and a workspace on
// its main branch.
func workspaceInP(tb testing.TB, c *client.Client) *client.Workspace {
	tb.Helper()
	ctx := tb.Context()
	c.CreateProject(ctx, wire.CreateProject{Name: "p"})
	ws, err := c.CreateWorkspace(ctx, client.WorkspaceSpec{Project: "p", Branch: "main"})
	require.NoError(tb, err)
	return ws
}

// execOutcome is what an exec returned.
type execOutcome struct {
	res *client.ExecResult
	err error
}

// inBackground runs exec in a goroutine; its outcome arrives on the
// channel.
func inBackground(exec func() (*client.ExecResult, error)) <-chan execOutcome {
	done := make(chan execOutcome, 1)
	go func() {
		res, err := exec()
		done <- execOutcome{res, err}
	}()
	return done
}

func TestListenUnixMode(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "d.sock")
	l, err := listenUnix(sock)
	require.NoError(t, err)
	defer l.Close()
	fi, err := os.Lstat(sock)
	require.NoError(t, err)
	if fi.Mode()&os.ModeSocket == 0 || fi.Mode().Perm() != 0o600 {
		t.Errorf("socket mode %v, want a socket with 0600", fi.Mode())
	}
}

func TestClaimSocket(t *testing.T) {
	ctx := t.Context()
	dir := t.TempDir()

	// A stale socket (its daemon died without removing it) is removed.
	stale := filepath.Join(dir, "stale.sock")
	l, err := net.Listen("unix", stale)
	require.NoError(t, err)
	l.(*net.UnixListener).SetUnlinkOnClose(false)
	l.Close()
	_, err = os.Lstat(stale)
	require.NoError(t, err, "the stale socket is not there to test with")
	require.NoError(t, claimSocket(ctx, stale, quiet), "stale socket")
	_, err = os.Lstat(stale)
	assert.ErrorIs(t, err, os.ErrNotExist, "stale socket still there")

	// A live one is refused and left alone.
	live := filepath.Join(dir, "live.sock")
	l, err = net.Listen("unix", live)
	require.NoError(t, err)
	defer l.Close()
	if err := claimSocket(ctx, live, quiet); err == nil || !strings.Contains(err.Error(), "another daemon answers") {
		t.Errorf("live socket: %v", err)
	}
	_, err = os.Lstat(live)
	assert.NoError(t, err, "live socket removed")

	// Anything else at the path is not ours to remove.
	file := filepath.Join(dir, "file")
	os.WriteFile(file, []byte("x"), 0o600)
	if err := claimSocket(ctx, file, quiet); err == nil || !strings.Contains(err.Error(), "not a socket") {
		t.Errorf("regular file: %v", err)
	}
	assert.Error(t, claimSocket(ctx, "/"+strings.Repeat("x", 120), quiet), "a socket path over 107 bytes was accepted")
}

func TestLockStore(t *testing.T) {
	dir := t.TempDir()
	a, err := lockStore(dir, slog.New(slog.DiscardHandler))
	require.NoError(t, err)
	if _, err := lockStore(dir, slog.New(slog.DiscardHandler)); err == nil || !strings.Contains(err.Error(), "another layerfsd") {
		t.Errorf("second lock: %v", err)
	}
	a.Close()
	b, err := lockStore(dir, slog.New(slog.DiscardHandler))
	require.NoError(t, err, "lock after release")
	b.Close()
}

func TestReadToken(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "tok")
	os.WriteFile(good, []byte("  s3cret\n"), 0o600)
	if tok, err := readToken(good, quiet); err != nil || tok != "s3cret" {
		t.Errorf("token %q, %v", tok, err)
	}
	for name, content := range map[string]string{"empty": "\n", "spaces": "a b"} {
		p := filepath.Join(dir, name)
		os.WriteFile(p, []byte(content), 0o600)
		_, err := readToken(p, quiet)
		assert.Error(t, err, "%s token accepted", name)
	}
	_, err := readToken("", quiet)
	assert.Error(t, err, "TCP without a token file accepted")
}

// recordingEngine is the real engine, recording whether the daemon's
// shutdown sequence drained it and shut it down.
type recordingEngine struct {
	*enginetest.Engine
	drained, shut bool
}

func (e *recordingEngine) Drain(ctx context.Context) error {
	e.drained = true
	return e.Engine.Drain(ctx)
}

func (e *recordingEngine) Shutdown(ctx context.Context) error {
	e.shut = true
	return e.Engine.Shutdown(ctx)
}

// TestShutdownGrace: a running exec finishes within the grace period while
// new work is refused; past the grace period the exec is killed, and
// answered as unavailable. Each case shuts its own engine down.
func TestShutdownGrace(t *testing.T) {
	for _, c := range []struct {
		name      string
		sleep     string
		grace     time.Duration
		wantKill  bool
		maxWithin time.Duration
	}{
		{"finishes", "0.4", 10 * time.Second, false, 5 * time.Second},
		{"killed", "60", 200 * time.Millisecond, true, 5 * time.Second},
	} {
		t.Run(c.name, func(t *testing.T) {
			ctx := t.Context()
			eng := &recordingEngine{Engine: enginetest.New(t)}
			srv := api.NewServer(eng, api.Options{})
			sock := filepath.Join(t.TempDir(), "d.sock")
			l, err := listenUnix(sock)
			require.NoError(t, err)
			hs := newHTTPServer(srv.Handler(api.ListenerOptions{}), quiet)
			go hs.Serve(l)
			cl, err := client.Dial(ctx, "unix://"+sock)
			require.NoError(t, err)
			ws := workspaceInP(t, cl)
			done := inBackground(func() (*client.ExecResult, error) {
				return ws.ExecArgv(ctx, []string{"sleep", c.sleep}, client.ExecOptions{})
			})
			for eng.Running() == 0 {
				time.Sleep(5 * time.Millisecond)
			}
			stopped := make(chan error, 1)
			start := time.Now()
			go func() { stopped <- shutdown(srv, eng, []*http.Server{hs}, c.grace, quiet) }()
			for !srv.Draining() {
				time.Sleep(time.Millisecond)
			}
			if _, err := ws.Exec(ctx, "echo new", client.ExecOptions{}); err != nil && !client.IsUnavailable(err) {
				t.Errorf("new exec while draining: %v, want unavailable", err)
			}
			o := <-done
			if c.wantKill {
				assert.True(t, client.IsUnavailable(o.err), "killed exec: %+v, %v; want unavailable", o.res, o.err)
			} else if assert.NoError(t, o.err, "running exec") && o.res.Signal != "" {
				t.Errorf("exec result %+v, want it not killed", o.res)
			}
			assert.NoError(t, <-stopped, "shutdown")
			if time.Since(start) > c.maxWithin {
				t.Errorf("shutdown took %v", time.Since(start))
			}
			if !eng.drained || !eng.shut {
				t.Errorf("engine drained %v, shut down %v", eng.drained, eng.shut)
			}
			_, err = net.Dial("unix", sock)
			assert.Error(t, err, "the socket still answers after shutdown")
		})
	}
}

// TestDying: a live process is not dying; one that has exited and is not
// yet reaped (a zombie) is.
func TestDying(t *testing.T) {
	if dying(os.Getpid()) {
		t.Error("this process is said to be dying")
	}
	cmd := exec.Command("true")
	require.NoError(t, cmd.Start())
	defer cmd.Wait()
	for deadline := time.Now().Add(30 * time.Second); !dying(cmd.Process.Pid); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("an exited, unreaped child is not said to be dying")
		}
	}
}

func TestCheckAdvertise(t *testing.T) {
	for _, tc := range []struct {
		addr, tcp string
		ok        bool
	}{
		{"", "", true},
		{"tcp://10.0.0.5:7070", ":7070", true},
		{"http://node-a.example:7070", ":7070", true},
		{"tcp://[fd00::5]:7070", ":7070", true},
		{"tcp://10.0.0.5:7070", "", false}, // no TCP listener
		{"10.0.0.5:7070", ":7070", false},
		{"tcp://10.0.0.5", ":7070", false},
		{"tcp://10.0.0.5:0", ":7070", false},
		{"tcp://0.0.0.0:7070", ":7070", false},
		{"tcp://10.0.0.5:7070/v1", ":7070", false},
		{"unix:///run/layerfsd.sock", ":7070", false},
	} {
		err := checkAdvertise(tc.addr, tc.tcp)
		assert.Equal(t, tc.ok, err == nil, "checkAdvertise(%q, %q): %v", tc.addr, tc.tcp, err)
	}
}
