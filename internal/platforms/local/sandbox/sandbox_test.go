package sandbox_test

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"layerfs.dev/layerfs/internal/platforms"
	"layerfs.dev/layerfs/internal/platforms/local/sandbox"
	"layerfs.dev/layerfs/internal/proctest"
	"layerfs.dev/layerfs/internal/testenv"
	"layerfs.dev/layerfs/wire/errclass"
)

type output struct {
	res            platforms.ExecResult
	stdout, stderr string
}

func run(t *testing.T, l *sandbox.Launcher, cfg sandbox.Config) output {
	t.Helper()
	var o, e bytes.Buffer
	res, err := l.Run(t.Context(), cfg, &o, &e)
	require.NoError(t, err, "run %q", cfg.Spec.Argv)
	return output{res, o.String(), e.String()}
}

// refused runs cfg, whose body writes the workspace file ran, and checks
// that the launcher refused it for want of a user namespace before
// anything ran.
func refused(t *testing.T, l *sandbox.Launcher, cfg sandbox.Config, ran string) {
	t.Helper()
	res, err := l.Run(t.Context(), cfg, io.Discard, io.Discard)
	if !errors.Is(err, sandbox.ErrNoUserNamespace) || !errors.Is(err, errclass.Unavailable) {
		t.Fatalf("ran (exit %d, user namespace %q, err %v), want ErrNoUserNamespace, of class unavailable", res.ExitCode, res.UserNamespace, err)
	}
	if _, err := os.Lstat(ran); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("the command ran: %s exists (%v)", ran, err)
	}
	t.Logf("refused: %v", err)
}

func shell(ws, body string) sandbox.Config {
	return sandbox.Config{Workspace: ws, Spec: platforms.ExecSpec{Argv: platforms.ShellArgv(body)}}
}

func TestExitCodes(t *testing.T) {
	testenv.RequireRoot(t)
	var l sandbox.Launcher
	ws := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(ws, "noexec"), []byte("#!/bin/sh\n"), 0o644))
	for _, tc := range []struct {
		name   string
		argv   []string
		code   int
		signal string
	}{
		{"true", []string{"true"}, 0, ""},
		{"false", []string{"false"}, 1, ""},
		{"exit 42", platforms.ShellArgv("exit 42"), 42, ""},
		{"argv as given", []string{"sh", "-c", "exit $#", "x", "a b", "c"}, 2, ""},
		{"pipefail", platforms.ShellArgv("false | true"), 1, ""},
		{"sigterm", platforms.ShellArgv("kill -TERM $$"), 143, "SIGTERM"},
		{"sigkill", platforms.ShellArgv("kill -KILL $$"), 137, "SIGKILL"},
		{"not found", []string{"no-such-command-xyz"}, 127, ""},
		{"not executable", []string{"./noexec"}, 126, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := run(t, &l, sandbox.Config{Workspace: ws, Spec: platforms.ExecSpec{Argv: tc.argv}})
			if o.res.ExitCode != tc.code || o.res.Signal != tc.signal {
				t.Errorf("got exit %d signal %q, want %d %q (stderr %q)", o.res.ExitCode, o.res.Signal, tc.code, tc.signal, o.stderr)
			}
			if o.res.TimedOut || o.res.OutputTruncated {
				t.Errorf("unexpected flags: %+v", o.res)
			}
		})
	}
}

