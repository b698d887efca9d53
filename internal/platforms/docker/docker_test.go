package docker

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	gofs "github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"layerfs.dev/layerfs/internal/egress"
	"layerfs.dev/layerfs/internal/egress/egresstest"
	"layerfs.dev/layerfs/internal/platforms"
	"layerfs.dev/layerfs/internal/platforms/escapetest"
	"layerfs.dev/layerfs/internal/platforms/internal/userns"
	"layerfs.dev/layerfs/internal/platforms/platformtest"
	"layerfs.dev/layerfs/internal/proctest"
	"layerfs.dev/layerfs/internal/testenv"
)

// fuseTestName names this package's test FUSE mounts in mountinfo.
const fuseTestName = "layerfs-docker-test"

// attach attaches a fresh workspace (a 0777 temp dir, so that non-root
// execs can write) and closes it when the test ends.
func attach(t *testing.T, p *Platform, w platforms.Workspace) platforms.Sandbox {
	t.Helper()
	if w.HostPath == "" {
		w.HostPath = t.TempDir()
		require.NoError(t, os.Chmod(w.HostPath, 0o777))
	}
	if w.ID == "" {
		w.ID = strings.ToLower(strings.NewReplacer("/", "-", "_", "-").Replace(t.Name()))
		w.ID = strings.Trim(w.ID[:min(len(w.ID), 50)], "-")
	}
	sb, err := p.Attach(t.Context(), w)
	require.NoError(t, err, "Attach(%+v)", w)
	t.Cleanup(func() {
		assert.NoError(t, sb.Close(context.Background()), "Close")
	})
	return sb
}

// run runs a shell body and returns its result and output.
func run(t *testing.T, sb platforms.Sandbox, spec platforms.ExecSpec) (platforms.ExecResult, string, string) {
	t.Helper()
	var out, errb bytes.Buffer
	res, err := sb.Exec(t.Context(), spec, &out, &errb)
	require.NoError(t, err, "Exec(%q) (stderr %q)", spec.Argv, errb.String())
	return res, out.String(), errb.String()
}

func sh(body string) platforms.ExecSpec { return platforms.ExecSpec{Argv: platforms.ShellArgv(body)} }

func TestNoEngine(t *testing.T) {
	t.Parallel()
	sock := filepath.Join(t.TempDir(), "no-docker-here.sock")
	p := New(Options{Host: "unix://" + sock})
	ctx := t.Context()
	_, err := p.Identity(ctx)
	assert.ErrorIs(t, err, platforms.ErrNotUp, "Identity before Up")
	_, err = p.Attach(ctx, platforms.Workspace{ID: "x", HostPath: t.TempDir()})
	assert.ErrorIs(t, err, platforms.ErrNotUp, "Attach before Up")
	err = p.Up(ctx)
	require.ErrorIs(t, err, platforms.ErrUnavailable, "Up with no engine")
	for _, want := range []string{sock, "scripts/ensure-docker", "dockerd"} {
		assert.ErrorContains(t, err, want)
	}
	assert.NoError(t, p.Down(ctx), "Down after a failed Up")
}

