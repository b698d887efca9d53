//go:build linux

package sandbox

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"layerfs.dev/layerfs/internal/proctest"
	"layerfs.dev/layerfs/internal/testenv"
)

// TestNoDaemonDescriptors holds a /dev/fuse descriptor without close-on-exec
// in the launching process, as go-fuse opens it, and checks that neither a
// sandboxed command nor its init (cold or warm) holds it: a command sees
// exactly its stdio, and `ls` the directory it lists.
func TestNoDaemonDescriptors(t *testing.T) {
	testenv.RequireFUSE(t)
	leaked, err := unix.Open("/dev/fuse", unix.O_RDWR, 0)
	require.NoError(t, err)
	defer unix.Close(leaked)

	ws := t.TempDir()
	for _, warm := range []int{0, 1} {
		l := &Launcher{Warm: warm}
		t.Cleanup(func() { l.Close(context.Background()) }) // t.Context is cancelled by then
		if warm > 0 {
			l.init()
			l.topUp()
			waitWarm(t, l, warm)
			// A warm init closes what it inherited first thing after it
			// starts, well before it can take an exec; it enters the pool
			// as soon as it is started, so give it that moment.
			for _, ip := range poolInits(l) {
				deadline := time.Now().Add(30 * time.Second)
				for fds := proctest.FUSEDescriptors(ip); len(fds) > 0; fds = proctest.FUSEDescriptors(ip) {
					if time.Now().After(deadline) {
						t.Errorf("warm init %d still holds /dev/fuse as fd %v after 30s", ip, fds)
						break
					}
					time.Sleep(5 * time.Millisecond)
				}
			}
		}
		_, out := runShell(t, l, ws, "cd /proc/self/fd && for f in *; do echo \"$f $(readlink $f)\"; done")
		var fds []string
		for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
			fd, target, _ := strings.Cut(line, " ")
			fds = append(fds, fd)
			if strings.Contains(target, "fuse") {
				t.Errorf("warm=%d: the command holds fd %s -> %s", warm, fd, target)
			}
		}
		// 3 is the shell's own glob of the directory (the for loop's
		// listing); nothing else may be there.
		assert.Equal(t, []string{"0", "1", "2", "3"}, fds, "warm=%d: the command's fds:\n%s", warm, out)
		require.NoError(t, l.Settle(t.Context()))
	}
}

// poolInits lists the pids of l's waiting warm inits.
func poolInits(l *Launcher) []int {
	l.mu.Lock()
	defer l.mu.Unlock()
	var pids []int
	for pid := range l.warmPids {
		pids = append(pids, pid)
	}
	return pids
}