func TestOutput(t *testing.T) {
	testenv.RequireRoot(t)
	var l sandbox.Launcher
	ws := t.TempDir()
	t.Run("separate streams", func(t *testing.T) {
		o := run(t, &l, shell(ws, "echo out1; echo err1 >&2; echo out2; echo err2 >&2"))
		if o.stdout != "out1\nout2\n" || o.stderr != "err1\nerr2\n" {
			t.Errorf("got stdout %q stderr %q", o.stdout, o.stderr)
		}
	})
	t.Run("one writer for both", func(t *testing.T) {
		var both bytes.Buffer // not safe for concurrent writes: the launcher serializes them
		res, err := l.Run(t.Context(), shell(ws, "for i in $(seq 200); do echo o$i; echo e$i >&2; done"), &both, &both)
		if err != nil || res.ExitCode != 0 {
			t.Fatalf("%+v %v", res, err)
		}
		if n := strings.Count(both.String(), "\n"); n != 400 {
			t.Errorf("got %d lines, want 400", n)
		}
	})
	t.Run("cap", func(t *testing.T) {
		cfg := shell(ws, "head -c 100000 /dev/zero; echo small >&2")
		cfg.Spec.OutputLimit = 1000
		o := run(t, &l, cfg)
		if len(o.stdout) != 1000 || o.stderr != "small\n" || !o.res.OutputTruncated || o.res.ExitCode != 0 {
			t.Errorf("got %d stdout bytes, stderr %q, %+v; want 1000, \"small\\n\", truncated", len(o.stdout), o.stderr, o.res)
		}
	})
	t.Run("stdin", func(t *testing.T) {
		cfg := shell(ws, "tr a-z A-Z")
		cfg.Spec.Stdin = strings.NewReader("hello sandbox\n")
		if o := run(t, &l, cfg); o.stdout != "HELLO SANDBOX\n" {
			t.Errorf("got %q", o.stdout)
		}
		if o := run(t, &l, shell(ws, "wc -c")); strings.TrimSpace(o.stdout) != "0" {
			t.Errorf("nil stdin: got %q, want 0 bytes", o.stdout)
		}
	})
	t.Run("environment", func(t *testing.T) {
		cfg := shell(ws, `echo "$HOME|$TERM|$FOO|$PATH|$(hostname)"`)
		cfg.Spec.Env = []string{"FOO=bar baz", "TERM=xterm"}
		cfg.Spec.Hostname = "box1"
		want := "/tmp|xterm|bar baz|" + platforms.DefaultPath + "|box1\n"
		if o := run(t, &l, cfg); o.stdout != want {
			t.Errorf("got %q, want %q", o.stdout, want)
		}
	})
}

func TestWorkspace(t *testing.T) {
	testenv.RequireRoot(t)
	var l sandbox.Launcher
	ws := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(ws, "from-host"), []byte("host data\n"), 0o644))
	require.NoError(t, os.Mkdir(filepath.Join(ws, "sub"), 0o755))
	o := run(t, &l, shell(ws, "pwd; cat from-host; echo sandbox data > from-sandbox"))
	if o.stdout != "/workspace\nhost data\n" || o.res.ExitCode != 0 {
		t.Fatalf("got %q (stderr %q, %+v)", o.stdout, o.stderr, o.res)
	}
	b, err := os.ReadFile(filepath.Join(ws, "from-sandbox"))
	if err != nil || string(b) != "sandbox data\n" {
		t.Fatalf("host reads %q, %v", b, err)
	}
	cfg := shell(ws, "pwd")
	cfg.Spec.Dir = "sub"
	if o := run(t, &l, cfg); o.stdout != "/workspace/sub\n" {
		t.Errorf("dir sub: got %q", o.stdout)
	}
	// A workspace named through a symlink is the directory it points to.
	link := filepath.Join(t.TempDir(), "link")
	require.NoError(t, os.Symlink(ws, link))
	if o := run(t, &l, shell(link, "cat from-sandbox")); o.stdout != "sandbox data\n" {
		t.Errorf("through a symlink: got %q (stderr %q)", o.stdout, o.stderr)
	}
}

func TestConcurrent(t *testing.T) {
	testenv.RequireRoot(t)
	var l sandbox.Launcher
	ws := t.TempDir()
	const n = 8
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var o bytes.Buffer
			res, err := l.Run(t.Context(), shell(ws, fmt.Sprintf("echo %d > f%d; cat f%d; ls | wc -l > /dev/null", i, i, i)), &o, nil)
			if err == nil && (res.ExitCode != 0 || o.String() != fmt.Sprintf("%d\n", i)) {
				err = fmt.Errorf("exec %d: got %q, %+v", i, o.String(), res)
			}
			errs <- err
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		assert.NoError(t, err)
	}
	for i := range n {
		if b, err := os.ReadFile(filepath.Join(ws, fmt.Sprintf("f%d", i))); err != nil || string(b) != fmt.Sprintf("%d\n", i) {
			t.Errorf("f%d on host: %q %v", i, b, err)
		}
	}
}