func TestLifecycle(t *testing.T) {
	t.Parallel()
	shared.get(t) // the image exists: this Up must not race another import
	ctx := t.Context()
	p := New(Options{})
	if p.Name() != "docker" || !p.Features().HostMounts || p.Features().RemoteDaemon {
		t.Fatalf("name %q features %+v", p.Name(), p.Features())
	}
	for i := range 2 { // Up is idempotent
		require.NoError(t, p.Up(ctx), "Up #%d", i+1)
	}
	id, err := p.Identity(ctx)
	require.NoError(t, err)
	t.Logf("identity: %+v", id)
	if id.Platform != "docker" || id.Kernel == "" || id.CPUs < 1 || id.MemoryBytes <= 0 ||
		!strings.HasPrefix(id.Runtime, "docker ") || !strings.HasPrefix(id.Image, "sha256:") {
		t.Errorf("incomplete identity %+v", id)
	}
	var uts bytes.Buffer
	sb := attach(t, p, platforms.Workspace{ID: "lifecycle"})
	if res, err := sb.Exec(ctx, platforms.ExecSpec{Argv: []string{"uname", "-r"}}, &uts, nil); err != nil || res.ExitCode != 0 {
		t.Fatalf("uname: %+v %v", res, err)
	}
	if got := strings.TrimSpace(uts.String()); got != id.Kernel {
		t.Errorf("uname -r in the sandbox %q, Identity.Kernel %q", got, id.Kernel)
	}
	if n := countContainers(t, p, "lifecycle"); n != 1 {
		t.Errorf("%d containers for the workspace, want 1", n)
	}
	for i := range 2 { // Close is idempotent
		require.NoError(t, sb.Close(ctx), "Close #%d", i+1)
	}
	if n := countContainers(t, p, "lifecycle"); n != 0 {
		t.Errorf("%d containers after Close, want 0", n)
	}
	_, err = sb.Exec(ctx, sh("true"), nil, nil)
	assert.ErrorIs(t, err, platforms.ErrClosed, "Exec after Close")
	// Down removes what Close did not.
	attach(t, p, platforms.Workspace{ID: "lifecycle-a"})
	attach(t, p, platforms.Workspace{ID: "lifecycle-b"})
	for i := range 2 {
		require.NoError(t, p.Down(ctx), "Down #%d", i+1)
	}
	_, err = p.Identity(ctx)
	assert.ErrorIs(t, err, platforms.ErrNotUp, "Identity after Down")
	// Up again: the image is still there, so nothing is rebuilt.
	require.NoError(t, p.Up(ctx))
	defer p.Down(ctx)
	for _, w := range []string{"lifecycle-a", "lifecycle-b"} {
		if n := countContainers(t, p, w); n != 0 {
			t.Errorf("%d containers of %s after Down, want 0", n, w)
		}
	}
	if p.state.image.Built || p.state.image.ID != id.Image {
		t.Errorf("Up after Down rebuilt the image: %+v, was %s", p.state.image, id.Image)
	}
}

func countContainers(t *testing.T, p *Platform, workspace string) int {
	t.Helper()
	cli, _, err := p.current()
	require.NoError(t, err)
	cs, err := cli.ContainerList(t.Context(), containerListLabel(labelWorkspace+"="+workspace))
	require.NoError(t, err)
	return len(cs)
}

func TestImageRebuildSkipped(t *testing.T) {
	t.Parallel()
	first := shared.get(t)
	ctx := t.Context()
	p := New(Options{})
	start := time.Now()
	require.NoError(t, p.Up(ctx))
	defer p.Down(ctx)
	t.Logf("Up with the image present took %v (image %s, tar %d bytes, engine size %d bytes)",
		time.Since(start), p.state.image.Ref, p.state.image.TarBytes, p.state.image.SizeBytes)
	if p.state.image.Built || p.state.image.TarBytes != 0 {
		t.Errorf("second Up imported (%v) or hashed (%d bytes) the image again", p.state.image.Built, p.state.image.TarBytes)
	}
	if p.state.image.ID != first.state.image.ID || p.state.image.Ref != first.state.image.Ref {
		t.Errorf("second Up image %+v, first %+v", p.state.image, first.state.image)
	}
}

