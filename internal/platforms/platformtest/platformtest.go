package platformtest

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"layerfs.dev/layerfs/internal/cgroups"
	"layerfs.dev/layerfs/internal/mountinfo"
	"layerfs.dev/layerfs/internal/platforms"
	"layerfs.dev/layerfs/internal/proctest"
	"layerfs.dev/layerfs/wire"
)

// Leaker is implemented by platforms that can list what they left behind
// on the host (containers, VMs, volumes, cgroups, processes). After Down it
// must return nothing.
type Leaker interface {
	Leaks(ctx context.Context) ([]string, error)
}

// Timeouts the suite allows; generous because some platforms (VMs,
// Docker) are slower than namespaces.
const (
	// upTimeout bounds an Up (and the steps sharing its context): a Lima
	// VM under software emulation took 3-8 minutes to boot on the loaded
	// 2-core development machine, and the platform's own boot timeout
	// (20 minutes) must expire first, with its error naming the step.
	upTimeout   = 30 * time.Minute
	execTimeout = 2 * time.Minute
	// killSlack is how long past its timeout an exec may take to return.
	killSlack = 10 * time.Second
)

// Run runs the conformance suite against one platform made by newPlatform,
// brought up once: the checks of Up (and of what is refused before it),
// every check of the running platform, then the checks of Down (and of what
// is refused after it) and that nothing is left. A platform whose Up is a
// VM boot boots once per suite.
func Run(t *testing.T, newPlatform func(t *testing.T) platforms.Platform) {
	before := hostSnapshot(t)
	// Every workspace of the suite is a directory below root, so that
	// anything mounted there afterwards is the platform's leak.
	root, err := os.MkdirTemp("", "platformtest-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(root) })
	newWorkspace := func(t *testing.T) string {
		d, err := os.MkdirTemp(root, "ws-")
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	p := newPlatform(t)
	f := p.Features()
	if !f.HostMounts && !f.RemoteDaemon {
		t.Fatalf("%s: Features has neither HostMounts nor RemoteDaemon", p.Name())
	}
	// Down is idempotent: whatever fails or stops the suite, the platform
	// goes down (NothingLeft checks it did).
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), upTimeout)
		defer cancel()
		if err := p.Down(ctx); err != nil {
			t.Errorf("Down at the end of the suite: %v", err)
		}
	})
	if t.Run("Up", func(t *testing.T) { testUp(t, p) }) {
		switch {
		case f.HostMounts:
			runHostMounts(t, p, newWorkspace)
		case f.RemoteDaemon:
			t.Run("Exec", func(t *testing.T) { runRemoteExec(t, p) })
		}
	}
	t.Run("Down", func(t *testing.T) { testDown(t, p, newWorkspace(t)) })
	t.Run("NothingLeft", func(t *testing.T) { checkNothingLeft(t, p, before, root) })
}

