//go:build linux

package sandbox

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"layerfs.dev/layerfs/internal/platforms"
	"layerfs.dev/layerfs/internal/seccomp"
	"layerfs.dev/layerfs/internal/testenv"
)

// TestForkAhead: a warm init with a user namespace forks its command's
// process ahead, and the command it execs has what a fork at exec time
// gives: the mapping, the uid and gid asked for, no_new_privs, the filter
// (a clone into a new user namespace refused with EPERM), the working
// directory, the open files limit, the umask, a process group of its own
// and the init's priority rather than the pool's; a command that is not found is 127, one the stub cannot
// exec 126. Without a user
// namespace for the workspace (a stub cannot take it), the init forks at
// exec time.
func TestForkAhead(t *testing.T) {
	testenv.RequireRoot(t)
	filter, err := seccomp.BPF()
	require.NoError(t, err)
	r := DefaultIDRange
	var mu sync.Mutex
	var ahead []bool // per exec: the init forked ahead
	l := &Launcher{Warm: 1, ForkAhead: true, SyscallFilter: filter, UserNamespace: &r, trace: func(ms []mark, _ time.Duration) {
		mu.Lock()
		defer mu.Unlock()
		got := false
		for _, m := range ms {
			got = got || m.Name == "forked ahead"
		}
		ahead = append(ahead, got)
	}}
	if _, err := l.UserNS(); err != nil {
		testenv.Skip(t, "no user namespace: "+err.Error())
	}
	t.Cleanup(func() { _ = l.Close(context.Background()) })
	ws := t.TempDir()
	exec := func(argv []string, uid int) (platforms.ExecResult, string, string) {
		t.Helper()
		waitWarm(t, l, 1)
		var o, e bytes.Buffer
		res, err := l.Run(t.Context(), Config{Workspace: ws, Spec: platforms.ExecSpec{
			Argv: argv, UID: uid, GID: uid, OpenFiles: 512, Dir: "."}}, &o, &e)
		require.NoError(t, err, "run")
		require.NoError(t, l.Settle(t.Context()))
		return res, o.String(), e.String()
	}
	_, err = l.Run(t.Context(), Config{Workspace: ws, Spec: platforms.ExecSpec{Argv: []string{"true"}}}, nil, nil) // cold, and starts the pool
	require.NoError(t, err)
	require.NoError(t, l.Settle(t.Context()))
	mu.Lock()
	ahead = nil
	mu.Unlock()
	res, out, errs := exec(platforms.ShellArgv(`cat /proc/self/uid_map | tr -s ' '; id -u; id -g; pwd; ulimit -n; umask; nice
		[ "$(ps -o pgid= -p $$ | tr -d ' ')" = $$ ] && echo own-group
		grep -E '^(NoNewPrivs|Seccomp):' /proc/self/status | tr -d '\t'
		case $(unshare -U true 2>&1) in *"not permitted"*) echo refused;; esac`), 1000)
	want := " 0 2000000000 65536\n1000\n1000\n/workspace\n512\n0022\n0\nown-group\nNoNewPrivs:1\nSeccomp:2\nrefused\n"
	if res.ExitCode != 0 || out != want || res.UserNamespace != r.String() {
		t.Errorf("exit %d, user namespace %q, stdout %q (want %q), stderr %q", res.ExitCode, res.UserNamespace, out, want, errs)
	}
	if res, _, errs := exec([]string{"no-such-command-here"}, 0); res.ExitCode != 127 || !strings.Contains(errs, "no-such-command-here") {
		t.Errorf("missing command: exit %d, stderr %q", res.ExitCode, errs)
	}
	// A file that is not executable: the stub's exec fails, the init says so.
	require.NoError(t, os.WriteFile(filepath.Join(ws, "noexec"), []byte("#!/bin/sh\n"), 0o644))
	if res, _, errs := exec([]string{"./noexec"}, 0); res.ExitCode != 126 || !strings.Contains(errs, "permission denied") {
		t.Errorf("command not executable: exit %d, stderr %q", res.ExitCode, errs)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(ahead) != 3 || !ahead[0] || !ahead[1] || !ahead[2] {
		t.Errorf("forked ahead per exec: %v, want all", ahead)
	}
}