func TestExecResults(t *testing.T) {
	t.Parallel()
	p := shared.get(t)
	dir := t.TempDir()
	require.NoError(t, os.MkdirAll(filepath.Join(dir, "a", "b"), 0o755))
	sb := attach(t, p, platforms.Workspace{HostPath: dir})
	tests := []struct {
		name      string
		spec      platforms.ExecSpec
		exit      int
		signal    string
		out, errs string
		truncated bool
	}{
		{name: "ok", spec: sh("echo out; echo err >&2"), out: "out\n", errs: "err\n"},
		{name: "exit code", spec: sh("exit 42"), exit: 42},
		{name: "killed by a signal", spec: platforms.ExecSpec{Argv: []string{"bash", "-c", "kill -KILL $$"}}, exit: 137, signal: "SIGKILL"},
		{name: "not found", spec: platforms.ExecSpec{Argv: []string{"no-such-program"}}, exit: 127,
			errs: "layerfs-supervise: exec: \"no-such-program\": executable file not found in $PATH\n"},
		{name: "stdin", spec: platforms.ExecSpec{Argv: []string{"tr", "a-z", "A-Z"}, Stdin: strings.NewReader("hello\n")}, out: "HELLO\n"},
		{name: "no stdin is empty", spec: sh("wc -c"), out: "0\n"},
		{name: "env and defaults", spec: platforms.ExecSpec{Argv: platforms.ShellArgv(`echo "$FOO|$HOME|$TERM|$PATH"`), Env: []string{"FOO=bar baz"}},
			out: "bar baz|/tmp|dumb|" + imagePath + "\n"},
		{name: "env overrides", spec: platforms.ExecSpec{Argv: platforms.ShellArgv(`echo "$HOME"`), Env: []string{"HOME=/workspace"}}, out: "/workspace\n"},
		{name: "workdir", spec: platforms.ExecSpec{Argv: []string{"pwd"}}, out: "/workspace\n"},
		{name: "dir", spec: platforms.ExecSpec{Argv: []string{"pwd"}, Dir: "a/b"}, out: "/workspace/a/b\n"},
		{name: "gid", spec: platforms.ExecSpec{Argv: []string{"id", "-g"}, UID: 1000, GID: 1001}, out: "1001\n"},
		{name: "uid and gid", spec: platforms.ExecSpec{Argv: []string{"id", "-u"}, UID: 1000, GID: 1000}, out: "1000\n"},
		// Capabilities in the host's user namespace: none. The root of a
		// user namespace of its own has that namespace's, as on local.
		{name: "no capabilities", spec: sh("grep -q '^CapEff:.*[1-9a-f]' /proc/self/status && grep -Eq '^ *0 +0 ' /proc/self/uid_map || echo none"), out: "none\n"},
		{name: "no new privileges", spec: sh("grep NoNewPrivs /proc/self/status"), out: "NoNewPrivs:\t1\n"},
		{name: "read-only root", spec: sh("touch /usr/x 2>&1 | sed 's/.*: //'; touch /tmp/x && echo tmp ok"), out: "Read-only file system\ntmp ok\n"},
		{name: "hostname", spec: platforms.ExecSpec{Argv: []string{"hostname"}, Hostname: "layerfs"}, out: "layerfs\n"},
		{name: "python3", spec: platforms.ExecSpec{Argv: []string{"python3", "-c", "import json, sqlite3, subprocess; print(json.dumps([1]))"}}, out: "[1]\n"},
		{name: "output cap", spec: platforms.ExecSpec{Argv: platforms.ShellArgv("seq 1 1000; seq 1 1000 >&2"), OutputLimit: 10},
			out: "1\n2\n3\n4\n5\n", errs: "1\n2\n3\n4\n5\n", truncated: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel() // execs in one container run concurrently
			res, out, errs := run(t, sb, tt.spec)
			if res.ExitCode != tt.exit || res.Signal != tt.signal || res.TimedOut || res.OutputTruncated != tt.truncated {
				t.Errorf("result %+v, want exit %d signal %q truncated %v", res, tt.exit, tt.signal, tt.truncated)
			}
			assert.Equal(t, tt.out, out, "stdout")
			assert.Equal(t, tt.errs, errs, "stderr")
			if res.Command < 0 || (res.Command == 0 && tt.exit != 127) || res.Wall < res.Command || res.Launch != res.Wall-res.Command {
				t.Errorf("times %+v", res)
			}
		})
	}
}