func TestTimeoutKillsTree(t *testing.T) {
	testenv.RequireRoot(t)
	var l sandbox.Launcher
	for _, uid := range []int{0, 1000} {
		t.Run(fmt.Sprintf("uid %d", uid), func(t *testing.T) {
			marker := fmt.Sprintf("1000.%d", time.Now().UnixNano()%1000000)
			cfg := shell(t.TempDir(), fmt.Sprintf("sleep %s & sleep %s; wait", marker, marker))
			cfg.Spec.Timeout, cfg.Spec.UID, cfg.Spec.GID = time.Second, uid, uid
			t0 := time.Now()
			o := run(t, &l, cfg)
			if !o.res.TimedOut || o.res.ExitCode != 137 || o.res.Signal != "SIGKILL" {
				t.Errorf("got %+v, want timed out with SIGKILL", o.res)
			}
			if d := time.Since(t0); d > 5*time.Second {
				t.Errorf("took %v for a 1s timeout", d)
			}
			if ps := processesWith(t, marker); len(ps) > 0 {
				t.Errorf("processes survived the sandbox: %v", ps)
			}
		})
	}
}

// TestLeftBehind: what a command leaves running when it exits is killed
// with it, whatever its uid, and does not hold the exec up.
func TestLeftBehind(t *testing.T) {
	testenv.RequireRoot(t)
	var l sandbox.Launcher
	for _, uid := range []int{0, 1000} {
		t.Run(fmt.Sprintf("uid %d", uid), func(t *testing.T) {
			marker := fmt.Sprintf("1000.%d", time.Now().UnixNano()%1000000+7)
			cfg := shell(t.TempDir(), fmt.Sprintf("sleep %s & (sleep %s &) ; echo left", marker, marker))
			cfg.Spec.UID, cfg.Spec.GID = uid, uid
			t0 := time.Now()
			o := run(t, &l, cfg)
			if o.stdout != "left\n" || o.res.ExitCode != 0 {
				t.Errorf("got %q %+v", o.stdout, o.res)
			}
			if d := time.Since(t0); d > 3*time.Second {
				t.Errorf("took %v: the leftover processes held the exec", d)
			}
			if ps := processesWith(t, marker); len(ps) > 0 {
				t.Errorf("processes survived the sandbox: %v", ps)
			}
		})
	}
}

func TestContextCancel(t *testing.T) {
	testenv.RequireRoot(t)
	var l sandbox.Launcher
	marker := fmt.Sprintf("1000.%d", time.Now().UnixNano()%1000000+1)
	ctx, cancel := context.WithTimeout(t.Context(), 300*time.Millisecond)
	defer cancel()
	_, err := l.Run(ctx, shell(t.TempDir(), "sleep "+marker), nil, nil)
	assert.ErrorIs(t, err, context.DeadlineExceeded)
	if ps := processesWith(t, marker); len(ps) > 0 {
		t.Errorf("processes survived the sandbox: %v", ps)
	}
}

// processesWith lists host processes whose command line contains s.
func processesWith(t *testing.T, s string) []string {
	t.Helper()
	ps, err := proctest.WithCmdline(s)
	require.NoError(t, err)
	return ps
}

func TestIsolation(t *testing.T) {
	testenv.RequireRoot(t)
	for _, warm := range []int{0, 1} {
		t.Run(fmt.Sprintf("warm %d", warm), func(t *testing.T) {
			l := &sandbox.Launcher{Warm: warm}
			defer l.Close(t.Context())
			if warm > 0 {
				run(t, l, shell(t.TempDir(), "true")) // fills the pool
				time.Sleep(300 * time.Millisecond)
			}
			testIsolation(t, l)
		})
	}
}

