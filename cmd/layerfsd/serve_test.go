package main

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"layerfs.dev/layerfs/client"
	"layerfs.dev/layerfs/internal/api"
	"layerfs.dev/layerfs/internal/api/apitest"
	"layerfs.dev/layerfs/wire"
)

var quiet = slog.New(slog.DiscardHandler)

// workspaceInP creates project "p" (unless it exists) and a workspace on
// its main branch.
func workspaceInP(tb testing.TB, c *client.Client) *client.Workspace {
	tb.Helper()
	ctx := context.Background()
	c.CreateProject(ctx, wire.CreateProject{Name: "p"})
	ws, err := c.CreateWorkspace(ctx, client.WorkspaceSpec{Project: "p", Branch: "main"})
	if err != nil {
		tb.Fatal(err)
	}
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
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	fi, err := os.Lstat(sock)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode()&os.ModeSocket == 0 || fi.Mode().Perm() != 0o600 {
		t.Errorf("socket mode %v, want a socket with 0600", fi.Mode())
	}
}

func TestClaimSocket(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()

	// A stale socket (its daemon died without removing it) is removed.
	stale := filepath.Join(dir, "stale.sock")
	l, err := net.Listen("unix", stale)
	if err != nil {
		t.Fatal(err)
	}
	l.(*net.UnixListener).SetUnlinkOnClose(false)
	l.Close()
	if _, err := os.Lstat(stale); err != nil {
		t.Fatalf("the stale socket is not there to test with: %v", err)
	}
	if err := claimSocket(ctx, stale, quiet); err != nil {
		t.Fatalf("stale socket: %v", err)
	}
	if _, err := os.Lstat(stale); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("stale socket still there: %v", err)
	}

	// A live one is refused and left alone.
	live := filepath.Join(dir, "live.sock")
	l, err = net.Listen("unix", live)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if err := claimSocket(ctx, live, quiet); err == nil || !strings.Contains(err.Error(), "another daemon answers") {
		t.Errorf("live socket: %v", err)
	}
	if _, err := os.Lstat(live); err != nil {
		t.Errorf("live socket removed: %v", err)
	}

	// Anything else at the path is not ours to remove.
	file := filepath.Join(dir, "file")
	os.WriteFile(file, []byte("x"), 0o600)
	if err := claimSocket(ctx, file, quiet); err == nil || !strings.Contains(err.Error(), "not a socket") {
		t.Errorf("regular file: %v", err)
	}
	if err := claimSocket(ctx, "/"+strings.Repeat("x", 120), quiet); err == nil {
		t.Error("a socket path over 107 bytes was accepted")
	}
}

func TestLockStore(t *testing.T) {
	dir := t.TempDir()
	a, err := lockStore(dir, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := lockStore(dir, slog.New(slog.DiscardHandler)); err == nil || !strings.Contains(err.Error(), "another layerfsd") {
		t.Errorf("second lock: %v", err)
	}
	a.Close()
	b, err := lockStore(dir, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatalf("lock after release: %v", err)
	}
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
		if _, err := readToken(p, quiet); err == nil {
			t.Errorf("%s token accepted", name)
		}
	}
	if _, err := readToken("", quiet); err == nil {
		t.Error("TCP without a token file accepted")
	}
}

// testEngine adapts the API's engine double to what the daemon needs, to
// test the shutdown sequence; the real engine is tested in e2e_test.go.
type testEngine struct {
	*apitest.Engine
	drained, shut bool
}

func (e *testEngine) Recover(context.Context) error  { return nil }
func (e *testEngine) Drain(context.Context) error    { e.drained = true; return nil }
func (e *testEngine) Shutdown(context.Context) error { e.shut = true; return nil }
func (e *testEngine) Platforms() []string            { return []string{"test"} }
func (e *testEngine) LiveWorkspaces() int            { return 0 }

// TestShutdownGrace: a running exec finishes within the grace period while
// new work is refused; past the grace period the exec is killed.
func TestShutdownGrace(t *testing.T) {
	for _, c := range []struct {
		name      string
		sleepMs   string
		grace     time.Duration
		wantKill  bool
		maxWithin time.Duration
	}{
		{"finishes", "400", 10 * time.Second, false, 5 * time.Second},
		{"killed", "60000", 200 * time.Millisecond, true, 5 * time.Second},
	} {
		t.Run(c.name, func(t *testing.T) {
			ctx := context.Background()
			eng := &testEngine{Engine: apitest.New()}
			srv := api.NewServer(eng, api.Options{})
			sock := filepath.Join(t.TempDir(), "d.sock")
			l, err := listenUnix(sock)
			if err != nil {
				t.Fatal(err)
			}
			hs := newHTTPServer(srv.Handler(api.ListenerOptions{}), quiet)
			go hs.Serve(l)
			cl, err := client.Dial(ctx, "unix://"+sock)
			if err != nil {
				t.Fatal(err)
			}
			ws := workspaceInP(t, cl)
			done := inBackground(func() (*client.ExecResult, error) {
				return ws.ExecArgv(ctx, []string{"sleep", c.sleepMs}, client.ExecOptions{})
			})
			for eng.Running.Load() == 0 {
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
			if o.err != nil {
				t.Fatalf("running exec: %v", o.err)
			}
			if killed := o.res.Signal != ""; killed != c.wantKill {
				t.Errorf("exec result %+v, want killed=%v", o.res, c.wantKill)
			}
			if err := <-stopped; err != nil {
				t.Errorf("shutdown: %v", err)
			}
			if time.Since(start) > c.maxWithin {
				t.Errorf("shutdown took %v", time.Since(start))
			}
			if !eng.drained || !eng.shut {
				t.Errorf("engine drained %v, shut down %v", eng.drained, eng.shut)
			}
			if _, err := net.Dial("unix", sock); err == nil {
				t.Error("the socket still answers after shutdown")
			}
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
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Wait()
	for deadline := time.Now().Add(30 * time.Second); !dying(cmd.Process.Pid); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("an exited, unreaped child is not said to be dying")
		}
	}
}