// TestExecRefusesOtherHostname: the rest of the exec contract is
// platformtest's (Contract); a hostname is docker's own, one per container.
func TestExecRefusesOtherHostname(t *testing.T) {
	t.Parallel()
	p := shared.get(t)
	sb := attach(t, p, platforms.Workspace{})
	_, err := sb.Exec(t.Context(), platforms.ExecSpec{Argv: []string{"true"}, Hostname: "other"}, nil, nil)
	assert.ErrorIs(t, err, platforms.ErrBadSpec)
}

func TestCommandTime(t *testing.T) {
	t.Parallel()
	p := shared.get(t)
	sb := attach(t, p, platforms.Workspace{})
	res, _, _ := run(t, sb, platforms.ExecSpec{Argv: []string{"sleep", "0.3"}})
	if res.Command < 300*time.Millisecond || res.Command > 3*time.Second {
		t.Errorf("command time %v for sleep 0.3", res.Command)
	}
	if res.Launch <= 0 {
		t.Errorf("launch %v", res.Launch)
	}
}

// sandboxSleepers lists the processes in the container running `sleep ARG`,
// from inside it.
func sandboxSleepers(t *testing.T, sb platforms.Sandbox, arg string) string {
	t.Helper()
	_, out, _ := run(t, sb, platforms.ExecSpec{Argv: platforms.ShellArgv("ps -eo args= | grep -x 'sleep " + arg + "' || true")})
	return out
}

func TestTimeoutKillsTree(t *testing.T) {
	t.Parallel()
	p := shared.get(t)
	sb := attach(t, p, platforms.Workspace{})
	arg := proctest.Marker()
	start := time.Now()
	res, out, _ := run(t, sb, platforms.ExecSpec{Argv: proctest.Escapers(arg, "sleep "+arg), Timeout: time.Second})
	if took := time.Since(start); took > 10*time.Second {
		t.Errorf("timed-out exec took %v", took)
	}
	if !res.TimedOut || res.ExitCode != 137 || res.Signal != "SIGKILL" || out != "started\n" {
		t.Errorf("result %+v stdout %q, want timed out by SIGKILL after 'started'", res, out)
	}
	if res.Command < time.Second || res.Command > 5*time.Second {
		t.Errorf("command time %v for a 1s timeout", res.Command)
	}
	if left := sandboxSleepers(t, sb, arg); left != "" {
		t.Errorf("left in the container: %q", left)
	}
	if left := proctest.Sleepers(arg); len(left) != 0 {
		t.Errorf("left on the host: %v", left)
	}
}

func TestLeftoversKilledWhenCommandEnds(t *testing.T) {
	t.Parallel()
	p := shared.get(t)
	sb := attach(t, p, platforms.Workspace{})
	arg := proctest.Marker()
	start := time.Now()
	res, out, _ := run(t, sb, platforms.ExecSpec{Argv: proctest.Escapers(arg, "exit 0")})
	if took := time.Since(start); took > 10*time.Second || res.ExitCode != 0 || out != "started\n" {
		t.Errorf("result %+v stdout %q after %v", res, out, took)
	}
	if left := sandboxSleepers(t, sb, arg); left != "" {
		t.Errorf("left in the container: %q", left)
	}
}

func TestContextCancelKillsTree(t *testing.T) {
	t.Parallel()
	p := shared.get(t)
	sb := attach(t, p, platforms.Workspace{})
	arg := proctest.Marker()
	ctx, cancel := context.WithTimeout(t.Context(), 1500*time.Millisecond)
	defer cancel()
	start := time.Now()
	var out bytes.Buffer
	_, err := sb.Exec(ctx, platforms.ExecSpec{Argv: proctest.Escapers(arg, "sleep "+arg), Timeout: time.Hour}, &out, nil)
	assert.ErrorIs(t, err, context.DeadlineExceeded, "Exec with an expiring context")
	if took := time.Since(start); took > 10*time.Second {
		t.Errorf("cancelled exec took %v", took)
	}
	if left := sandboxSleepers(t, sb, arg); left != "" {
		t.Errorf("left in the container: %q", left)
	}
	if left := proctest.Sleepers(arg); len(left) != 0 {
		t.Errorf("left on the host: %v", left)
	}
}

