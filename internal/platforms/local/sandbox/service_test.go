//go:build linux

package sandbox

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"layerfs.dev/layerfs/internal/platforms"
	"layerfs.dev/layerfs/wire/errclass"
)

// syncBuffer is a bytes.Buffer safe for a service's output goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func startService(t *testing.T, s *Session, ws, body string) (*Service, *syncBuffer) {
	t.Helper()
	out := &syncBuffer{}
	sv, err := s.Start(t.Context(), shellConfig(ws, body), out, out)
	require.NoError(t, err, "start %q", body)
	return sv, out
}

// TestServiceBesideExecs: a service keeps running after Start returns; an
// exec of the same Session runs in its sandbox (it sees the service's
// process, its /tmp file, its IPC object and its port on lo, and may kill
// it), and the service's end is recorded before Done is closed.
func TestServiceBesideExecs(t *testing.T) {
	l := sessionLauncher(t, &keptTracer{})
	s := l.NewSession()
	defer s.Close(context.Background())
	ws := t.TempDir()

	sv, out := startService(t, s, ws, `echo started; touch /tmp/svc; ipcmk -M 4096 >/dev/null; exec python3 -c '
import http.server, socketserver
socketserver.TCPServer.allow_reuse_address = True
http.server.HTTPServer(("127.0.0.1", 8000), http.server.SimpleHTTPRequestHandler).serve_forever()'`)
	assert.Greater(t, sv.Pid(), 1)
	probe := `for i in $(seq 100); do python3 -c 'import urllib.request; urllib.request.urlopen("http://127.0.0.1:8000/")' 2>/dev/null && break; sleep 0.05; done; ` +
		`echo pids $(pgrep -c python3); ls /tmp; ipcs -m | grep -c '^0x'; python3 -c 'import urllib.request; print(urllib.request.urlopen("http://127.0.0.1:8000/").status)'`
	for i := range 3 { // the reset between execs leaves the service's state
		res, o, e := sessionRun(t, s, shellConfig(ws, probe))
		require.Equal(t, 0, res.ExitCode, "exec %d: %q %q", i, o, e)
		assert.Equal(t, "pids 1\nsvc\n1\n200\n", o, "exec %d", i)
	}
	assert.Contains(t, out.String(), "started\n")
	assert.Len(t, s.Services(), 1)

	// An exec's leftovers in its own group go with it; the service stays.
	res, o, e := sessionRun(t, s, shellConfig(ws, "sleep 100 & echo $!"))
	require.Equal(t, 0, res.ExitCode, "%q", e)
	res, o2, _ := sessionRun(t, s, shellConfig(ws, "kill -0 "+strings.TrimSpace(o)+" 2>/dev/null && echo alive || echo gone; pgrep -c python3"))
	assert.Equal(t, "gone\n1\n", o2, "res %+v", res)

	// An exec kills the service; its end is recorded.
	res, _, e = sessionRun(t, s, shellConfig(ws, "kill -TERM "+strconv.Itoa(sv.Pid())))
	require.Equal(t, 0, res.ExitCode, "%q", e)
	select {
	case <-sv.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("the service did not end after an exec killed it")
	}
	ex := sv.Exit()
	assert.Equal(t, platforms.ReasonSignaled, ex.Reason)
	assert.Equal(t, "SIGTERM", ex.Signal)
	assert.Equal(t, 128+15, ex.ExitCode)

	// With no service left, execs get a fresh sandbox again: /tmp empty.
	require.Eventually(t, func() bool {
		s.mu.Lock()
		defer s.mu.Unlock()
		return s.res == nil
	}, 5*time.Second, 10*time.Millisecond)
	_, o, _ = sessionRun(t, s, shellConfig(ws, "ls -A /tmp"))
	assert.Empty(t, o)
}

// TestServiceStartErrors: a command that cannot start answers Start with
// the reason, and nothing is left running.
func TestServiceStartErrors(t *testing.T) {
	l := sessionLauncher(t, &keptTracer{})
	s := l.NewSession()
	defer s.Close(context.Background())
	ws := t.TempDir()
	var out syncBuffer
	_, err := s.Start(t.Context(), Config{Workspace: ws, Spec: platforms.ExecSpec{Argv: []string{"no-such-command"}}}, &out, &out)
	require.ErrorIs(t, err, platforms.ErrNotStarted)
	require.True(t, errors.Is(err, errclass.Invalid), "%v", err)
	assert.Contains(t, err.Error(), "no-such-command")

	// Beside a running service too.
	sv, _ := startService(t, s, ws, "exec sleep 1000")
	_, err = s.Start(t.Context(), Config{Workspace: ws, Spec: platforms.ExecSpec{Argv: []string{"/nonexistent/x"}}}, &out, &out)
	require.ErrorIs(t, err, platforms.ErrNotStarted)
	assert.Len(t, s.Services(), 1)

	// An open files limit beside services is refused.
	c := shellConfig(ws, "true")
	c.Spec.OpenFiles = 64
	_, err = s.Run(t.Context(), c, &out, &out)
	require.ErrorIs(t, err, ErrResidentJob)
	require.NoError(t, sv.Signal(syscall.SIGKILL))
	<-sv.Done()
	assert.Equal(t, "SIGKILL", sv.Exit().Signal)
}

