package supervise

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"layerfs.dev/layerfs/internal/platforms/internal/userns"
	"layerfs.dev/layerfs/internal/proctest"
	"layerfs.dev/layerfs/internal/seccomp"
	"layerfs.dev/layerfs/internal/seccomp/bpfload"
	"layerfs.dev/layerfs/internal/testenv"
)

// The test binary is also the supervisor, as the docker package's is.
func TestMain(m *testing.M) {
	if filepath.Base(os.Args[0]) == Name {
		os.Exit(Main(os.Args[1:]))
	}
	os.Exit(m.Run())
}

func TestTrailerRoundTrip(t *testing.T) {
	for _, want := range []Trailer{
		{},
		{Exit: 137, Signal: 9, Flags: FlagTimedOut | FlagCancelled, Command: 1234567},
		{Exit: 255, Command: 10 * time.Minute},
	} {
		b := want.Encode()
		if len(b) != TrailerLen {
			t.Fatalf("encoded length %d, want %d", len(b), TrailerLen)
		}
		got, err := DecodeTrailer(b)
		require.NoError(t, err, "decode(encode(%+v))", want)
		require.Equal(t, want, got, "decode(encode(%+v))", want)
	}
	for _, bad := range [][]byte{nil, []byte("hello"), bytes.Repeat([]byte("x"), TrailerLen)} {
		_, err := DecodeTrailer(bad)
		assert.Error(t, err, "DecodeTrailer(%q) succeeded", bad)
	}
}

// runSupervisor runs this test binary as the supervisor on the host, as
// docker runs it in a container, and splits its stderr from its trailer.
func runSupervisor(t *testing.T, timeout time.Duration, argv ...string) (Trailer, string, string) {
	t.Helper()
	return runSupervisorWith(t, nil, nil, timeout, argv...)
}

// runSupervisorWith is runSupervisor with exec options (opts) and the
// supervisor's environment (nil: this process's).
func runSupervisorWith(t *testing.T, opts, env []string, timeout time.Duration, argv ...string) (Trailer, string, string) {
	t.Helper()
	exe, err := os.Executable()
	require.NoError(t, err)
	args := append([]string{Name, "exec", strconv.FormatInt(int64(timeout), 10)}, opts...)
	cmd := &exec.Cmd{Path: exe, Args: append(append(args, "--"), argv...), Env: env}
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	runErr := cmd.Run()
	e := errb.Bytes()
	if len(e) < TrailerLen {
		t.Fatalf("supervisor %v: stderr %q too short for a trailer (%v)", argv, e, runErr)
	}
	tr, err := DecodeTrailer(e[len(e)-TrailerLen:])
	require.NoError(t, err, "supervisor %v: stderr %q", argv, e)
	if got := cmd.ProcessState.ExitCode(); got != tr.Exit {
		t.Errorf("supervisor exit code %d, trailer says %d", got, tr.Exit)
	}
	return tr, out.String(), string(e[:len(e)-TrailerLen])
}

func TestSuperviseExitStatus(t *testing.T) {
	tests := []struct {
		name     string
		argv     []string
		exit     int
		signal   int
		flags    int
		out, err string
	}{
		{"ok", []string{"sh", "-c", "echo out; echo err >&2"}, 0, 0, 0, "out\n", "err\n"},
		{"exit code", []string{"sh", "-c", "exit 7"}, 7, 0, 0, "", ""},
		{"killed by signal", []string{"sh", "-c", "kill -TERM $$"}, 128 + 15, 15, 0, "", ""},
		{"not found", []string{"no-such-command-here"}, 127, 0, FlagNoStart, "", "layerfs-supervise: exec: \"no-such-command-here\": executable file not found in $PATH\n"},
		{"not executable", []string{"/etc/hostname"}, 126, 0, FlagNoStart, "", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tr, out, errs := runSupervisor(t, time.Minute, tt.argv...)
			if tr.Exit != tt.exit || tr.Signal != tt.signal || tr.Flags != tt.flags {
				t.Errorf("trailer %+v, want exit %d signal %d flags %d", tr, tt.exit, tt.signal, tt.flags)
			}
			assert.Equal(t, tt.out, out, "stdout")
			if tt.err != "" {
				assert.Equal(t, tt.err, errs, "stderr")
			}
		})
	}
}

func TestSuperviseCommandTime(t *testing.T) {
	tr, _, _ := runSupervisor(t, time.Minute, "sleep", "0.2")
	if tr.Command < 200*time.Millisecond || tr.Command > 5*time.Second {
		t.Fatalf("command time %v for sleep 0.2", tr.Command)
	}
}

func TestSuperviseTimeoutKillsTree(t *testing.T) {
	arg := proctest.Marker()
	start := time.Now()
	tr, out, _ := runSupervisor(t, time.Second, proctest.Escapers(arg, "sleep "+arg)...)
	if took := time.Since(start); took > 10*time.Second {
		t.Errorf("timed-out exec took %v", took)
	}
	if tr.Flags&FlagTimedOut == 0 || tr.Exit != 128+9 || tr.Signal != 9 {
		t.Errorf("trailer %+v, want timed out, SIGKILL", tr)
	}
	if out != "started\n" {
		t.Errorf("stdout %q", out)
	}
	if left := proctest.Sleepers(arg); len(left) != 0 {
		t.Fatalf("processes left after the timeout: %v", left)
	}
}