// hostInterfaces lists this host's network interfaces.
func hostInterfaces(t *testing.T) string {
	ents, err := os.ReadDir("/sys/class/net")
	require.NoError(t, err)
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
	}
	sort.Strings(names)
	return strings.Join(names, " ")
}

func TestNetwork(t *testing.T) {
	t.Parallel()
	p := shared.get(t)
	list := sh("ls /sys/class/net | sort | tr '\\n' ' ' | sed 's/ $//'")
	off := attach(t, p, platforms.Workspace{ID: "net-off"})
	if _, out, _ := run(t, off, list); out != "lo" {
		t.Errorf("interfaces with the network off: %q, want lo", out)
	}
	on := attach(t, p, platforms.Workspace{ID: "net-on", Network: true})
	if _, out, _ := run(t, on, list); out != hostInterfaces(t) {
		t.Errorf("interfaces with the network granted: %q, want the host's %q", out, hostInterfaces(t))
	}
}

// checkBothWays checks that files written on the host are seen in the
// sandbox and the other way round, by root and by another uid.
func checkBothWays(t *testing.T, sb platforms.Sandbox, hostDir string) {
	t.Helper()
	require.NoError(t, os.WriteFile(filepath.Join(hostDir, "from-host"), []byte("host\n"), 0o644))
	res, out, errs := run(t, sb, sh("cat from-host && echo sandbox > from-sandbox && mkdir -p d/e && echo deep > d/e/f"))
	if res.ExitCode != 0 || out != "host\n" {
		t.Fatalf("sandbox reading the host's file: %+v %q %q", res, out, errs)
	}
	res, _, errs = run(t, sb, platforms.ExecSpec{Argv: platforms.ShellArgv("echo user > from-user"), UID: 1000, GID: 1000})
	if res.ExitCode != 0 {
		t.Fatalf("uid 1000 writing: %+v %q", res, errs)
	}
	for name, want := range map[string]string{"from-sandbox": "sandbox\n", "d/e/f": "deep\n", "from-user": "user\n"} {
		b, err := os.ReadFile(filepath.Join(hostDir, name))
		if err != nil || string(b) != want {
			t.Errorf("host reading %s: %q, %v", name, b, err)
		}
	}
	fi, err := os.Stat(filepath.Join(hostDir, "from-user"))
	require.NoError(t, err)
	if st := fi.Sys().(*syscall.Stat_t); st.Uid != 1000 || st.Gid != 1000 {
		t.Errorf("from-user owned by %d:%d on the host, want 1000:1000", st.Uid, st.Gid)
	}
}

func TestWorkspacePlainDir(t *testing.T) {
	t.Parallel()
	p := shared.get(t)
	dir := t.TempDir()
	require.NoError(t, os.Chmod(dir, 0o777))
	checkBothWays(t, attach(t, p, platforms.Workspace{HostPath: dir}), dir)
}

