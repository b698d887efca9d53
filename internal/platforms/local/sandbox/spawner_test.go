//go:build linux

package sandbox

import (
	"context"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"layerfs.dev/layerfs/internal/testenv"
)

// nsLauncher is a launcher with the default user namespace mapping and
// nothing else, closed when the test ends.
func nsLauncher(t *testing.T) *Launcher {
	t.Helper()
	testenv.RequireRoot(t)
	r := DefaultIDRange
	l := &Launcher{UserNamespace: &r}
	if _, err := l.UserNS(); err != nil {
		testenv.Skip(t, "no user namespace: "+err.Error())
	}
	t.Cleanup(func() { _ = l.Close(context.Background()) })
	return l
}

// TestSiginfoPid: the spawner's reaper reads the pid of a child that ended
// from the siginfo waitid fills, at an offset x/sys/unix does not name.
func TestSiginfoPid(t *testing.T) {
	cmd := exec.Command("true")
	require.NoError(t, cmd.Start())
	var info unix.Siginfo
	require.NoError(t, unix.Waitid(unix.P_PID, cmd.Process.Pid, &info, unix.WEXITED|unix.WNOWAIT, nil))
	assert.Equal(t, int32(cmd.Process.Pid), siginfoPid(&info))
	require.NoError(t, cmd.Wait())
}

// TestSpawnedInitKillAfterWait: once an init's end is known its pidfd is
// closed, and a late kill (an exec's context ending after its init was
// reaped) is a no-op rather than a signal through whatever descriptor has
// that number by then.
func TestSpawnedInitKillAfterWait(t *testing.T) {
	l := nsLauncher(t)
	ip, err := l.spawn(sandboxKind{inNS: true}, nil)
	require.NoError(t, err)
	si := ip.proc.(*spawnedInit)
	require.NoError(t, ip.proc.kill())
	ws, _, err := ip.proc.wait()
	require.NoError(t, err)
	assert.True(t, ws.Signaled(), "the init ended of its SIGKILL: %v", ws)
	ip.p.closeParent()

	// The number the pidfd had now names something else.
	fd, err := unix.PidfdOpen(unix.Getpid(), 0)
	require.NoError(t, err)
	defer unix.Close(fd)
	si.mu.Lock()
	closed := si.pidfd
	si.mu.Unlock()
	assert.Equal(t, -1, closed)
	assert.NoError(t, ip.proc.kill(), "a kill after the end")
}

// TestSpawnerSmallRoot: the spawner starts its inits in a mount namespace
// of its own that holds none of the host's other mounts (a workspace's, a
// tmpfs mounted before it started), which each init then copies to make
// its own.
func TestSpawnerSmallRoot(t *testing.T) {
	testenv.RequireRoot(t)
	mnt := t.TempDir()
	require.NoError(t, unix.Mount("tmpfs", mnt, "tmpfs", 0, "size=1m"))
	defer unix.Unmount(mnt, unix.MNT_DETACH)
	l := nsLauncher(t)
	runShell(t, l, t.TempDir(), "true") // the spawner is in its namespace by its first init
	l.mu.Lock()
	pid := l.spawner.cmd.Process.Pid
	l.mu.Unlock()
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/mountinfo")
	require.NoError(t, err)
	var points []string
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		if f := strings.Fields(line); len(f) > 4 {
			points = append(points, f[4])
		}
	}
	assert.NotContains(t, points, mnt, "the spawner's namespace has a host mount")
	assert.Contains(t, points, "/proc")
	assert.Contains(t, points, "/usr")
	tops := []string{"/proc", "/dev", "/sys"}
	for _, e := range hostRuntime {
		tops = append(tops, "/"+e)
	}
	for _, p := range points {
		if p != "/" && !slices.ContainsFunc(tops, func(top string) bool { return p == top || strings.HasPrefix(p, top+"/") }) {
			t.Errorf("the spawner's namespace has %s", p)
		}
	}
}