func testIsolation(t *testing.T, l *sandbox.Launcher) {
	ws := t.TempDir()
	sentinel := filepath.Join(t.TempDir(), "sentinel")
	require.NoError(t, os.Mkdir(sentinel, 0o755))
	// Each line must fail inside the sandbox; the script prints the ones
	// that did not.
	attempts := []string{
		"touch /newfile", "touch /usr/newfile", "touch /etc/newfile", "mkdir /dev/newdir",
		"touch /dev/newfile", "echo 1 > /proc/sys/vm/drop_caches", "echo x > /proc/sys/kernel/domainname",
		"ls /root", "ls /home", "ls " + sentinel, "ls " + filepath.Dir(sentinel), "ls /work",
		"[ -n \"$(ls -A /sys/fs/cgroup)\" ]", "ls /var", "cat /proc/1/root/etc/hostname",
		"mount -t tmpfs none /tmp", "unshare -m true", "chroot / true", "hostname other",
	}
	var body strings.Builder
	for _, a := range attempts {
		fmt.Fprintf(&body, "if (%s) 2>/dev/null; then echo 'ALLOWED: %s'; fi\n", a, strings.ReplaceAll(a, "'", ""))
	}
	// The init's runtime threads stay in the host's mount namespace (only
	// its main thread moves): none of their roots may be reachable.
	body.WriteString("[ $(ls /proc/1/task | wc -l) -gt 1 ] || echo 'the init has one thread: nothing tested'\n")
	body.WriteString("for t in $(ls /proc/1/task); do for d in /proc/1/task/$t/root/ /proc/1/task/$t/cwd/; do ls $d >/dev/null 2>&1 && echo \"ALLOWED: ls $d\"; done; done\n")
	body.WriteString("touch /tmp/ok /dev/shm/ok /workspace/ok && echo writable")
	o := run(t, l, shell(ws, body.String()))
	if o.stdout != "writable\n" {
		t.Errorf("isolation breached or writable dirs not writable:\n%s\nstderr: %s", o.stdout, o.stderr)
	}
	if entries, _ := os.ReadDir(sentinel); len(entries) != 0 {
		t.Errorf("sentinel dir changed: %v", entries)
	}
	o = run(t, l, shell(ws, "touch /etc/x"))
	if !strings.Contains(o.stderr, "Read-only file system") {
		t.Errorf("write to /etc: stderr %q, want EROFS", o.stderr)
	}
}

func TestPrivileges(t *testing.T) {
	testenv.RequireRoot(t)
	var l sandbox.Launcher
	ws := t.TempDir()
	for _, id := range []struct{ uid, gid int }{{0, 0}, {1000, 1000}} {
		t.Run(fmt.Sprintf("uid %d", id.uid), func(t *testing.T) {
			cfg := shell(ws, "id -u; id -g; id -G; grep -E '^(Cap|NoNewPrivs)' /proc/self/status")
			cfg.Spec.UID, cfg.Spec.GID = id.uid, id.gid
			o := run(t, &l, cfg)
			lines := strings.Split(strings.TrimSpace(o.stdout), "\n")
			want := []string{fmt.Sprint(id.uid), fmt.Sprint(id.gid), fmt.Sprint(id.gid)}
			if len(lines) < 3 || strings.Join(lines[:3], " ") != strings.Join(want, " ") {
				t.Fatalf("ids: got %q, want %q (stderr %q)", lines, want, o.stderr)
			}
			fields := map[string]string{}
			for _, line := range lines[3:] {
				k, v, _ := strings.Cut(line, ":")
				fields[k] = strings.TrimSpace(v)
			}
			for _, k := range []string{"CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb"} {
				if fields[k] != "0000000000000000" {
					t.Errorf("%s = %q, want all zero", k, fields[k])
				}
			}
			if fields["NoNewPrivs"] != "1" {
				t.Errorf("NoNewPrivs = %q, want 1", fields["NoNewPrivs"])
			}
		})
	}
}