// TestWorkspaceFUSE bind-mounts a FUSE mount served by this process (go-fuse's
// loopback, with allow_other so that the engine and other uids may enter it,
// and id-mappable, as the engine's are). One that cannot be id-mapped is
// refused: its commands would run in the host's user namespace.
func TestWorkspaceFUSE(t *testing.T) {
	t.Parallel()
	testenv.RequireFUSE(t)
	p := shared.get(t)
	mount := func(idmap bool) (backing, mnt string) {
		backing, mnt = t.TempDir(), t.TempDir()
		require.NoError(t, os.Chmod(backing, 0o777))
		root, err := gofs.NewLoopbackRoot(backing)
		require.NoError(t, err)
		srv, err := gofs.Mount(mnt, root, &gofs.Options{MountOptions: fuse.MountOptions{
			DirectMount: true, AllowOther: true, FsName: fuseTestName, Name: "loopback",
			Options: []string{"default_permissions"}, IDMappedMount: idmap}})
		require.NoError(t, err, "mount")
		t.Cleanup(func() {
			assert.NoError(t, srv.Unmount(), "unmount")
		})
		return backing, mnt
	}
	_, plain := mount(false)
	if sb, err := p.Attach(t.Context(), platforms.Workspace{ID: "fuse-plain", HostPath: plain}); !errors.Is(err, errNoUserNS) {
		if err == nil {
			sb.Close(t.Context())
		}
		t.Errorf("attach of a FUSE mount that cannot be id-mapped: %v, want errNoUserNS", err)
	}
	backing, mnt := mount(true)
	sb := attach(t, p, platforms.Workspace{HostPath: mnt})
	checkBothWays(t, sb, mnt)
	// The files went through the FUSE mount to its backing directory, and
	// the sandbox sees a fuse file system at /workspace.
	if b, err := os.ReadFile(filepath.Join(backing, "from-sandbox")); err != nil || string(b) != "sandbox\n" {
		t.Errorf("backing dir: %q, %v", b, err)
	}
	_, out, _ := run(t, sb, sh("stat -f -c %T /workspace"))
	assert.Contains(t, out, "fuse", "/workspace file system type")
	// Close must come before the unmount (cleanups run last-in first-out).
	require.NoError(t, sb.Close(t.Context()))
}

func TestRootDir(t *testing.T) {
	t.Parallel()
	p := shared.get(t)
	// An image directory holding bash and what it and the supervisor need,
	// and nothing else (no git).
	r, err := sandboxRoot([]string{"bash"}, p.state.supervisor)
	require.NoError(t, err)
	dir := t.TempDir()
	var buf bytes.Buffer
	require.NoError(t, r.writeTar(&buf))
	require.NoError(t, untar(&buf, dir))
	sb := attach(t, p, platforms.Workspace{RootDir: dir})
	s := sb.(*Sandbox)
	if s.rootImg == "" || s.rootImg == p.state.image.ID {
		t.Fatalf("root-dir image %q", s.rootImg)
	}
	res, out, _ := run(t, sb, sh("echo ${BASH_VERSION%%.*}; command -v git || echo no git"))
	if res.ExitCode != 0 || out != "5\nno git\n" {
		t.Errorf("%+v %q", res, out)
	}
	require.NoError(t, sb.Close(t.Context()))
	cli, _, _ := p.current()
	_, err = cli.ImageInspect(t.Context(), s.rootImg)
	assert.Error(t, err, "root-dir image %s still there after Close", s.rootImg)
}

func TestMarkerUnique(t *testing.T) {
	a := proctest.Marker()
	_, err := strconv.ParseFloat(a, 64)
	require.NoError(t, err, "marker %q is not a sleep duration", a)
}

