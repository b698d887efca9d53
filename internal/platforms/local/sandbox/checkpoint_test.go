//go:build linux

package sandbox

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"layerfs.dev/layerfs/internal/criu"
	"layerfs.dev/layerfs/internal/seccomp"
	"layerfs.dev/layerfs/internal/testenv"
)

// checkpointLauncher is sessionLauncher's, where criu runs, with a
// statically linked init (a test binary is linked dynamically when cgo
// is on, and a checkpoint refuses that).
func checkpointLauncher(t *testing.T) *Launcher {
	t.Helper()
	testenv.RequireRoot(t)
	if _, err := criu.Binary(); err != nil {
		testenv.Skip(t, err.Error())
	}
	filter, err := seccomp.BPF()
	require.NoError(t, err)
	r := DefaultIDRange
	l := &Launcher{Exe: testenv.StaticInit(t), SyscallFilter: filter, UserNamespace: &r, Warm: 1}
	if _, err := l.UserNS(); err != nil {
		testenv.Skip(t, "no user namespace: "+err.Error())
	}
	t.Cleanup(func() { _ = l.Close(context.Background()) })
	return l
}

// counterServer is a python3 HTTP server on 127.0.0.1:8000 whose answer
// counts the requests it served: state in memory a restore gives back.
const counterServer = `echo started; exec python3 -c '
import http.server, socketserver
socketserver.TCPServer.allow_reuse_address = True
n = 0
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        global n
        n += 1
        b = str(n).encode()
        self.send_response(200); self.send_header("Content-Length", str(len(b))); self.end_headers(); self.wfile.write(b)
    def log_message(self, *a): pass
http.server.HTTPServer(("127.0.0.1", 8000), H).serve_forever()'`

// ask gets the server's count from an exec in the Session's sandbox.
func ask(t *testing.T, s *Session, ws string) string {
	t.Helper()
	_, o, e := sessionRun(t, s, shellConfig(ws, `for i in $(seq 200); do python3 -c 'import urllib.request; print(urllib.request.urlopen("http://127.0.0.1:8000/").read().decode())' 2>/dev/null && exit; sleep 0.02; done; echo no answer`))
	require.NotContains(t, o, "no answer", "stderr %q", e)
	return strings.TrimSpace(o)
}

// TestCheckpointRestore: a service with state in memory and a file in
// /tmp is checkpointed left running and restored into two fresh sandboxes
// of other Sessions (other workspaces): each answers from the state the
// checkpoint saw and goes on on its own, as the source does; their output
// reaches their own writers; ending them leaves nothing.
func TestCheckpointRestore(t *testing.T) {
	l := checkpointLauncher(t)
	src := l.NewSession()
	defer src.Close(context.Background())
	ws := t.TempDir()
	startService(t, src, ws, `echo tmp > /tmp/state; `+counterServer)
	require.Equal(t, "1", ask(t, src, ws))

	dir := t.TempDir()
	var frozen bool
	st, err := src.Checkpoint(t.Context(), CheckpointOptions{Dir: filepath.Join(dir, "img"), WorkDir: t.TempDir(),
		Frozen: func(context.Context) error { frozen = true; return nil }})
	require.NoError(t, err)
	assert.True(t, frozen)
	t.Logf("checkpoint: %+v", st)
	require.Equal(t, "2", ask(t, src, ws), "the source runs on")

	for i := range 2 {
		s := l.NewSession()
		defer s.Close(context.Background())
		ws2 := t.TempDir()
		require.NoError(t, os.WriteFile(filepath.Join(ws2, "mine"), []byte{'0' + byte(i)}, 0o644))
		out := &syncBuffer{}
		svcs, rst, err := s.Restore(t.Context(), Config{Workspace: ws2}, RestoreOptions{Dir: filepath.Join(dir, "img"), WorkDir: t.TempDir(),
			Output: func(int) (a, b io.Writer) { return out, out }})
		require.NoError(t, err)
		t.Logf("restore %d: %+v", i, rst)
		require.Len(t, svcs, 1)
		assert.Equal(t, "2", ask(t, s, ws2), "copy %d answers from the checkpoint's state", i)
		assert.Equal(t, "3", ask(t, s, ws2), "copy %d goes on on its own", i)
		_, o, _ := sessionRun(t, s, shellConfig(ws2, "cat /tmp/state mine"))
		assert.Equal(t, "tmp\n"+string(rune('0'+i)), o, "its /tmp from the checkpoint, its own workspace")
	}
	require.Equal(t, "3", ask(t, src, ws))
}