func TestNetwork(t *testing.T) {
	testenv.RequireRoot(t)
	var l sandbox.Launcher
	ws := t.TempDir()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	got := make(chan string, 4)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			line, _ := bufio.NewReader(c).ReadString('\n')
			c.Close()
			got <- line
		}
	}()
	port := ln.Addr().(*net.TCPAddr).Port
	connect := fmt.Sprintf("echo hello > /dev/tcp/127.0.0.1/%d", port)

	o := run(t, &l, shell(ws, connect+"; echo connect=$?; tail -n +3 /proc/net/dev | cut -d: -f1 | tr -d ' '"))
	if o.stdout != "connect=1\nlo\n" {
		t.Errorf("without network: got %q, want a failed connect and only lo (stderr %q)", o.stdout, o.stderr)
	}
	select {
	case line := <-got:
		t.Errorf("the host listener got %q from a sandbox without network", line)
	default:
	}

	cfg := shell(ws, connect)
	cfg.Network = true
	if o := run(t, &l, cfg); o.res.ExitCode != 0 {
		t.Fatalf("with network: exit %d, stderr %q", o.res.ExitCode, o.stderr)
	}
	select {
	case line := <-got:
		if line != "hello\n" {
			t.Errorf("listener got %q", line)
		}
	case <-time.After(5 * time.Second):
		t.Error("with network: the host listener got nothing")
	}
}

func TestRootDir(t *testing.T) {
	testenv.RequireRoot(t)
	var l sandbox.Launcher
	image := t.TempDir()
	// A minimal image: bash, cat and their libraries, and a marker file.
	for _, bin := range []string{"/usr/bin/bash", "/usr/bin/cat"} {
		copyFile(t, bin, filepath.Join(image, bin))
		out, err := exec.Command("ldd", bin).Output()
		require.NoError(t, err)
		for _, f := range strings.Fields(string(out)) {
			if strings.HasPrefix(f, "/") {
				real, err := filepath.EvalSymlinks(f)
				require.NoError(t, err)
				copyFile(t, real, filepath.Join(image, f))
			}
		}
	}
	for _, d := range []string{"lib", "lib64"} {
		if err := os.Rename(filepath.Join(image, d), filepath.Join(image, "usr", d)); !errors.Is(err, os.ErrNotExist) {
			require.NoError(t, err)
		}
		require.NoError(t, os.Symlink("usr/"+d, filepath.Join(image, d)))
	}
	require.NoError(t, os.WriteFile(filepath.Join(image, "marker"), []byte("image\n"), 0o644))
	check := func(t *testing.T, l *sandbox.Launcher) {
		cfg := shell(t.TempDir(), "cat /marker; echo /*; echo x > /marker")
		cfg.RootDir = image
		o := run(t, l, cfg)
		want := "image\n/dev /lib /lib64 /marker /proc /sys /tmp /usr /workspace\n"
		if o.stdout != want || !strings.Contains(o.stderr, "Read-only") {
			t.Errorf("got %q (stderr %q), want %q and a read-only /marker", o.stdout, o.stderr, want)
		}
	}
	check(t, &l)
	t.Run("user namespace", func(t *testing.T) { check(t, userNSLauncher(t, 0)) })
	// A workspace's own copy-on-write root: the root itself, writable (its
	// top level too), and RootWorkdir is a directory of it.
	t.Run("writable", func(t *testing.T) {
		root := t.TempDir()
		require.NoError(t, os.CopyFS(root, os.DirFS(image)))
		for _, d := range []string{"lib", "lib64"} {
			if err := os.Remove(filepath.Join(root, d)); err == nil {
				require.NoError(t, os.Symlink("usr/"+d, filepath.Join(root, d)))
			}
		}
		cfg := shell(t.TempDir(), "pwd; echo new > /usr/written; cat /usr/written; echo top > /top; echo /*")
		cfg.RootDir, cfg.RootWritable, cfg.Spec.RootWorkdir = root, true, "/usr"
		o := run(t, &l, cfg)
		require.Equal(t, "/usr\nnew\n/dev /lib /lib64 /marker /proc /sys /tmp /top /usr /workspace\n", o.stdout, "stderr %q", o.stderr)
		for f, want := range map[string]string{"usr/written": "new\n", "top": "top\n"} {
			b, err := os.ReadFile(filepath.Join(root, f))
			require.NoError(t, err)
			require.Equal(t, want, string(b))
		}
	})
}