// TestServiceLimitsAndOOM: the sandbox's memory limit holds for services
// and execs together, and a service the OOM killer takes is reported so.
func TestServiceLimitsAndOOM(t *testing.T) {
	l := sessionLauncher(t, &keptTracer{})
	if mem, _ := l.Limits(); !mem {
		t.Skip("no memory cgroup on this host")
	}
	s := l.NewSession()
	defer s.Close(context.Background())
	ws := t.TempDir()
	c := shellConfig(ws, `python3 -c '
import time
b = bytearray(48 << 20)
for i in range(0, len(b), 4096): b[i] = 1
print("holding", flush=True)
time.sleep(1000)'`)
	c.Spec.MemoryBytes = 80 << 20
	out := &syncBuffer{}
	holder, err := s.Start(t.Context(), c, out, out)
	require.NoError(t, err)
	require.Eventually(t, func() bool { return strings.Contains(out.String(), "holding") }, 10*time.Second, 20*time.Millisecond)

	// 32 MiB more in an exec goes past the sandbox's 80 MiB, which the
	// service and the exec share: the OOM killer takes the largest, the
	// service, and the exec goes on.
	res, o, e := sessionRun(t, s, shellConfig(ws, `python3 -c '
import time
b = bytearray(32 << 20)
for i in range(0, len(b), 4096): b[i] = 1
time.sleep(1)
print("done")'`))
	select {
	case <-holder.Done():
	case <-time.After(10 * time.Second):
		t.Fatalf("the service was not killed: the limit does not hold for the service and the exec together (exec %+v %q %q)", res, o, e)
	}
	assert.Equal(t, platforms.ReasonOOM, holder.Exit().Reason, "%+v", holder.Exit())
	assert.Equal(t, "SIGKILL", holder.Exit().Signal)
	assert.Equal(t, 0, res.ExitCode, "the exec: %q %q", o, e)
}

// TestServiceExecTimeout: an exec beside a service that overstays its
// timeout is killed (its group), and the service runs on.
func TestServiceExecTimeout(t *testing.T) {
	l := sessionLauncher(t, &keptTracer{})
	s := l.NewSession()
	defer s.Close(context.Background())
	ws := t.TempDir()
	sv, _ := startService(t, s, ws, "exec sleep 1000")
	c := shellConfig(ws, "sleep 30")
	c.Spec.Timeout = 300 * time.Millisecond
	t0 := time.Now()
	res, err := s.Run(t.Context(), c, io.Discard, io.Discard)
	require.NoError(t, err)
	assert.True(t, res.TimedOut, "%+v", res)
	assert.Less(t, time.Since(t0), 10*time.Second)
	// A canceled exec is killed too.
	ctx, cancel := context.WithTimeout(t.Context(), 300*time.Millisecond)
	defer cancel()
	_, err = s.Run(ctx, shellConfig(ws, "sleep 30"), io.Discard, io.Discard)
	require.ErrorIs(t, err, context.DeadlineExceeded)
	select {
	case <-sv.Done():
		t.Fatalf("the service ended: %+v", sv.Exit())
	default:
	}
	_, o, _ := sessionRun(t, s, shellConfig(ws, "pgrep -cx sleep"))
	assert.Equal(t, "1\n", o, "only the service's sleep is left")
}

// TestServiceSessionClose: closing the Session ends every service (their
// ends recorded as the sandbox's) and leaves nothing on the host.
func TestServiceSessionClose(t *testing.T) {
	l := sessionLauncher(t, &keptTracer{})
	s := l.NewSession()
	ws := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(ws, "f"), nil, 0o644))
	a, _ := startService(t, s, ws, "exec sleep 1000")
	b, _ := startService(t, s, ws, "trap '' TERM; while :; do sleep 1; done")
	require.NoError(t, s.Close(t.Context()))
	for _, sv := range []*Service{a, b} {
		select {
		case <-sv.Done():
		default:
			t.Fatal("a service still runs after Close")
		}
		assert.Equal(t, platforms.ReasonSandboxEnded, sv.Exit().Reason)
	}
	require.NoError(t, l.Settle(t.Context()))
	leaks, err := l.Leaks(t.Context())
	require.NoError(t, err)
	assert.Empty(t, leaks)
}

// TestServiceTerminalBeside: an exec on a terminal runs beside a service,
// in its sandbox, with its own pseudo-terminal, size and exit code.
func TestServiceTerminalBeside(t *testing.T) {
	l := sessionLauncher(t, &keptTracer{})
	s := l.NewSession()
	defer s.Close(context.Background())
	ws := t.TempDir()
	startService(t, s, ws, "exec sleep 1000")
	for i := range 2 {
		var out syncBuffer
		c := shellConfig(ws, "for i in $(seq 100); do pgrep -x sleep >/dev/null && break; sleep 0.02; done; tty; stty size; pgrep -cx sleep; exit 3")
		c.Spec.Terminal = &platforms.Terminal{Rows: 30, Cols: 100}
		res, err := s.Run(t.Context(), c, &out, &out)
		require.NoError(t, err)
		assert.Equal(t, 3, res.ExitCode, "run %d: %q", i, out.String())
		got := strings.ReplaceAll(out.String(), "\r", "")
		assert.Regexp(t, `^/dev/pts/\d+\n30 100\n1\n$`, got, "run %d", i)
	}
	assert.Len(t, s.Services(), 1)
}