func TestPerExecLimits(t *testing.T) {
	t.Parallel()
	p := shared.get(t)
	if !p.Features().MemoryLimit || !p.Features().PidsLimit {
		testenv.Skip(t, "no per-exec limits here: "+fmt.Sprint(p.noCg))
	}
	sb := attach(t, p, platforms.Workspace{})
	// Within the limits, with and without stdin.
	res, out, errs := run(t, sb, platforms.ExecSpec{Argv: []string{"wc", "-c"}, MemoryBytes: 256 << 20, Pids: 64})
	if res.ExitCode != 0 || strings.TrimSpace(out) != "0" {
		t.Errorf("limited exec without stdin: %+v %q %q", res, out, errs)
	}
	res, out, _ = run(t, sb, platforms.ExecSpec{Argv: []string{"tr", "a-z", "A-Z"}, Stdin: strings.NewReader("abc"), Pids: 64})
	if res.ExitCode != 0 || out != "ABC" {
		t.Errorf("limited exec with stdin: %+v %q", res, out)
	}
	// The exec runs in its own cgroups, below the container's.
	_, out, _ = run(t, sb, platforms.ExecSpec{Argv: []string{"cat", "/proc/self/cgroup"}, MemoryBytes: 128 << 20, Pids: 50})
	for _, ctrl := range []string{"memory", "pids"} {
		if !regexp.MustCompile(`:` + ctrl + `:/docker/[0-9a-f]{64}/layerfs-exec-`).MatchString(out) {
			t.Errorf("exec not in its own %s cgroup:\n%s", ctrl, out)
		}
	}
	// Memory: a 96 MiB buffer in a 32 MiB exec is killed by the OOM
	// killer; without an exec limit (the container's is larger) it is not.
	hog := platforms.ShellArgv("dd if=/dev/zero of=/dev/null bs=96M count=1 status=none && echo survived")
	res, _, errs = run(t, sb, platforms.ExecSpec{Argv: hog, MemoryBytes: 32 << 20})
	if res.ExitCode != 137 || !strings.Contains(errs, "Killed") {
		t.Errorf("96 MiB in a 32 MiB exec: %+v %q", res, errs)
	}
	res, out, _ = run(t, sb, platforms.ExecSpec{Argv: hog})
	if res.ExitCode != 0 || out != "survived\n" {
		t.Errorf("96 MiB with no exec limit: %+v %q", res, out)
	}
	// Pids: 40 sleeps in a 20-pid exec fail to fork (the supervisor kills
	// those that started when the shell exits). dash, because bash retries
	// a failed fork for seconds.
	res, out, errs = run(t, sb, platforms.ExecSpec{Argv: []string{"sh", "-c", "for i in $(seq 40); do sleep 60 & done; exit 0"}, Pids: 20})
	assert.Contains(t, errs, "Cannot fork", "40 processes in a 20-pid exec: %+v stdout %q", res, out)
	// No exec cgroup outlives its exec.
	s := sb.(*Sandbox)
	for _, dir := range []string{s.cg.memory.Dir, s.cg.pids.Dir} {
		matches, _ := filepath.Glob(filepath.Join(dir, "docker", s.id, "layerfs-exec-*"))
		if len(matches) != 0 {
			t.Errorf("exec cgroups left: %v", matches)
		}
	}
}

// TestConformance runs the suite every platform runs.
func TestConformance(t *testing.T) {
	t.Parallel()
	testenv.RequireDocker(t)
	shared.get(t) // the image exists: no Up of the suite races another import
	platformtest.Run(t, func(t *testing.T) platforms.Platform { return New(Options{Supervisor: supervisorBin}) })
}

// TestCrashedOwnerCleanedUp: what an owner left when it died is removed by
// the next Up on this host. Not parallel: any other test's Up would remove
// the fake dead owner's container while it is being attached.
func TestCrashedOwnerCleanedUp(t *testing.T) {
	shared.get(t) // the image exists: these Ups do not import it again
	ctx := t.Context()
	// A pid that no longer exists: a process that has exited.
	cmd := exec.Command("true")
	require.NoError(t, cmd.Run())
	crashed := New(Options{Supervisor: supervisorBin})
	crashed.owner = strconv.Itoa(cmd.Process.Pid) + "-crashed"
	require.NoError(t, crashed.Up(ctx))
	sb := attach(t, crashed, platforms.Workspace{ID: "crashed-owner"})
	id, clone := sb.(*Sandbox).id, sb.(*Sandbox).clone
	next := New(Options{Supervisor: supervisorBin})
	require.NoError(t, next.Up(ctx))
	defer next.Down(ctx)
	cli, _, _ := next.current()
	_, err := cli.ContainerInspect(ctx, id)
	assert.Error(t, err, "container %.12s of a dead owner survived the next Up", id)
	if clone != "" { // the workspace's id-mapped clone
		_, err := os.Stat(clone)
		assert.ErrorIs(t, err, os.ErrNotExist, "id-mapped workspace of a dead owner survived the next Up")
	}
	assert.NoError(t, crashed.Down(ctx), "Down of the crashed owner")
}

// TestEscapes runs the escape suite: hostile programs in the container must
// fail and leave the host as it was.
func TestEscapes(t *testing.T) {
	t.Parallel()
	testenv.RequireDocker(t)
	shared.get(t) // the image exists: no Up of the suite races another import
	escapetest.Run(t, New(Options{Supervisor: supervisorBin}))
}