func TestSuperviseKillsLeftovers(t *testing.T) {
	arg := proctest.Marker()
	start := time.Now()
	tr, out, _ := runSupervisor(t, time.Minute, proctest.Escapers(arg, "exit 0")...)
	if took := time.Since(start); took > 10*time.Second {
		t.Errorf("exec took %v: leftovers kept it open", took)
	}
	if tr.Exit != 0 || tr.Flags != 0 || out != "started\n" {
		t.Errorf("trailer %+v stdout %q", tr, out)
	}
	if left := proctest.Sleepers(arg); len(left) != 0 {
		t.Fatalf("processes left after the command ended: %v", left)
	}
}

func TestSuperviseSIGTERMKillsTree(t *testing.T) {
	arg := proctest.Marker()
	exe, _ := os.Executable()
	cmd := &exec.Cmd{Path: exe, Args: append([]string{Name, "exec", strconv.FormatInt(int64(time.Minute), 10), "--"}, proctest.Escapers(arg, "sleep "+arg)...)}
	var errb bytes.Buffer
	cmd.Stderr = &errb
	require.NoError(t, cmd.Start())
	deadline := time.Now().Add(10 * time.Second)
	for len(proctest.Sleepers(arg)) < 4 && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	if n := len(proctest.Sleepers(arg)); n < 4 {
		t.Fatalf("%d sleepers started, want 4", n)
	}
	require.NoError(t, cmd.Process.Signal(syscall.SIGTERM))
	_ = cmd.Wait()
	e := errb.Bytes()
	tr, err := DecodeTrailer(e[max(len(e)-TrailerLen, 0):])
	if err != nil || tr.Flags&FlagCancelled == 0 {
		t.Errorf("trailer %+v, %v; want cancelled", tr, err)
	}
	if left := proctest.Sleepers(arg); len(left) != 0 {
		t.Fatalf("processes left after SIGTERM: %v", left)
	}
}

// TestUserNamespaceExec: with userns= the command runs in a new user
// namespace with that mapping, as the ids of as=, under the filter sent in
// FilterEnv (which it never sees), and can make no namespace of its own.
func TestUserNamespaceExec(t *testing.T) {
	testenv.RequireRoot(t)
	progs, err := seccomp.BPF()
	require.NoError(t, err)
	env := append(os.Environ(), FilterEnv+"="+bpfload.Encode(progs))
	body := `awk '{print $1, $2, $3}' /proc/self/uid_map; id -u; id -g; env | grep -c ` + FilterEnv + `; unshare -U true 2>/dev/null && echo unshared; echo done`
	for as, ids := range map[string]string{"as=0:0": "0\n0\n", "as=1000:1001": "1000\n1001\n"} {
		tr, out, errs := runSupervisorWith(t, []string{"userns=2000000000:65536", as}, env, time.Minute, "sh", "-c", body)
		assert.Equal(t, 0, tr.Exit, "%s: stderr %q", as, errs)
		assert.Equal(t, "0 2000000000 65536\n"+ids+"0\ndone\n", out, as)
	}
	// Without a filter to load, the command is not started.
	tr, _, errs := runSupervisorWith(t, []string{"userns=2000000000:65536"}, os.Environ(), time.Minute, "true")
	assert.Equal(t, 126, tr.Exit, "stderr %q", errs)
	// A mapping that would make its root the host's is refused outright.
	for _, bad := range []string{"0:65536", "2000000000:0", "1:x", "12"} {
		_, err := userns.ParseArg(bad)
		assert.Error(t, err, bad)
	}
}

// TestPivot: pivot makes a bound directory the root of a mount namespace
// of its own with /proc moved into it, and refuses a mount point that is
// a symlink in the new root.
func TestPivot(t *testing.T) {
	testenv.RequireRoot(t)
	exe, err := os.Executable()
	require.NoError(t, err)
	// The test binary under the supervisor's name (TestMain).
	named := filepath.Join(t.TempDir(), Name)
	require.NoError(t, os.Symlink(exe, named))
	pivotIn := func(dir string) (string, error) {
		// A mount namespace of its own, private first: nothing reaches
		// this host's.
		cmd := exec.Command("/bin/sh", "-c", `mount --make-rprivate / && mount --bind "$1" "$1" && exec "$2" pivot "$1" /proc /no-such-mount`,
			"sh", dir, named)
		cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWNS}
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	good := t.TempDir()
	require.NoError(t, os.Mkdir(filepath.Join(good, "proc"), 0o755))
	out, err := pivotIn(good)
	require.NoError(t, err, "%s", out)

	bad := t.TempDir()
	require.NoError(t, os.Symlink("/", filepath.Join(bad, "proc")))
	out, err = pivotIn(bad)
	require.Error(t, err)
	require.Contains(t, out, "is a symlink")
}
