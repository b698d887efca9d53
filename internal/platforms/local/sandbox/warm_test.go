//go:build linux

package sandbox

import (
	"bytes"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"layerfs.dev/layerfs/internal/platforms"
	"layerfs.dev/layerfs/internal/testenv"
)

// waitWarm waits until l's pool holds n inits.
func waitWarm(t *testing.T, l *Launcher, n int) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for len(l.pool) < n {
		if time.Now().After(deadline) {
			t.Fatalf("pool has %d inits after 30s, want %d", len(l.pool), n)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func runShell(t *testing.T, l *Launcher, ws, body string) (platforms.ExecResult, string) {
	t.Helper()
	var o, e bytes.Buffer
	res, err := l.Run(t.Context(), Config{Workspace: ws, Spec: platforms.ExecSpec{Argv: platforms.ShellArgv(body)}}, &o, &e)
	require.NoError(t, err, "run")
	if res.ExitCode != 0 {
		t.Fatalf("exit %d, stderr %q", res.ExitCode, e.String())
	}
	return res, o.String()
}

func TestWarmPool(t *testing.T) {
	testenv.RequireRoot(t)
	var mu sync.Mutex
	var lastRun int64 // of the exec that ran last
	var lastWarm bool
	l := &Launcher{Warm: 2, trace: func(ms []mark, _ time.Duration) {
		mu.Lock()
		defer mu.Unlock()
		var runNS int64
		warm := false
		for _, m := range ms {
			switch m.Name {
			case "run":
				runNS = m.NS
			case "warm":
				warm = true
			}
		}
		if runNS > lastRun {
			lastRun, lastWarm = runNS, warm
		}
	}}
	ws := t.TempDir()
	runShell(t, l, ws, "true") // cold, and starts the pool
	waitWarm(t, l, 2)

	t.Run("used", func(t *testing.T) {
		_, out := runShell(t, l, ws, "echo warm > f; cat f; pwd; hostname; grep -E '^(CapEff|CapBnd|NoNewPrivs)' /proc/self/status | tr -d '\t'; touch /etc/x 2>/dev/null || echo ro")
		want := "warm\n/workspace\nlayerfs\nCapEff:0000000000000000\nCapBnd:0000000000000000\nNoNewPrivs:1\nro\n"
		if out != want {
			t.Errorf("got %q, want %q", out, want)
		}
		require.NoError(t, l.Settle(t.Context()))
		mu.Lock()
		defer mu.Unlock()
		if !lastWarm {
			t.Errorf("the exec did not take a warm init")
		}
	})

	t.Run("ready inits wait at the launcher's priority with the default pids limit", func(t *testing.T) {
		waitWarm(t, l, 2)
		nice := ownNice()
		for range 2 {
			ip := <-l.pool
			// Warming ran at warmNice; once ready, the init only waits, at
			// the launcher's priority again.
			deadline := time.Now().Add(30 * time.Second)
			for got := threadNices(t, ip.pid); !allEqual(got, nice); got = threadNices(t, ip.pid) {
				if time.Now().After(deadline) {
					t.Fatalf("warm init %d: threads' nice values %v after 30s, want all %d", ip.pid, got, nice)
				}
				time.Sleep(5 * time.Millisecond)
			}
			if ip.cg != nil && ip.cg.unified != "" {
				b, err := os.ReadFile(filepath.Join(ip.cg.unified, "pids.max"))
				require.NoError(t, err)
				assert.Equal(t, strconv.Itoa(platforms.DefaultPids+initTasks), strings.TrimSpace(string(b)), "warm init's pids.max")
			}
			l.pool <- ip
		}
		_, out := runShell(t, l, ws, "cut -d' ' -f19 /proc/self/stat")
		assert.Equal(t, strconv.Itoa(nice)+"\n", out, "the command's nice value")
		// The refills ran at warmNice on threads of the launcher's own,
		// which get its nice value back.
		require.NoError(t, l.Settle(t.Context()))
		waitWarm(t, l, 2)
		deadline := time.Now().Add(30 * time.Second)
		for got := threadNices(t, os.Getpid()); !allEqual(got, nice); got = threadNices(t, os.Getpid()) {
			if time.Now().After(deadline) {
				t.Fatalf("the launcher's threads' nice values %v after 30s, want all %d", got, nice)
			}
			time.Sleep(5 * time.Millisecond)
		}
	})

	t.Run("sees mounts made after it started", func(t *testing.T) {
		waitWarm(t, l, 2)
		mnt := filepath.Join(t.TempDir(), "mnt")
		require.NoError(t, os.Mkdir(mnt, 0o755))
		require.NoError(t, unix.Mount("tmpfs", mnt, "tmpfs", 0, "size=1m"))
		defer unix.Unmount(mnt, unix.MNT_DETACH)
		require.NoError(t, os.WriteFile(filepath.Join(mnt, "on-tmpfs"), []byte("mounted later\n"), 0o644))
		_, out := runShell(t, l, mnt, "cat on-tmpfs")
		if out != "mounted later\n" {
			t.Errorf("got %q: the warm init did not see the new mount", out)
		}
	})

	t.Run("dead warm init is replaced", func(t *testing.T) {
		waitWarm(t, l, 2)
		// Both warm inits die (an OOM kill, an admin) before they are used.
		for range 2 {
			ip := <-l.pool
			_ = ip.proc.kill()
			// Dead means its last thread is gone and with it the config
			// pipe's reader.
			for deadline := time.Now().Add(5 * time.Second); !ip.gone() && time.Now().Before(deadline); {
				time.Sleep(time.Millisecond)
			}
			l.pool <- ip
		}
		_, out := runShell(t, l, ws, "echo still works")
		if out != "still works\n" {
			t.Errorf("got %q", out)
		}
	})

	t.Run("concurrent", func(t *testing.T) {
		var wg sync.WaitGroup
		for range 6 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				runShell(t, l, ws, "true")
			}()
		}
		wg.Wait()
	})

	t.Run("close", func(t *testing.T) {
		waitWarm(t, l, 2)
		pids := []int{}
		for range 2 {
			ip := <-l.pool
			pids = append(pids, ip.pid)
			l.pool <- ip
		}
		require.NoError(t, l.Close(t.Context()))
		for _, pid := range pids {
			assert.Error(t, unix.Kill(pid, 0), "warm init %d still alive after Close", pid)
		}
		runShell(t, l, ws, "true") // still works, on demand
		require.NoError(t, l.Settle(t.Context()))
		if n := len(l.pool); n != 0 {
			t.Errorf("%d warm inits after Close", n)
		}
		if leaks, err := l.Leaks(t.Context()); err != nil || len(leaks) > 0 {
			t.Errorf("leaks: %v %v", leaks, err)
		}
	})
}