func copyFile(t *testing.T, src, dst string) {
	t.Helper()
	b, err := os.ReadFile(src)
	require.NoError(t, err)
	st, err := os.Stat(src)
	require.NoError(t, err)
	require.NoError(t, os.MkdirAll(filepath.Dir(dst), 0o755))
	require.NoError(t, os.WriteFile(dst, b, st.Mode().Perm()))
}

func TestLimits(t *testing.T) {
	testenv.RequireRoot(t)
	var l sandbox.Launcher
	mem, pids := l.Limits()
	if !mem || !pids {
		testenv.Skip(t, fmt.Sprintf("needs memory and pids cgroups (memory %v, pids %v)", mem, pids))
	}
	ws := t.TempDir()
	for _, tc := range []struct {
		name  string
		body  string
		apply func(*platforms.ExecSpec)
		check func(platforms.ExecResult) error
	}{
		{"fork bomb", "f() { f | f & }; f; sleep 30", func(s *platforms.ExecSpec) {
			s.Pids, s.Timeout = 64, 3*time.Second
		}, func(r platforms.ExecResult) error {
			if !r.TimedOut {
				return errors.New("want it to run until the timeout")
			}
			return nil
		}},
		{"memory hog", "dd if=/dev/zero of=/dev/null bs=256M count=1", func(s *platforms.ExecSpec) {
			s.MemoryBytes, s.Timeout = 64<<20, 30*time.Second
		}, func(r platforms.ExecResult) error {
			if r.ExitCode != 137 || r.TimedOut {
				return errors.New("want the hog killed (137) before the timeout")
			}
			return nil
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := shell(ws, tc.body)
			tc.apply(&cfg.Spec)
			done := make(chan output, 1)
			go func() {
				var o, e bytes.Buffer
				// Not t.Context(): should the subtest stop early, a
				// cancelled Run here would report after it ended.
				res, err := l.Run(context.Background(), cfg, &o, &e)
				assert.NoError(t, err, "run")
				done <- output{res, o.String(), e.String()}
			}()
			// Meanwhile an ordinary exec still runs normally.
			time.Sleep(500 * time.Millisecond)
			if o := run(t, &l, shell(ws, "echo fine")); o.stdout != "fine\n" || o.res.ExitCode != 0 {
				t.Errorf("concurrent exec: got %q, %+v", o.stdout, o.res)
			}
			o := <-done
			if err := tc.check(o.res); err != nil {
				t.Errorf("%v: got %+v (stderr %.300q)", err, o.res, o.stderr)
			}
		})
	}
}

// TestNoLeaks checks that execs leave nothing on the host: descriptors,
// mounts, cgroups, processes.
func TestNoLeaks(t *testing.T) {
	testenv.RequireRoot(t)
	var l sandbox.Launcher
	ws := t.TempDir()
	cfg := shell(ws, "sleep 0.01 & echo x > f; cat f")
	cfg.Spec.MemoryBytes = 256 << 20
	run(t, &l, cfg) // warm up the runtime's own descriptors
	l.Settle(t.Context())
	fds, mounts := fdCount(t), relevantMounts(t, ws)
	for range 5 {
		run(t, &l, cfg)
	}
	timeout := shell(ws, "sleep 10 & sleep 10")
	timeout.Spec.Timeout = 200 * time.Millisecond
	if o := run(t, &l, timeout); !o.res.TimedOut {
		t.Errorf("want a timeout, got %+v", o.res)
	}
	l.Settle(t.Context()) // Run returns before the init's own exit is reaped
	// A leak is more descriptors than before. The Go runtime opens and
	// closes some of its own (cgroup files it reads for GOMAXPROCS), so the
	// count may dip, or rise for a moment.
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		got := fdCount(t)
		if got <= fds {
			break
		}
		if time.Now().After(deadline) {
			t.Errorf("descriptors: %d before, %d after", fds, got)
			break
		}
	}
	if got := relevantMounts(t, ws); got != mounts {
		t.Errorf("mounts changed:\nbefore:\n%s\nafter:\n%s", mounts, got)
	}
	leaks, err := l.Leaks(t.Context())
	if err != nil || len(leaks) > 0 {
		t.Errorf("leaks: %v %v", leaks, err)
	}
	// A process an earlier test started (criu, run for a checkpoint) may
	// still be exiting: a leak is one that stays.
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		kids := children(t)
		if len(kids) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Errorf("child processes left: %v", kids)
			break
		}
	}
}