func ctxFor(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// testUp checks what a platform refuses before Up, that Up twice is one
// Up, and what it tells once up: its Identity and, for a RemoteDaemon
// platform, the endpoint of its guest's layerfsd.
func testUp(t *testing.T, p platforms.Platform) {
	ctx := ctxFor(t, upTimeout)
	if _, err := p.Identity(ctx); !errors.Is(err, platforms.ErrNotUp) {
		t.Errorf("Identity before Up: got %v, want ErrNotUp", err)
	}
	r, remote := p.(platforms.Remote)
	if p.Features().RemoteDaemon {
		if !remote {
			t.Fatalf("%s: Features.RemoteDaemon but no Remote", p.Name())
		}
		if _, _, err := r.Endpoint(ctx); !errors.Is(err, platforms.ErrNotUp) {
			t.Errorf("Endpoint before Up: got %v, want ErrNotUp", err)
		}
	}
	for i := range 2 {
		if err := p.Up(ctx); err != nil {
			t.Fatalf("Up #%d: %v", i+1, err)
		}
	}
	id, err := p.Identity(ctx)
	if err != nil {
		t.Fatalf("Identity: %v", err)
	}
	if id.Platform != p.Name() || id.Kernel == "" || id.CPUs <= 0 || id.MemoryBytes <= 0 || id.Runtime == "" {
		t.Errorf("Identity incomplete: %+v", id)
	}
	if p.Features().RemoteDaemon {
		addr, _, err := r.Endpoint(ctx)
		if err != nil {
			t.Fatalf("Endpoint: %v", err)
		}
		if !strings.HasPrefix(addr, "unix:///") && !strings.HasPrefix(addr, "http://") && !strings.HasPrefix(addr, "https://") {
			t.Errorf("Endpoint %q is neither unix:///path nor http(s)://host:port", addr)
		}
	}
}

// testDown checks that Down twice is one Down and what the platform
// refuses after it. ws is a workspace directory that was never attached.
func testDown(t *testing.T, p platforms.Platform, ws string) {
	ctx := ctxFor(t, upTimeout)
	for i := range 2 {
		if err := p.Down(ctx); err != nil {
			t.Errorf("Down #%d: %v", i+1, err)
		}
	}
	if _, err := p.Identity(ctx); !errors.Is(err, platforms.ErrNotUp) {
		t.Errorf("Identity after Down: got %v, want ErrNotUp", err)
	}
	if sh, ok := p.(platforms.SandboxHost); ok {
		if _, err := sh.Attach(ctx, platforms.Workspace{ID: "after-down", HostPath: ws}); !errors.Is(err, platforms.ErrNotUp) {
			t.Errorf("Attach after Down: got %v, want ErrNotUp", err)
		}
	}
	if r, ok := p.(platforms.Remote); ok {
		if _, _, err := r.Endpoint(ctx); !errors.Is(err, platforms.ErrNotUp) {
			t.Errorf("Endpoint after Down: got %v, want ErrNotUp", err)
		}
	}
}

// env is a platform that is up with one attached workspace.
type env struct {
	p  platforms.Platform
	sh platforms.SandboxHost
	sb platforms.Sandbox
	ws string // host path of the workspace

	newWorkspace func(t *testing.T) string
}

func (e *env) exec(t *testing.T, spec platforms.ExecSpec) (platforms.ExecResult, string, string) {
	t.Helper()
	var o, errb bytes.Buffer
	res, err := e.sb.Exec(ctxFor(t, execTimeout), spec, &o, &errb)
	if err != nil {
		t.Fatalf("exec %q: %v", spec.Argv, err)
	}
	return res, o.String(), errb.String()
}

func (e *env) sh1(t *testing.T, body string) (platforms.ExecResult, string, string) {
	t.Helper()
	return e.exec(t, platforms.ExecSpec{Argv: platforms.ShellArgv(body)})
}

func workspaceID() string {
	var b [4]byte
	_, _ = rand.Read(b[:])
	return "conformance-" + hex.EncodeToString(b[:])
}

func runHostMounts(t *testing.T, p platforms.Platform, newWorkspace func(t *testing.T) string) {
	sh, ok := p.(platforms.SandboxHost)
	if !ok {
		t.Fatalf("%s: Features.HostMounts but no SandboxHost", p.Name())
	}
	ctx := ctxFor(t, upTimeout)
	e := &env{p: p, sh: sh, ws: newWorkspace(t), newWorkspace: newWorkspace}
	sb, err := sh.Attach(ctx, platforms.Workspace{ID: workspaceID(), HostPath: e.ws})
	if err != nil {
		t.Fatalf("Attach: %v", err)
	}
	e.sb = sb

	t.Run("Contract", func(t *testing.T) { testContract(t, e) })
	t.Run("ExitCodes", func(t *testing.T) { testExitCodes(t, e) })
	t.Run("Output", func(t *testing.T) { testOutput(t, e) })
	t.Run("Stdin", func(t *testing.T) { testStdin(t, e) })
	testTerminal(t, e)
	t.Run("Descriptors", func(t *testing.T) { testDescriptors(t, e) })
	t.Run("Timeout", func(t *testing.T) { testTimeout(t, e) })
	t.Run("OutputCap", func(t *testing.T) { testOutputCap(t, e) })
	t.Run("Workspace", func(t *testing.T) { testWorkspace(t, e) })
	t.Run("Concurrent", func(t *testing.T) { testConcurrent(t, e) })
	t.Run("Network", func(t *testing.T) { testNetwork(t, e) })
	t.Run("Ports", func(t *testing.T) { testPorts(t, e) })
	t.Run("Limits", func(t *testing.T) { testLimits(t, e) })
	t.Run("CPUAndOpenFiles", func(t *testing.T) { testCPUAndOpenFiles(t, e) })
	t.Run("Isolation", func(t *testing.T) {
		res, out, _ := e.exec(t, platforms.ExecSpec{Argv: []string{"cat", "/proc/self/uid_map"}})
		checkIsolation(t, p, out, res.UserNamespace)
	})

	t.Run("Close", func(t *testing.T) {
		for i := range 2 {
			if err := sb.Close(ctx); err != nil {
				t.Errorf("Close #%d: %v", i+1, err)
			}
		}
		if _, err := sb.Exec(ctx, platforms.ExecSpec{Argv: []string{"true"}}, nil, nil); err == nil {
			t.Error("Exec after Close succeeded")
		}
	})
}

func testExitCodes(t *testing.T, e *env) {
	for _, tc := range []struct {
		name   string
		argv   []string
		code   int
		signal string
	}{
		{"true", []string{"true"}, 0, ""},
		{"false", []string{"false"}, 1, ""},
		{"exit 42", platforms.ShellArgv("exit 42"), 42, ""},
		{"argv exact", []string{"sh", "-c", `[ "$1" = "a b" ] && [ "$2" = '$c' ] && exit $#`, "x", "a b", "$c"}, 2, ""},
		{"pipefail", platforms.ShellArgv("false | true"), 1, ""},
		{"SIGTERM", platforms.ShellArgv("kill -TERM $$"), 143, "SIGTERM"},
		{"SIGKILL", platforms.ShellArgv("kill -KILL $$"), 137, "SIGKILL"},
		{"not found", []string{"no-such-command-in-sandbox"}, 127, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res, _, stderr := e.exec(t, platforms.ExecSpec{Argv: tc.argv})
			// A platform that cannot tell a signal from exit 128+n may
			// leave Signal empty; a wrong name is an error.
			if res.ExitCode != tc.code || (res.Signal != "" && res.Signal != tc.signal) {
				t.Errorf("got exit %d signal %q, want %d %q (stderr %q)", res.ExitCode, res.Signal, tc.code, tc.signal, stderr)
			}
			if res.TimedOut || res.OutputTruncated {
				t.Errorf("unexpected flags: %+v", res)
			}
			if res.Wall <= 0 || res.Command < 0 || res.Launch < 0 || res.Command+res.Launch != res.Wall {
				t.Errorf("times inconsistent: %+v", res)
			}
		})
	}
}

