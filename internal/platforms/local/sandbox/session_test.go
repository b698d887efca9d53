//go:build linux

package sandbox

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"layerfs.dev/layerfs/internal/platforms"
	"layerfs.dev/layerfs/internal/seccomp"
	"layerfs.dev/layerfs/internal/testenv"
)

// keptTracer records, for each exec a launcher traces, whether it ran on
// an init a Session kept.
type keptTracer struct {
	mu   sync.Mutex
	kept []bool // in the order the execs started
	runs []int64
}

func (k *keptTracer) trace(ms []mark, _ time.Duration) {
	k.mu.Lock()
	defer k.mu.Unlock()
	var run int64
	kept := false
	for _, m := range ms {
		switch m.Name {
		case "run":
			run = m.NS
		case "kept":
			kept = true
		}
	}
	i := len(k.runs)
	for i > 0 && k.runs[i-1] > run {
		i--
	}
	k.runs = append(k.runs[:i], append([]int64{run}, k.runs[i:]...)...)
	k.kept = append(k.kept[:i], append([]bool{kept}, k.kept[i:]...)...)
}

// keptList is, in the order the execs started, whether each ran on a kept
// init.
func (k *keptTracer) keptList() []bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	return slices.Clone(k.kept)
}

// last waits until n execs are traced and returns whether the last one
// started ran on a kept init.
func (k *keptTracer) last(t *testing.T, l *Launcher, n int) bool {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		k.mu.Lock()
		got := len(k.kept)
		var last bool
		if got > 0 {
			last = k.kept[got-1]
		}
		k.mu.Unlock()
		if got >= n {
			return last
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d execs traced after 10s, want %d", got, n)
		}
		require.NoError(t, l.Settle(t.Context()))
		time.Sleep(time.Millisecond)
	}
}

// sessionLauncher is a launcher as platforms/local makes one: the filter,
// the default user namespace (where there is one) and a warm init.
func sessionLauncher(t *testing.T, k *keptTracer) *Launcher {
	t.Helper()
	testenv.RequireRoot(t)
	filter, err := seccomp.BPF()
	require.NoError(t, err)
	r := DefaultIDRange
	l := &Launcher{SyscallFilter: filter, UserNamespace: &r, Warm: 1, trace: k.trace}
	if _, err := l.UserNS(); err != nil {
		testenv.Skip(t, "no user namespace: "+err.Error())
	}
	t.Cleanup(func() { _ = l.Close(context.Background()) })
	return l
}

func sessionRun(t *testing.T, s *Session, cfg Config) (platforms.ExecResult, string, string) {
	t.Helper()
	var o, e bytes.Buffer
	res, err := s.Run(t.Context(), cfg, &o, &e)
	require.NoError(t, err, "run %q", cfg.Spec.Argv)
	return res, o.String(), e.String()
}

func shellConfig(ws, body string) Config {
	return Config{Workspace: ws, Spec: platforms.ExecSpec{Argv: platforms.ShellArgv(body)}}
}