// TestFailClosed: the supervisor in a directory only root may enter still
// gives sandboxes their user namespace, and where none can be made Up
// refuses rather than run them in the host's.
func TestFailClosed(t *testing.T) {
	testenv.RequireDocker(t)
	escapetest.FailClosed(t, func(t *testing.T, dir string) platforms.Platform {
		sup := filepath.Join(dir, "layerfs-supervise")
		b, err := os.ReadFile(supervisorBin)
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(sup, b, 0o755))
		return New(Options{Supervisor: sup})
	})
}

// TestUserNamespace: each exec runs in a user namespace whose root is an
// unprivileged host uid, over a workspace id-mapped with it, so that files
// keep their ids on disk (root's are 0, a chown to 1000 gives 1000); the
// command can make no namespace of its own and cannot touch a host file
// that is not its to touch. NoUserNamespace turns it off.
func TestUserNamespace(t *testing.T) {
	t.Parallel()
	p := shared.get(t)
	if _, _, _, err := p.IDMap(); err != nil {
		testenv.Skip(t, "docker sandboxes have no user namespace here: "+err.Error())
	}
	dir := t.TempDir()
	require.NoError(t, os.Chmod(dir, 0o777)) // uid 1000 writes too
	secret := filepath.Join(dir, "host-only")
	require.NoError(t, os.WriteFile(secret, []byte("secret\n"), 0o600))
	require.NoError(t, os.Chown(secret, 70000, 70000))
	sb := attach(t, p, platforms.Workspace{HostPath: dir})
	res, out, errs := run(t, sb, sh(`
		awk '{print $1, $2, $3}' /proc/self/uid_map
		echo r > r && mkdir d && echo c > c && chown 1000:1000 c && stat -c %u:%g r d c
		cat host-only 2>/dev/null && echo read
		echo x >> host-only 2>/dev/null && echo wrote
		stat -c %u host-only
		unshare -U true 2>/dev/null && echo unshared
		unshare -m true 2>/dev/null && echo unshared-mount
		echo done`))
	ids := userns.DefaultRange(nil)
	want := fmt.Sprintf("0 %d %d\n0:0\n0:0\n1000:1000\n65534\ndone\n", ids.Host, ids.Size)
	require.Equal(t, want, out, "stderr %q", errs)
	assert.Equal(t, ids.String(), res.UserNamespace, "receipt")
	for name, want := range map[string]uint32{"r": 0, "d": 0, "c": 1000, "host-only": 70000} {
		fi, err := os.Stat(filepath.Join(dir, name))
		require.NoError(t, err)
		assert.Equal(t, want, fi.Sys().(*syscall.Stat_t).Uid, "owner of %s on disk", name)
	}
	b, err := os.ReadFile(secret)
	require.NoError(t, err)
	assert.Equal(t, "secret\n", string(b))

	// As another uid inside, the command is that uid's host id.
	_, out, _ = run(t, sb, platforms.ExecSpec{Argv: platforms.ShellArgv("id -u; echo u > u; stat -c %u u"), UID: 1000, GID: 1000})
	assert.Equal(t, "1000\n1000\n", out)

	off := New(Options{NoUserNamespace: true, Supervisor: supervisorBin})
	require.NoError(t, off.Up(t.Context()))
	t.Cleanup(func() { assert.NoError(t, off.Down(context.Background())) })
	res, out, _ = run(t, attach(t, off, platforms.Workspace{}), sh("awk '{print $1, $2}' /proc/self/uid_map"))
	assert.Equal(t, "0 0\n", out)
	assert.True(t, strings.HasPrefix(res.UserNamespace, "none: "), "receipt %q", res.UserNamespace)
}

// TestEgress: the escape suite's egress cases in Docker containers.
func TestEgress(t *testing.T) {
	testenv.RequireDocker(t)
	egresstest.Require(t)
	escapetest.Egress(t, func(cfg egress.Config) platforms.Platform { return New(Options{Egress: cfg}) })
}