func testOutput(t *testing.T, e *env) {
	res, stdout, stderr := e.sh1(t, "echo out1; echo err1 >&2; printf 'out2'; printf 'err2' >&2")
	if stdout != "out1\nout2" || stderr != "err1\nerr2" || res.ExitCode != 0 {
		t.Errorf("got stdout %q stderr %q exit %d", stdout, stderr, res.ExitCode)
	}
	// Binary-safe, and larger than a pipe buffer.
	_, stdout, _ = e.sh1(t, "head -c 300000 /dev/zero | tr '\\0' '\\377'")
	if stdout != strings.Repeat("\xff", 300000) {
		t.Errorf("large output: got %d bytes", len(stdout))
	}
}

func testStdin(t *testing.T, e *env) {
	in := strings.Repeat("line of input\n", 10000)
	res, stdout, _ := e.exec(t, platforms.ExecSpec{Argv: platforms.ShellArgv("wc -l; wc -c < /dev/null"), Stdin: strings.NewReader(in)})
	if strings.Fields(stdout)[0] != "10000" || res.ExitCode != 0 {
		t.Errorf("stdin: got %q, want 10000 lines", stdout)
	}
	_, stdout, _ = e.sh1(t, "cat | wc -c")
	if strings.TrimSpace(stdout) != "0" {
		t.Errorf("no stdin: got %q, want an empty stdin", stdout)
	}
}