func fdCount(t *testing.T) int {
	ents, err := os.ReadDir("/proc/self/fd")
	require.NoError(t, err)
	return len(ents)
}

// relevantMounts lists this host's mounts that a leaking sandbox would
// add: on /tmp (where the init stages its root) or below the workspace.
func relevantMounts(t *testing.T, ws string) string {
	b, err := os.ReadFile("/proc/self/mountinfo")
	require.NoError(t, err)
	var out []string
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) > 4 && (f[4] == "/tmp" || strings.HasPrefix(f[4], ws)) {
			out = append(out, line)
		}
	}
	return strings.Join(out, "\n")
}

// children lists this process's child processes.
func children(t *testing.T) []string {
	kids, err := proctest.Children(os.Getpid())
	require.NoError(t, err)
	return kids
}

// TestInvalidConfig: what the launcher refuses of a Config beyond its
// spec, whose rules are platformtest's (Contract).
func TestInvalidConfig(t *testing.T) {
	var l sandbox.Launcher
	ws := t.TempDir()
	file := filepath.Join(ws, "file")
	require.NoError(t, os.WriteFile(file, nil, 0o644))
	for name, cfg := range map[string]sandbox.Config{
		"workspace is a file": {Workspace: file, Spec: platforms.ExecSpec{Argv: []string{"true"}}},
		"relative workspace":  {Workspace: "rel", Spec: platforms.ExecSpec{Argv: []string{"true"}}},
		"missing workspace":   {Workspace: filepath.Join(ws, "nope"), Spec: platforms.ExecSpec{Argv: []string{"true"}}},
		"empty argv":          {Workspace: ws},
	} {
		_, err := l.Run(t.Context(), cfg, nil, nil)
		assert.ErrorIs(t, err, platforms.ErrBadSpec, name)
	}
}

func TestSetupFailure(t *testing.T) {
	testenv.RequireRoot(t)
	var l sandbox.Launcher
	cfg := shell(t.TempDir(), "true")
	cfg.Spec.Dir = "does/not/exist"
	_, err := l.Run(t.Context(), cfg, nil, nil)
	if assert.ErrorIs(t, err, sandbox.ErrSetup) {
		assert.ErrorContains(t, err, "does/not/exist", "ErrSetup naming the dir")
	}
}

// TestRlimitFallback runs the limits without cgroups: RLIMIT_AS for
// memory, RLIMIT_NPROC for pids (only for a non-root uid: it counts every
// process of the uid on the host).
func TestRlimitFallback(t *testing.T) {
	testenv.RequireRoot(t)
	l := sandbox.Launcher{NoCgroups: true}
	if mem, pids := l.Limits(); mem || pids {
		t.Fatalf("NoCgroups launcher reports cgroup limits (%v, %v)", mem, pids)
	}
	ws := t.TempDir()
	cfg := shell(ws, "dd if=/dev/zero of=/dev/null bs=256M count=1")
	cfg.Spec.MemoryBytes, cfg.Spec.Timeout = 64<<20, 30*time.Second
	if o := run(t, &l, cfg); o.res.ExitCode == 0 || o.res.TimedOut {
		t.Errorf("memory hog under RLIMIT_AS: got %+v (stderr %.200q), want a failure before the timeout", o.res, o.stderr)
	}
	// dash, unlike bash, does not retry a failed fork.
	cfg = sandbox.Config{Workspace: ws, Spec: platforms.ExecSpec{Argv: []string{"sh", "-c",
		"grep 'Max processes' /proc/self/limits | tr -s ' ' | cut -d' ' -f3; for i in $(seq 40); do sleep 5 & done; echo all started"}}}
	cfg.Spec.UID, cfg.Spec.GID, cfg.Spec.Pids, cfg.Spec.Timeout = 4242, 4242, 10, 20*time.Second
	o := run(t, &l, cfg)
	if o.stdout != "10\n" || o.res.ExitCode == 0 || !strings.Contains(o.stderr, "fork") {
		t.Errorf("RLIMIT_NPROC 10: got %q, %+v (stderr %.200q); want the limit 10 and a failed fork", o.stdout, o.res, o.stderr)
	}
	if o := run(t, &l, shell(ws, "echo fine")); o.stdout != "fine\n" {
		t.Errorf("ordinary exec: %q", o.stdout)
	}
}