// TestSessionKeepsItsSandbox: a Session's next exec runs on the init of
// the one before, and finds its sandbox as a fresh init leaves it: /tmp and
// /dev/shm empty, no System V IPC object or POSIX message queue of the
// exec before, its own hostname, workspace and uid, a root command's
// capabilities, no limit of the exec before.
func TestSessionKeepsItsSandbox(t *testing.T) {
	k := &keptTracer{}
	l := sessionLauncher(t, k)
	s := l.NewSession()
	defer s.Close(context.Background())
	ws := t.TempDir()

	fresh := `ls -A /tmp /dev/shm; ipcs -m -q -s | grep -c '^0x'; ` +
		`python3 -c "import ctypes; l=ctypes.CDLL(None,use_errno=True); print(l.mq_open(b'/lfs', 2) < 0 and ctypes.get_errno())"; ` +
		`hostname; pwd; id -u; grep CapEff /proc/self/status | tr -d '\t'`
	dirty := `touch /tmp/x /dev/shm/y; ipcmk -M 4096 -Q -S 1 >/dev/null; ` +
		`python3 -c "import ctypes; l=ctypes.CDLL(None); assert l.mq_open(b'/lfs', 0o100|2, 0o600, None) >= 0"`
	_, out, stderr := sessionRun(t, s, shellConfig(ws, fresh))
	want := out // a fresh init's view, the reference
	require.Contains(t, want, "layerfs\n/workspace\n0\n", "stderr %q", stderr)
	n := 1
	for _, step := range []struct {
		name string
		cfg  func() Config
	}{
		{"after an exec that left files, IPC objects and a message queue", func() Config { return shellConfig(ws, dirty) }},
		{"as another uid", func() Config {
			c := shellConfig(ws, "id -u")
			c.Spec.UID, c.Spec.GID = 1000, 1000
			return c
		}},
		{"with a memory limit", func() Config {
			c := shellConfig(ws, "true")
			c.Spec.MemoryBytes = 64 << 20
			return c
		}},
	} {
		res, o, e := sessionRun(t, s, step.cfg())
		require.Equal(t, 0, res.ExitCode, "%s: stdout %q stderr %q", step.name, o, e)
		n++
		assert.True(t, k.last(t, l, n), "%s: not on the kept init", step.name)
		_, out, stderr := sessionRun(t, s, shellConfig(ws, fresh))
		n++
		assert.True(t, k.last(t, l, n), "%s: the next exec did not run on the kept init", step.name)
		assert.Equal(t, want, out, "%s: the next exec's sandbox (stderr %q)", step.name, stderr)
	}

	t.Run("hostname and workspace are the exec's", func(t *testing.T) {
		other := t.TempDir()
		require.NoError(t, os.WriteFile(filepath.Join(other, "here"), nil, 0o644))
		c := shellConfig(other, "hostname; ls")
		c.Spec.Hostname = "other"
		_, out, _ := sessionRun(t, s, c)
		assert.Equal(t, "other\nhere\n", out)
		_, out, _ = sessionRun(t, s, shellConfig(ws, "hostname; ls"))
		assert.Equal(t, "layerfs\n", out)
	})

	t.Run("no memory limit after one", func(t *testing.T) {
		c := shellConfig(ws, "true")
		c.Spec.MemoryBytes = 64 << 20
		sessionRun(t, s, c)
		res, _, stderr := sessionRun(t, s, shellConfig(ws, "dd if=/dev/zero of=/dev/null bs=128M count=1 status=none"))
		assert.Equal(t, 0, res.ExitCode, "a 128 MiB buffer after an exec limited to 64 MiB: %q", stderr)
	})

	t.Run("the workspace is not mounted between execs", func(t *testing.T) {
		sessionRun(t, s, shellConfig(ws, "true"))
		s.mu.Lock()
		ip := s.kept
		s.mu.Unlock()
		require.NotNil(t, ip, "no kept init")
		require.NoError(t, ip.awaitReady(t.Context()))
		b, err := os.ReadFile("/proc/" + strconv.Itoa(ip.pid) + "/mountinfo")
		require.NoError(t, err)
		for _, line := range strings.Split(string(b), "\n") {
			if f := strings.Fields(line); len(f) > 4 && f[4] == "/workspace" {
				t.Errorf("the waiting init has /workspace mounted: %s", line)
			}
		}
	})
}