// testDescriptors checks that a command holds its stdio and nothing else
// of whoever started it (no FUSE device, Store file, socket or pipe of the
// daemon's), with and without stdin.
func testDescriptors(t *testing.T, e *env) {
	// The shell's glob of the directory is fd 3 while the loop runs.
	const body = "cd /proc/self/fd && for f in *; do echo \"$f $(readlink $f)\"; done"
	for _, stdin := range []io.Reader{nil, strings.NewReader("x")} {
		res, stdout, stderr := e.exec(t, platforms.ExecSpec{Argv: platforms.ShellArgv(body), Stdin: stdin})
		var fds []string
		for _, line := range strings.Split(strings.TrimSpace(stdout), "\n") {
			fd, _, _ := strings.Cut(line, " ")
			fds = append(fds, fd)
		}
		if !slices.Equal(fds, []string{"0", "1", "2", "3"}) || res.ExitCode != 0 {
			t.Errorf("stdin %v: the command holds (exit %d, stderr %q):\n%s\nwant fds 0, 1, 2 and the listing's 3", stdin != nil, res.ExitCode, stderr, stdout)
		}
	}
}

func testTimeout(t *testing.T, e *env) {
	marker := fmt.Sprintf("1000.%06d", time.Now().UnixNano()%1000000)
	t0 := time.Now()
	res, _, _ := e.exec(t, platforms.ExecSpec{
		Argv:    platforms.ShellArgv(fmt.Sprintf("sleep %s & sleep %s; wait", marker, marker)),
		Timeout: time.Second,
	})
	if !res.TimedOut || res.ExitCode == 0 {
		t.Errorf("got %+v, want timed out with a non-zero exit", res)
	}
	if d := time.Since(t0); d > time.Second+killSlack {
		t.Errorf("a 1s timeout took %v", d)
	}
	if ps, _ := proctest.WithCmdline(marker); len(ps) > 0 {
		t.Errorf("processes survived the exec: %v", ps)
	}
	// The workspace still works after a timeout.
	if res, _, _ := e.sh1(t, "true"); res.ExitCode != 0 {
		t.Errorf("exec after timeout: %+v", res)
	}
}

func testOutputCap(t *testing.T, e *env) {
	res, stdout, stderr := e.exec(t, platforms.ExecSpec{
		Argv:        platforms.ShellArgv("head -c 100000 /dev/zero; echo small >&2"),
		OutputLimit: 1000,
	})
	if len(stdout) != 1000 || stderr != "small\n" || !res.OutputTruncated || res.ExitCode != 0 {
		t.Errorf("got %d stdout bytes, stderr %q, %+v; want 1000 bytes, \"small\\n\", truncated, exit 0", len(stdout), stderr, res)
	}
}

func testWorkspace(t *testing.T, e *env) {
	if err := os.WriteFile(filepath.Join(e.ws, "from-host"), []byte("host data\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(e.ws, "sub", "dir"), 0o755); err != nil {
		t.Fatal(err)
	}
	res, stdout, stderr := e.sh1(t, "pwd; cat from-host; echo sandbox data > from-sandbox; mkdir -p made/here")
	if stdout != "/workspace\nhost data\n" || res.ExitCode != 0 {
		t.Fatalf("got %q (stderr %q, exit %d), want the cwd /workspace and the host's file", stdout, stderr, res.ExitCode)
	}
	if b, err := os.ReadFile(filepath.Join(e.ws, "from-sandbox")); err != nil || string(b) != "sandbox data\n" {
		t.Errorf("host reads %q, %v; want the sandbox's file", b, err)
	}
	if st, err := os.Stat(filepath.Join(e.ws, "made", "here")); err != nil || !st.IsDir() {
		t.Errorf("host does not see the sandbox's directory: %v", err)
	}
	_, stdout, _ = e.exec(t, platforms.ExecSpec{Argv: []string{"pwd"}, Dir: "sub/dir"})
	if stdout != "/workspace/sub/dir\n" {
		t.Errorf("Dir sub/dir: got cwd %q", stdout)
	}
}

func testConcurrent(t *testing.T, e *env) {
	const n = 8
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var o bytes.Buffer
			body := fmt.Sprintf("echo %d > c%d; sleep 0.2; cat c%d", i, i, i)
			res, err := e.sb.Exec(ctxFor(t, execTimeout), platforms.ExecSpec{Argv: platforms.ShellArgv(body)}, &o, nil)
			if err == nil && (res.ExitCode != 0 || o.String() != fmt.Sprintf("%d\n", i)) {
				err = fmt.Errorf("exec %d: got %q, %+v", i, o.String(), res)
			}
			errs <- err
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Error(err)
		}
	}
	for i := range n {
		if b, err := os.ReadFile(filepath.Join(e.ws, fmt.Sprintf("c%d", i))); err != nil || string(b) != fmt.Sprintf("%d\n", i) {
			t.Errorf("c%d on the host: %q %v", i, b, err)
		}
	}
}