// TestCheckpointOfARestore: a restored sandbox is checkpointed in turn
// (its control socket renewed again) and restored: the fork of a fork
// answers from its parent's state; ending them all leaves nothing.
func TestCheckpointOfARestore(t *testing.T) {
	l := checkpointLauncher(t)
	src := l.NewSession()
	ws := t.TempDir()
	startService(t, src, ws, counterServer)
	require.Equal(t, "1", ask(t, src, ws))
	parent, all := src, []*Session{src}
	for gen := range 2 {
		dir := filepath.Join(t.TempDir(), "img")
		_, err := parent.Checkpoint(t.Context(), CheckpointOptions{Dir: dir, WorkDir: t.TempDir()})
		require.NoError(t, err, "generation %d", gen)
		child := l.NewSession()
		all = append(all, child)
		_, _, err = child.Restore(t.Context(), Config{Workspace: t.TempDir()}, RestoreOptions{Dir: dir, WorkDir: t.TempDir()})
		require.NoError(t, err, "generation %d", gen)
		require.Equal(t, strconv.Itoa(gen+2), ask(t, child, ws), "generation %d", gen)
		parent = child
	}
	for _, s := range all {
		require.NoError(t, s.Close(context.Background()))
	}
	require.NoError(t, l.Settle(t.Context()))
	leaks, err := l.Leaks(t.Context())
	require.NoError(t, err)
	assert.Empty(t, leaks)
}

// TestCheckpointRefuses: a service holding what CRIU cannot checkpoint (an
// MPTCP socket) is refused before anything is frozen, naming the process
// and the resource; the service runs on, untouched, and no image is
// written.
func TestCheckpointRefuses(t *testing.T) {
	l := checkpointLauncher(t)
	s := l.NewSession()
	defer s.Close(context.Background())
	ws := t.TempDir()
	startService(t, s, ws, `exec python3 -c '
import socket, time
s = socket.socket(socket.AF_INET, socket.SOCK_STREAM, 262)
s.bind(("127.0.0.1", 8001)); s.listen()
open("/tmp/ready", "w").close()
time.sleep(1000)'`)
	_, o, _ := sessionRun(t, s, shellConfig(ws, `for i in $(seq 100); do test -e /tmp/ready && break; sleep 0.05; done; ls /tmp`))
	if !strings.Contains(o, "ready") {
		testenv.Skip(t, "no MPTCP socket on this kernel")
	}
	dir := filepath.Join(t.TempDir(), "img")
	_, err := s.Checkpoint(t.Context(), CheckpointOptions{Dir: dir, WorkDir: t.TempDir()})
	require.ErrorIs(t, err, criu.ErrUnsupported)
	assert.Regexp(t, `process \d+ \(python3\) fd \d+: socket:\[\d+\]: an MPTCP socket`, err.Error())
	t.Logf("refused: %v", err)
	_, err = os.Stat(dir)
	assert.True(t, os.IsNotExist(err), "no images: %v", err)
	res, _, _ := sessionRun(t, s, shellConfig(ws, `pgrep -c python3`))
	assert.Equal(t, 0, res.ExitCode, "the service runs on")
}

// TestRestoreFailsClean: a restore that criu fails part way (the tmpfs
// contents of its mounts cut short) leaves no process, no mount and no cgroup, and the
// Session can restore an intact checkpoint afterwards.
func TestRestoreFailsClean(t *testing.T) {
	l := checkpointLauncher(t)
	src := l.NewSession()
	defer src.Close(context.Background())
	ws := t.TempDir()
	startService(t, src, ws, counterServer)
	require.Equal(t, "1", ask(t, src, ws))
	good := filepath.Join(t.TempDir(), "img")
	_, err := src.Checkpoint(t.Context(), CheckpointOptions{Dir: good, WorkDir: t.TempDir(), Stop: true})
	require.NoError(t, err)
	require.Eventually(t, func() bool { return len(src.Services()) == 0 }, 10*time.Second, 10*time.Millisecond, "--stop ends the source")

	bad := filepath.Join(t.TempDir(), "img")
	require.NoError(t, os.CopyFS(bad, os.DirFS(good)))
	pages, _ := filepath.Glob(filepath.Join(bad, "tmpfs-dev-*.img"))
	require.NotEmpty(t, pages)
	for _, p := range pages {
		require.NoError(t, os.Truncate(p, 10))
	}
	// The host's mounts change with other tests': the restore's are those
	// of its staging directory and its workspace.
	ws2 := t.TempDir()
	ours := func() []string {
		b, _ := os.ReadFile("/proc/self/mountinfo")
		var out []string
		for _, l := range strings.Split(string(b), "\n") {
			if strings.Contains(l, "layerfs-restore-") || strings.Contains(l, ws2) {
				out = append(out, l)
			}
		}
		return out
	}
	s := l.NewSession()
	defer s.Close(context.Background())
	_, _, err = s.Restore(t.Context(), Config{Workspace: ws2}, RestoreOptions{Dir: bad, WorkDir: t.TempDir()})
	require.Error(t, err)
	t.Logf("restore fails: %v", err)
	assert.Empty(t, s.Services())
	assert.Empty(t, ours(), "no mount left")
	left, _ := filepath.Glob(filepath.Join(os.TempDir(), "layerfs-restore-"+strconv.Itoa(os.Getpid())+"-*"))
	assert.Empty(t, left, "no staging directory left")
	require.NoError(t, l.Settle(t.Context()))
	leaks, err := l.Leaks(t.Context())
	require.NoError(t, err)
	assert.Empty(t, leaks)

	_, _, err = s.Restore(t.Context(), Config{Workspace: t.TempDir()}, RestoreOptions{Dir: good, WorkDir: t.TempDir()})
	require.NoError(t, err)
	require.Equal(t, "2", ask(t, s, ws))
}