// TestSessionRetires: an init does not serve another exec after one that
// set an rlimit, timed out, or changed what the next command would
// inherit from it (its nice value); the next exec gets a fresh init that
// shows none of it.
func TestSessionRetires(t *testing.T) {
	k := &keptTracer{}
	l := sessionLauncher(t, k)
	s := l.NewSession()
	defer s.Close(context.Background())
	ws := t.TempDir()
	nice := strconv.Itoa(ownNice())
	probe := shellConfig(ws, "ulimit -n; cut -d' ' -f19 /proc/self/stat")
	_, ref, _ := sessionRun(t, s, probe)
	require.True(t, strings.HasSuffix(ref, "\n"+nice+"\n"), "the command's nice value: %q, want %s", ref, nice)
	n := 1
	for _, step := range []struct {
		name string
		cfg  func() Config
	}{
		{"an rlimit", func() Config {
			c := shellConfig(ws, "ulimit -n")
			c.Spec.OpenFiles = 77
			return c
		}},
		{"a timeout", func() Config {
			c := shellConfig(ws, "sleep 10")
			c.Spec.Timeout = 100 * time.Millisecond
			return c
		}},
		// Each of the init's threads, one by one: the one that forks the
		// commands need not be its first (pid 1), and the others hold
		// capabilities the command lacks, which makes renicing them fail
		// (and with them a renice of all of the uid's).
		{"the init reniced", func() Config {
			// renice -n is absolute: raised from the test's own value (a
			// lower one is refused in the sandbox and changes nothing).
			up := strconv.Itoa(min(ownNice()+5, 19))
			return shellConfig(ws, "for t in /proc/1/task/*; do renice -n "+up+" -p ${t##*/} >/dev/null 2>&1; done; true")
		}},
	} {
		sessionRun(t, s, probe) // on a kept init: the step's exec runs on one
		n++
		require.True(t, k.last(t, l, n), "%s: the exec before did not run on a kept init", step.name)
		res, sout, serr := sessionRun(t, s, step.cfg())
		n++
		_, out, _ := sessionRun(t, s, probe)
		n++
		assert.False(t, k.last(t, l, n), "%s: the next exec ran on the same init (the step: %+v, stdout %q, stderr %q; kept: %v)",
			step.name, res, sout, serr, k.keptList())
		assert.Equal(t, ref, out, "%s: the next exec's limits and nice value", step.name)
	}
}

// TestSessionIdleAndClose: a kept init ends once it has waited KeepIdle,
// and when its Session closes; concurrent execs of one Session each get an
// init; nothing is left.
func TestSessionIdleAndClose(t *testing.T) {
	k := &keptTracer{}
	l := sessionLauncher(t, k)
	l.KeepIdle = 300 * time.Millisecond
	s := l.NewSession()
	ws := t.TempDir()
	keptPid := func() int {
		s.mu.Lock()
		defer s.mu.Unlock()
		if s.kept == nil {
			return 0
		}
		return s.kept.pid
	}
	sessionRun(t, s, shellConfig(ws, "true"))
	pid := keptPid()
	require.NotZero(t, pid, "no init kept")
	time.Sleep(time.Second)
	require.NoError(t, l.Settle(t.Context()))
	assert.Zero(t, keptPid(), "still kept after KeepIdle")
	assert.Error(t, unix.Kill(pid, 0), "the init %d is alive after KeepIdle", pid)

	var wg sync.WaitGroup
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var o bytes.Buffer
			res, err := s.Run(t.Context(), shellConfig(ws, "echo ok"), &o, &o)
			assert.NoError(t, err)
			assert.Equal(t, 0, res.ExitCode)
			assert.Equal(t, "ok\n", o.String())
		}()
	}
	wg.Wait()
	pid = keptPid()
	require.NotZero(t, pid, "no init kept after concurrent execs")
	require.NoError(t, s.Close(t.Context()))
	require.NoError(t, l.Settle(t.Context())) // a ready init ends in the background
	assert.Error(t, unix.Kill(pid, 0), "the init %d is alive after Close", pid)
	require.NoError(t, l.Close(t.Context()))
	require.NoError(t, l.Settle(t.Context()))
	leaks, err := l.Leaks(t.Context())
	require.NoError(t, err)
	assert.Empty(t, leaks)
}