func testNetwork(t *testing.T, e *env) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	got := make(chan string, 8)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			_ = c.SetDeadline(time.Now().Add(5 * time.Second))
			line, _ := bufio.NewReader(c).ReadString('\n')
			c.Close()
			got <- line
		}
	}()
	connect := fmt.Sprintf("echo hello > /dev/tcp/127.0.0.1/%d", ln.Addr().(*net.TCPAddr).Port)

	t.Run("Off", func(t *testing.T) {
		_, stdout, stderr := e.sh1(t, "("+connect+") 2>/dev/null; echo connect=$?; tail -n +3 /proc/net/dev | cut -d: -f1 | tr -d ' '")
		if stdout != "connect=1\nlo\n" {
			t.Errorf("got %q (stderr %q), want a failed connect and no interface but lo", stdout, stderr)
		}
		select {
		case line := <-got:
			t.Errorf("the host's listener got %q from a sandbox without network", line)
		case <-time.After(100 * time.Millisecond):
		}
	})
	t.Run("Granted", func(t *testing.T) {
		if !e.p.Features().Network {
			t.Skipf("%s cannot grant the network", e.p.Name())
		}
		ctx := ctxFor(t, upTimeout)
		sb, err := e.sh.Attach(ctx, platforms.Workspace{ID: workspaceID(), HostPath: e.newWorkspace(t), Network: true})
		if err != nil {
			t.Fatalf("Attach with network: %v", err)
		}
		defer func() {
			if err := sb.Close(ctx); err != nil {
				t.Errorf("Close: %v", err)
			}
		}()
		var stderr bytes.Buffer
		res, err := sb.Exec(ctx, platforms.ExecSpec{Argv: platforms.ShellArgv(connect)}, nil, &stderr)
		if err != nil || res.ExitCode != 0 {
			t.Fatalf("connect with network: %+v %v (stderr %q)", res, err, stderr.String())
		}
		select {
		case line := <-got:
			if line != "hello\n" {
				t.Errorf("listener got %q", line)
			}
		case <-time.After(5 * time.Second):
			t.Error("the host's listener got nothing")
		}
	})
}

// testLimits checks the limits a platform claims in Features, each while
// an ordinary exec in the same workspace keeps working.
func testLimits(t *testing.T, e *env) {
	f := e.p.Features()
	for _, tc := range []struct {
		name    string
		claimed bool
		spec    platforms.ExecSpec
		ok      func(platforms.ExecResult) bool
		want    string
	}{
		{"Pids", f.PidsLimit, platforms.ExecSpec{
			Argv: platforms.ShellArgv("f() { f | f & }; f; sleep 30"), Pids: 64, Timeout: 3 * time.Second,
		}, func(r platforms.ExecResult) bool { return r.TimedOut }, "a fork bomb contained until the timeout"},
		{"Memory", f.MemoryLimit, platforms.ExecSpec{
			Argv: platforms.ShellArgv("dd if=/dev/zero of=/dev/null bs=256M count=1"), MemoryBytes: 64 << 20, Timeout: time.Minute,
		}, func(r platforms.ExecResult) bool { return r.ExitCode != 0 && !r.TimedOut }, "a memory hog killed before the timeout"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if !tc.claimed {
				t.Skipf("%s does not claim this limit", e.p.Name())
			}
			done := make(chan platforms.ExecResult, 1)
			go func() {
				res, err := e.sb.Exec(ctxFor(t, execTimeout), tc.spec, nil, nil)
				if err != nil {
					t.Errorf("exec: %v", err)
				}
				done <- res
			}()
			time.Sleep(500 * time.Millisecond)
			if res, stdout, _ := e.sh1(t, "echo fine"); res.ExitCode != 0 || stdout != "fine\n" {
				t.Errorf("ordinary exec beside it: %q %+v", stdout, res)
			}
			if res := <-done; !tc.ok(res) {
				t.Errorf("got %+v, want %s", res, tc.want)
			}
		})
	}
}

