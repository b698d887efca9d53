package client_test

import (
	"bytes"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"layerfs.dev/layerfs/client"
	"layerfs.dev/layerfs/wire"
)

// screen collects output written from another goroutine.
type screen struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (s *screen) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.buf.Write(p)
}

func (s *screen) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.buf.String()
}

func (s *screen) waitFor(t *testing.T, text string) {
	t.Helper()
	for deadline := time.Now().Add(time.Minute); !strings.Contains(s.String(), text); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("never saw %q; got %q", text, s.String())
		}
	}
}

func attachWorkspace(t *testing.T) *client.Workspace {
	c := dial(t)
	ws, err := c.CreateWorkspace(t.Context(), client.WorkspaceSpec{Project: project(t, c), Branch: "main"})
	require.NoError(t, err)
	t.Cleanup(func() { _ = ws.End(t.Context(), client.EndOptions{Discard: true}) })
	return ws
}

// TestAttachStreamsStdin: an attached exec reads its input as it is
// written, and its output and exit code come back.
func TestAttachStreamsStdin(t *testing.T) {
	ws := attachWorkspace(t)
	out := &screen{}
	a, err := ws.Attach(t.Context(), []string{"sh", "-c", "read a; echo got-$a; read b; echo got-$b >&2; exit 2"},
		client.AttachOptions{ExecOptions: client.ExecOptions{Stdout: out}})
	require.NoError(t, err)
	_, err = a.Write([]byte("one\n"))
	require.NoError(t, err)
	out.waitFor(t, "got-one")
	_, err = a.Write([]byte("two\n"))
	require.NoError(t, err)
	require.NoError(t, a.CloseStdin())
	res, err := a.Wait()
	require.NoError(t, err)
	assert.Equal(t, 2, res.ExitCode)
	assert.Equal(t, "got-one\n", out.String())
	assert.Equal(t, "got-two\n", string(res.Stderr), "stderr left nil comes in the result")
}

// TestTerminal: a shell on a terminal of the sandbox's own, resized,
// interrupted by Ctrl-C, and its exit code back.
func TestTerminal(t *testing.T) {
	ws := attachWorkspace(t)
	out := &screen{}
	term, err := ws.Terminal(t.Context(), []string{"bash", "--norc", "--noprofile", "-i"}, wire.TerminalSize{Rows: 30, Cols: 90}, out)
	require.NoError(t, err)
	type_ := func(s string) {
		_, err := term.Write([]byte(s))
		require.NoError(t, err)
	}
	type_("tty; stty size\n")
	out.waitFor(t, "30 90")
	require.NoError(t, term.Resize(50, 150))
	time.Sleep(100 * time.Millisecond)
	type_("stty size\n")
	out.waitFor(t, "50 150")
	type_("sleep 60; echo slept-$((6*7))\n")
	time.Sleep(500 * time.Millisecond)
	type_("\x03echo back-$((6*7))\n")
	out.waitFor(t, "back-42")
	type_("exit 7\n")
	res, err := term.Wait()
	require.NoError(t, err)
	assert.Equal(t, 7, res.ExitCode)
	assert.Contains(t, out.String(), "/dev/pts/0")
	assert.NotContains(t, out.String(), "slept-42")
}

// TestTerminalClientVanishes: a terminal whose client drops the
// connection is hung up: its session gets SIGHUP, and nothing of it runs
// on.
func TestTerminalClientVanishes(t *testing.T) {
	ws := attachWorkspace(t)
	out := &screen{}
	term, err := ws.Terminal(t.Context(), []string{"bash", "-c", "trap 'echo hup > /workspace/hung-up; exit 0' HUP; echo ready; while :; do sleep 0.1; done"},
		wire.TerminalSize{}, out)
	require.NoError(t, err)
	out.waitFor(t, "ready")
	require.NoError(t, term.Close())
	var got []byte
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if got, err = ws.ReadFile(t.Context(), "hung-up"); err == nil {
			break
		}
	}
	assert.Equal(t, "hup\n", string(got), "the session got SIGHUP: %v", err)
	waitNoExecs(t, 10*time.Second)

	// A command that ignores the hang-up is killed after the grace.
	out = &screen{}
	term, err = ws.Terminal(t.Context(), []string{"bash", "-c", "trap '' HUP; echo ready; sleep 60"}, wire.TerminalSize{}, out)
	require.NoError(t, err)
	out.waitFor(t, "ready")
	require.NoError(t, term.Close())
	waitNoExecs(t, 20*time.Second)
}

// waitNoExecs waits until the daemon runs no exec (the test runs alone).
func waitNoExecs(t *testing.T, d time.Duration) {
	t.Helper()
	c := dial(t)
	for deadline := time.Now().Add(d); ; time.Sleep(50 * time.Millisecond) {
		st, err := c.Daemon(t.Context())
		require.NoError(t, err)
		if st.Execs == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d execs still run %v after their client left", st.Execs, d)
		}
	}
}

// TestAttachRefused: what the daemon refuses before the command starts is
// an ordinary typed error.
func TestAttachRefused(t *testing.T) {
	ws := attachWorkspace(t)
	_, err := ws.Attach(t.Context(), []string{"true"}, client.AttachOptions{ExecOptions: client.ExecOptions{Dir: "../.."}})
	assert.True(t, client.IsInvalid(err), "a dir above the root: %v", err)
	_, err = ws.Attach(t.Context(), []string{"true"}, client.AttachOptions{TTY: &wire.TerminalSize{Rows: 5000}})
	assert.True(t, client.IsInvalid(err), "a terminal too large: %v", err)
	_, err = ws.Attach(t.Context(), []string{"true"}, client.AttachOptions{ExecOptions: client.ExecOptions{Stdin: []byte("x")}})
	assert.True(t, client.IsInvalid(err), "stdin in the options: %v", err)
}
