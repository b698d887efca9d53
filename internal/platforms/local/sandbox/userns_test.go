package sandbox_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"layerfs.dev/layerfs/internal/platforms/local/sandbox"
	"layerfs.dev/layerfs/internal/seccomp"
	"layerfs.dev/layerfs/internal/testenv"
)

// userNSLauncher is a launcher as platforms/local makes one: the filter and
// the default user namespace mapping, warm inits or not.
func userNSLauncher(t *testing.T, warm int) *sandbox.Launcher {
	t.Helper()
	testenv.RequireRoot(t)
	filter, err := seccomp.BPF()
	require.NoError(t, err)
	r := sandbox.DefaultIDRange
	l := &sandbox.Launcher{SyscallFilter: filter, UserNamespace: &r, Warm: warm}
	if _, err := l.UserNS(); err != nil {
		testenv.Skip(t, "no user namespace: "+err.Error())
	}
	t.Cleanup(func() { _ = l.Close(context.Background()) })
	return l
}

func TestUserNamespace(t *testing.T) {
	for _, warm := range []int{0, 1} {
		t.Run(fmt.Sprintf("warm %d", warm), func(t *testing.T) {
			l := userNSLauncher(t, warm)
			ws := t.TempDir()
			r := sandbox.DefaultIDRange
			want := fmt.Sprintf("0 %d %d", r.Host, r.Size)

			// The mapping, root's files in the workspace and /tmp, a chown to
			// another id of the mapping, and the owners as seen inside.
			o := run(t, l, shell(ws, `set -e
				cat /proc/self/uid_map /proc/self/gid_map
				id -u; id -G
				echo root > root-file; mkdir d; chmod 0700 d
				echo u > user-file; chown 1000:1000 user-file
				echo t > /tmp/t; stat -c '%u:%g' /tmp/t /tmp . root-file user-file
				stat -c "%u" /usr/bin/env`))
			if o.res.ExitCode != 0 {
				t.Fatalf("exit %d, stderr %q", o.res.ExitCode, o.stderr)
			}
			lines := strings.Fields(strings.TrimSpace(o.stdout))
			got := strings.Join(lines, " ")
			wantOut := strings.Join(strings.Fields(want+" "+want+" 0 0 0:0 0:0 0:0 0:0 1000:1000 0"), " ")
			if got != wantOut {
				t.Errorf("got  %q\nwant %q\n(stderr %q)", got, wantOut, o.stderr)
			}
			if o.res.UserNamespace != want {
				t.Errorf("result's user namespace %q, want %q", o.res.UserNamespace, want)
			}
			// On disk, the ids are the ones inside.
			for name, id := range map[string]uint32{"root-file": 0, "d": 0, "user-file": 1000} {
				st, err := os.Lstat(filepath.Join(ws, name))
				require.NoError(t, err)
				if s := st.Sys().(*syscall.Stat_t); s.Uid != id || s.Gid != id {
					t.Errorf("%s is %d:%d on disk, want %d:%d", name, s.Uid, s.Gid, id, id)
				}
			}
		})
	}
}

// TestUserNamespaceNotHostRoot: the command's root has capabilities only
// in its own namespace: a file of the host's root stays out of its reach,
// and it cannot make another user namespace (the filter's listener in the
// init refuses every clone but the init's own).
func TestUserNamespaceNotHostRoot(t *testing.T) {
	l := userNSLauncher(t, 0)
	ws := t.TempDir()
	secret := filepath.Join(ws, "host-root-only")
	// Owned by an id outside the mapping: the command's root is not its
	// owner and has no capability over it.
	require.NoError(t, os.WriteFile(secret, []byte("secret\n"), 0o600))
	require.NoError(t, os.Chown(secret, 70000, 70000))
	o := run(t, l, shell(ws, `
		cat host-root-only 2>/dev/null && echo read
		echo x >> host-root-only 2>/dev/null && echo wrote
		echo 1000 > /proc/1/oom_score_adj 2>/dev/null && echo oom
		stat -c '%u' host-root-only
		unshare -U true 2>/dev/null && echo unshared
		grep CapEff /proc/self/status | cut -f2
		echo done`))
	if !strings.HasPrefix(o.stdout, "65534\n") || !strings.HasSuffix(o.stdout, "done\n") {
		t.Fatalf("stdout %q, stderr %q", o.stdout, o.stderr)
	}
	t.Logf("stdout %q, stderr %q", o.stdout, o.stderr)
	for _, bad := range []string{"secret", "read", "wrote", "oom", "unshared"} {
		if strings.Contains(o.stdout, bad) {
			t.Errorf("the command's root could act as the host's: %q in %q", bad, o.stdout)
		}
	}
	if b, _ := os.ReadFile(secret); string(b) != "secret\n" {
		t.Errorf("host file now %q", b)
	}
}

// TestUserNamespaceOneCPU: a launcher that may run on one CPU only (a
// container of one CPU, taskset) still runs execs in its user namespace:
// its spawner and every init it starts share that CPU. (When the init
// forked each command into a new user namespace, that fork waited for the
// init's own seccomp answer, which needed the processor the fork held:
// every exec hung.)
func TestUserNamespaceOneCPU(t *testing.T) {
	// As taskset does to a running process: every thread of this one on
	// CPU 0 (threads started later inherit it), the spawner started from
	// one of them, and the inits from the spawner.
	var old, one unix.CPUSet
	require.NoError(t, unix.SchedGetaffinity(0, &old))
	one.Set(0)
	// setAll sets every thread's affinity, again until none started
	// meanwhile from a thread it had not reached yet.
	setAll := func(set *unix.CPUSet) {
		for done := false; !done; {
			tasks, err := os.ReadDir("/proc/self/task")
			require.NoError(t, err)
			done = true
			for _, task := range tasks {
				tid, _ := strconv.Atoi(task.Name())
				var got unix.CPUSet
				if unix.SchedGetaffinity(tid, &got) == nil && got != *set {
					done = false
					_ = unix.SchedSetaffinity(tid, set) // it may have ended meanwhile
				}
			}
		}
	}
	setAll(&one)
	defer setAll(&old)
	l := userNSLauncher(t, 0)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	var stdout, stderr bytes.Buffer
	res, err := l.Run(ctx, shell(t.TempDir(), "nproc; cat /proc/self/uid_map"), &stdout, &stderr)
	require.NoError(t, err, "exec on one CPU (stderr %q)", stderr.String())
	r := sandbox.DefaultIDRange
	want := fmt.Sprintf("1 0 %d %d", r.Host, r.Size)
	if got := strings.Join(strings.Fields(stdout.String()), " "); res.ExitCode != 0 || got != want {
		t.Fatalf("exit %d, output %q, want %q (stderr %q)", res.ExitCode, got, want, stderr.String())
	}
}