// threadNices is the nice value of each thread of process pid.
func threadNices(t *testing.T, pid int) []int {
	t.Helper()
	ents, err := os.ReadDir("/proc/" + strconv.Itoa(pid) + "/task")
	require.NoError(t, err)
	var out []int
	for _, e := range ents {
		tid, err := strconv.Atoi(e.Name())
		require.NoError(t, err)
		// The raw getpriority syscall answers 20 - nice.
		p, err := unix.Getpriority(unix.PRIO_PROCESS, tid)
		if err != nil {
			continue // the thread ended
		}
		out = append(out, 20-p)
	}
	return out
}

func allEqual(vs []int, want int) bool {
	for _, v := range vs {
		if v != want {
			return false
		}
	}
	return len(vs) > 0
}

// TestSpawnerRestarts: a launcher whose spawner died (killed, out of
// memory) starts another for its next exec, in a namespace of the same
// mapping; Close stops it.
func TestSpawnerRestarts(t *testing.T) {
	l := nsLauncher(t)
	r := *l.UserNamespace
	ws := t.TempDir()
	want := r.String() + "\n"
	_, out := runShell(t, l, ws, "cat /proc/self/uid_map | tr -s ' ' | sed 's/^ //'")
	require.Equal(t, want, out)

	l.mu.Lock()
	first := l.spawner
	l.mu.Unlock()
	require.NoError(t, first.cmd.Process.Kill())
	<-first.done

	res, out := runShell(t, l, ws, "cat /proc/self/uid_map | tr -s ' ' | sed 's/^ //'")
	assert.Equal(t, want, out, "after the spawner died")
	assert.Equal(t, r.String(), res.UserNamespace)
	l.mu.Lock()
	second := l.spawner
	l.mu.Unlock()
	assert.NotSame(t, first, second)

	require.NoError(t, l.Close(t.Context()))
	require.NoError(t, l.Settle(t.Context()))
	l.mu.Lock()
	assert.Nil(t, l.spawner, "Close stops the spawner once no exec runs")
	l.mu.Unlock()
	assert.True(t, second.gone())
}