// testCPUAndOpenFiles checks the per-exec CPU and open files limits a
// platform claims, by what the exec's processes were given (a CPU limit's
// effect would need timing, which a loaded machine makes unreliable): the
// command writes its cgroup paths to the workspace and waits until the
// host has read its cgroup's quota.
func testCPUAndOpenFiles(t *testing.T, e *env) {
	f := e.p.Features()
	t.Run("OpenFiles", func(t *testing.T) {
		if !f.OpenFilesLimit {
			t.Skipf("%s does not claim this limit", e.p.Name())
		}
		res, stdout, stderr := e.exec(t, platforms.ExecSpec{Argv: platforms.ShellArgv("ulimit -Sn; ulimit -Hn"), OpenFiles: 77})
		if stdout != "77\n77\n" || res.ExitCode != 0 {
			t.Errorf("got %q (stderr %q), want the soft and hard limits 77", stdout, stderr)
		}
	})
	t.Run("CPU", func(t *testing.T) {
		if !f.CPULimit {
			t.Skipf("%s does not claim this limit", e.p.Name())
		}
		dir, err := os.MkdirTemp(e.ws, "cpu-")
		if err != nil {
			t.Fatal(err)
		}
		name := filepath.Base(dir)
		body := fmt.Sprintf("cat /proc/self/cgroup > /workspace/%s/cg.tmp && mv /workspace/%s/cg.tmp /workspace/%s/cg; "+
			"while [ ! -e /workspace/%s/go ]; do sleep 0.05; done", name, name, name, name)
		done := make(chan platforms.ExecResult, 1)
		go func() {
			res, _, _ := e.exec(t, platforms.ExecSpec{Argv: platforms.ShellArgv(body), MilliCPUs: 250, Timeout: execTimeout})
			done <- res
		}()
		defer func() {
			_ = os.WriteFile(filepath.Join(dir, "go"), nil, 0o644)
			if res := <-done; res.ExitCode != 0 || res.TimedOut {
				t.Errorf("the exec ended %+v", res)
			}
		}()
		var cg []byte
		for deadline := time.Now().Add(execTimeout); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
			if cg, err = os.ReadFile(filepath.Join(dir, "cg")); err == nil {
				break
			}
		}
		if err != nil {
			t.Fatalf("the exec did not report its cgroup: %v", err)
		}
		quota, err := cpuQuota(string(cg))
		if err != nil {
			t.Fatal(err)
		}
		if quota != 0.25 {
			t.Errorf("the exec's cgroup allows %.3f CPUs, want 0.25", quota)
		}
	})
}

// cpuQuota reads, on this host, the CPU limit (in CPUs) of the cgroup
// that /proc/PID/cgroup content names: cpu.max in cgroup v2, the cfs
// files in v1.
func cpuQuota(procCgroup string) (float64, error) {
	f, err := os.CreateTemp("", "cgroup-")
	if err != nil {
		return 0, err
	}
	defer os.Remove(f.Name())
	if _, err := f.WriteString(procCgroup); err != nil {
		return 0, err
	}
	f.Close()
	own, err := cgroups.Paths(f.Name())
	if err != nil {
		return 0, err
	}
	mounts, err := cgroups.Mounts("/proc/self/mountinfo")
	if err != nil {
		return 0, err
	}
	read := func(key, file string) (string, error) {
		d, ok := mounts[key].Path(own[key])
		if _, has := own[key]; !ok || !has {
			return "", fmt.Errorf("no %q cgroup for %q", key, procCgroup)
		}
		b, err := os.ReadFile(filepath.Join(d, file))
		return strings.TrimSpace(string(b)), err
	}
	var quota, period string
	if v, err := read("cpu", "cpu.cfs_quota_us"); err == nil {
		quota = v
		if period, err = read("cpu", "cpu.cfs_period_us"); err != nil {
			return 0, err
		}
	} else if v, err2 := read("", "cpu.max"); err2 == nil {
		quota, period, _ = strings.Cut(v, " ")
	} else {
		return 0, fmt.Errorf("no CPU limit found: %w; %w", err, err2)
	}
	q, err1 := strconv.ParseFloat(quota, 64)
	p, err2 := strconv.ParseFloat(period, 64)
	if err1 != nil || err2 != nil || p <= 0 {
		return 0, fmt.Errorf("cpu quota %q period %q", quota, period)
	}
	return q / p, nil
}