func TestRemoveStale(t *testing.T) {
	testenv.RequireRoot(t)
	var l sandbox.Launcher
	if _, pids := l.Limits(); !pids {
		testenv.Skip(t, "needs the pids cgroup")
	}
	// A cgroup left by a crashed daemon looks like this.
	parent := pidsParent(t)
	stale := filepath.Join(parent, "layerfs-crashed-1")
	require.NoError(t, os.Mkdir(stale, 0o755))
	defer os.Remove(stale)
	// Only old ones go: other launchers on this host may be between
	// creating a cgroup and moving their init into it.
	if removed, _ := l.RemoveStale(time.Hour); slices.Contains(removed, stale) {
		t.Errorf("a fresh cgroup was removed")
	}
	old := time.Now().Add(-2 * time.Hour)
	require.NoError(t, os.Chtimes(stale, old, old))
	// (Launchers of tests running in parallel clean the same parent: one
	// of them may remove it first. It must be gone either way.)
	if removed, _ := l.RemoveStale(time.Hour); !slices.Contains(removed, stale) {
		t.Logf("got %v: %s removed by another launcher meanwhile?", removed, stale)
	}
	_, err := os.Stat(stale)
	assert.ErrorIs(t, err, os.ErrNotExist, "stale cgroup still there")

	// A cgroup of a launcher whose process died goes at once, and what
	// still runs in it is killed; one of a live process stays.
	dead := exec.Command("true")
	require.NoError(t, dead.Run())
	orphan := filepath.Join(parent, fmt.Sprintf("layerfs-%d-0123456789ab-1", dead.Process.Pid))
	live := filepath.Join(parent, fmt.Sprintf("layerfs-%d-0123456789ab-1", os.Getpid()))
	for _, d := range []string{orphan, live} {
		require.NoError(t, os.Mkdir(d, 0o755))
		defer os.Remove(d)
	}
	escaped := exec.Command("sleep", "1000")
	require.NoError(t, escaped.Start())
	defer escaped.Process.Kill()
	require.NoError(t, os.WriteFile(filepath.Join(orphan, "cgroup.procs"), []byte(strconv.Itoa(escaped.Process.Pid)), 0))
	removed, err := l.RemoveStale(time.Hour)
	if err != nil || slices.Contains(removed, live) {
		t.Errorf("got %v, %v; want %s kept", removed, err, live)
	}
	_, err = os.Stat(orphan)
	assert.ErrorIs(t, err, os.ErrNotExist, "got %v; the dead owner's cgroup %s is still there", removed, orphan)
	_, err = os.Stat(live)
	assert.NoError(t, err, "the live owner's cgroup")
	assert.ErrorContains(t, escaped.Wait(), "killed", "the process in the dead owner's cgroup")
}

// pidsParent is this process's pids cgroup directory (v1 here, v2 elsewhere).
func pidsParent(t *testing.T) string {
	b, err := os.ReadFile("/proc/self/cgroup")
	require.NoError(t, err)
	for _, line := range strings.Split(string(b), "\n") {
		parts := strings.SplitN(line, ":", 3)
		if len(parts) == 3 && parts[1] == "pids" {
			return filepath.Join("/sys/fs/cgroup/pids", parts[2])
		}
	}
	for _, line := range strings.Split(string(b), "\n") {
		if p, ok := strings.CutPrefix(line, "0::"); ok {
			return filepath.Join("/sys/fs/cgroup", p)
		}
	}
	t.Skip("no pids cgroup found")
	return ""
}