// snapshot is what the host looked like before the suite.
type snapshot struct {
	children map[string]bool
}

func hostSnapshot(t *testing.T) snapshot {
	s := snapshot{children: map[string]bool{}}
	for _, c := range childProcesses() {
		s.children[c] = true
	}
	return s
}

// checkNothingLeft checks, after Down (run again here: it is idempotent,
// and the Down checks may have stopped early), that the platform left
// nothing on this host.
func checkNothingLeft(t *testing.T, p platforms.Platform, before snapshot, root string) {
	ctx := ctxFor(t, upTimeout)
	if err := p.Down(ctx); err != nil {
		t.Errorf("Down: %v", err)
	}
	if l, ok := p.(Leaker); ok {
		leaks, err := l.Leaks(ctx)
		if err != nil {
			t.Errorf("Leaks: %v", err)
		}
		for _, leak := range leaks {
			t.Errorf("left behind: %s", leak)
		}
	} else {
		t.Logf("%s has no Leaks hook: only generic checks", p.Name())
	}
	for _, m := range mountsBelow(root) {
		t.Errorf("mount left below the suite's workspaces: %s", m)
	}
	// A process may need a moment to be reaped after Down.
	deadline := time.Now().Add(5 * time.Second)
	for {
		var extra []string
		for _, c := range childProcesses() {
			if !before.children[c] {
				extra = append(extra, c)
			}
		}
		if len(extra) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Errorf("child processes left: %v", extra)
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// childProcesses lists this process's children as "pid (comm)".
func childProcesses() []string {
	kids, _ := proctest.Children(os.Getpid())
	return kids
}

// mountsBelow lists this host's mount points at or below dir.
func mountsBelow(dir string) []string {
	ms, err := mountinfo.Read(mountinfo.Self)
	if err != nil {
		return nil
	}
	var out []string
	for _, m := range mountinfo.Below(ms, dir) {
		out = append(out, m.Dir)
	}
	return out
}

// checkIsolation checks what p says its sandboxes get (platforms.Isolator)
// against what one of them saw: uidMap, its /proc/self/uid_map, and
// receipt, the user namespace its result reports.
func checkIsolation(t *testing.T, p platforms.Platform, uidMap, receipt string) {
	iso, err := isolationOf(t, p)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%s isolation: %+v; a sandbox's uid_map %q, its receipt %q", p.Name(), iso, uidMap, receipt)
	if iso.Platform != p.Name() || iso.Seccomp == "" || iso.Network == "" || iso.Boundary == "" || iso.Limits.Memory == "" {
		t.Errorf("isolation leaves something unsaid: %+v", iso)
	}
	got := strings.Join(strings.Fields(uidMap), " ")
	switch {
	case iso.UserNamespace == "" && iso.NoUserNamespace == "":
		t.Errorf("isolation names no user namespace and no reason for none")
	case iso.UserNamespace != "" && (got != iso.UserNamespace || receipt != iso.UserNamespace):
		t.Errorf("uid_map %q, receipt %q: want the isolation's %q in both", got, receipt, iso.UserNamespace)
	case iso.UserNamespace == "" && !strings.HasPrefix(receipt, "none: "):
		t.Errorf("receipt %q of a sandbox in the host's user namespace (%s)", receipt, iso.NoUserNamespace)
	}
}

// isolationOf is p's Isolation; every platform says what it gives.
func isolationOf(t *testing.T, p platforms.Platform) (wire.Isolation, error) {
	i, ok := p.(platforms.Isolator)
	if !ok {
		return wire.Isolation{}, fmt.Errorf("%s does not say what its sandboxes get (platforms.Isolator)", p.Name())
	}
	return i.Isolation(ctxFor(t, execTimeout))
}
