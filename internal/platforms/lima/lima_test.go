package lima

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"layerfs.dev/layerfs/internal/platforms"
	"layerfs.dev/layerfs/internal/platforms/internal/guest/guesttest"
	"layerfs.dev/layerfs/wire"
)

// fixture sets up what a replayed scenario refers to: a LIMA_HOME, a work
// directory for the template, and a daemon binary to copy. The scenarios
// in testdata/ (guesttest.Scenario) use them as $LIMA_HOME, $WORKDIR and
// $DAEMON; their outputs come from Lima v1.2.1's own code paths (see
// doc.go).
type fixture struct {
	limaHome, workDir, daemon string
	vars                      map[string]string
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	f := &fixture{limaHome: t.TempDir(), workDir: t.TempDir(), daemon: guesttest.FakeDaemon(t)}
	t.Setenv("LIMA_HOME", f.limaHome)
	f.vars = map[string]string{"LIMA_HOME": f.limaHome, "WORKDIR": f.workDir, "DAEMON": f.daemon}
	return f
}

func (f *fixture) platform(t *testing.T, r Runner, mod func(*Options)) *Platform {
	t.Helper()
	cfg := Options{Project: "demo", Daemon: f.daemon, WorkDir: f.workDir, Runner: r, DaemonTimeout: 5 * time.Second}
	return guesttest.New(t, New, cfg, mod)
}

// hostSocket is where the scenarios' instance forwards the daemon socket.
func (f *fixture) hostSocket() string {
	return filepath.Join(f.limaHome, "layerfs-demo", "sock", "layerfsd.sock")
}

// serveDaemon answers GET /v1/version on the forwarded socket's host path,
// as Lima's SSH forward would once the guest daemon runs.
func (f *fixture) serveDaemon(t *testing.T) {
	t.Helper()
	require.NoError(t, os.MkdirAll(filepath.Dir(f.hostSocket()), 0o700))
	guesttest.ServeVersion(t, "unix", f.hostSocket(), wire.Version{Version: "0.1.0-test", API: "v1", Store: guestStore}, nil)
}

// checkTemplate compares the template limactl create is handed with a
// golden file.
func (f *fixture) checkTemplate(t *testing.T, golden string) {
	t.Helper()
	got, err := os.ReadFile(filepath.Join(f.workDir, "layerfs-demo.yaml"))
	require.NoError(t, err, "template handed to limactl create")
	want, err := os.ReadFile(filepath.Join("testdata", golden))
	require.NoError(t, err)
	assert.Equal(t, strings.ReplaceAll(string(want), "$LIMA_HOME", f.limaHome), string(got),
		"template handed to limactl create, against %s", golden)
}

func TestUpCreatesStartsAndTearsDown(t *testing.T) {
	f := newFixture(t)
	r := guesttest.NewReplayer(t, "up-create.json", f.vars)
	r.Hooks["check-template"] = func() { f.checkTemplate(t, "template-default.golden.yaml") }
	r.Hooks["serve-daemon"] = func() { f.serveDaemon(t) }
	p := f.platform(t, r, nil)
	ctx := t.Context()

	_, _, err := p.Endpoint(ctx)
	require.ErrorIs(t, err, platforms.ErrNotUp, "Endpoint before Up")
	require.NoError(t, p.Up(ctx), "Up")
	addr, token, err := p.Endpoint(ctx)
	require.NoError(t, err, "Endpoint")
	assert.Equal(t, "unix://"+f.hostSocket(), addr, "Endpoint's address")
	assert.Empty(t, token, "Endpoint's token")
	id, err := p.Identity(ctx)
	require.NoError(t, err, "Identity")
	want := platforms.Identity{Platform: "lima", Kernel: "6.1.0-37-cloud-arm64", CPUs: 4, MemoryBytes: 4010536 * 1024,
		Runtime: "limactl 1.2.1", Image: "debian-12-genericcloud (latest)", Details: "instance layerfs-demo, vmType vz, arch aarch64"}
	assert.Equal(t, want, id, "Identity")
	_, err = os.Stat(filepath.Join(f.workDir, "layerfs-demo.yaml"))
	assert.ErrorIs(t, err, os.ErrNotExist, "the generated template was left behind")
	require.NoError(t, p.Down(ctx), "Down")
	guesttest.DownAgain(t, p)
}

func TestUpIsIdempotentWhenDaemonAnswers(t *testing.T) {
	f := newFixture(t)
	f.serveDaemon(t)
	guesttest.Up(t, f.platform(t, guesttest.NewReplayer(t, "up-running.json", f.vars), nil), 2)
}

func TestUpReportsBootFailureWithStderr(t *testing.T) {
	f := newFixture(t)
	p := f.platform(t, guesttest.NewReplayer(t, "start-fails.json", f.vars), nil)
	guesttest.WantError(t, p.Up(t.Context()), platforms.ErrStart,
		`start instance "layerfs-demo"`, "status 1", "Virtualization is not available on this hardware", "ha.stderr.log")
}

func TestUpReportsSilentDaemonWithGuestLog(t *testing.T) {
	f := newFixture(t)
	p := f.platform(t, guesttest.NewReplayer(t, "daemon-timeout.json", f.vars), func(c *Options) { c.DaemonTimeout = time.Second })
	start := time.Now()
	err := p.Up(t.Context())
	if d := time.Since(start); d > 10*time.Second {
		t.Errorf("Up took %s with a 1s daemon timeout", d)
	}
	guesttest.WantError(t, err, platforms.ErrDaemon, "did not answer GET /v1/version", f.hostSocket(), "within 1s", "open /dev/fuse: operation not permitted")
}

func TestUnavailable(t *testing.T) {
	for _, tc := range []struct {
		scenario string
		mentions []string
	}{
		{"missing.json", []string{"limactl not found", "brew install lima", "1.0.0"}},
		{"too-old.json", []string{"limactl 0.23.2 is too old", "needs 1.0.0 or newer"}},
		{"root.json", []string{"refuses to run as root"}},
	} {
		t.Run(tc.scenario, func(t *testing.T) {
			f := newFixture(t)
			p := f.platform(t, guesttest.NewReplayer(t, tc.scenario, f.vars), nil)
			guesttest.WantError(t, p.Up(t.Context()), platforms.ErrUnavailable, tc.mentions...)
		})
	}
}

func TestDownKeepStopsWithoutDeleting(t *testing.T) {
	f := newFixture(t)
	p := f.platform(t, guesttest.NewReplayer(t, "down-keep.json", f.vars), func(c *Options) { c.Keep = true })
	require.NoError(t, p.Down(t.Context()), "Down")
}

// goldenTemplate renders the template for cfg, compares it with the golden
// file (where $LIMA_HOME stands for the fixture's) and returns it.
func (f *fixture) goldenTemplate(t *testing.T, cfg Options, golden string) []byte {
	t.Helper()
	y, err := Template(cfg, f.hostSocket())
	require.NoError(t, err)
	b, err := MarshalTemplate(y)
	require.NoError(t, err)
	want, err := os.ReadFile(golden)
	require.NoError(t, err)
	assert.Equal(t, strings.ReplaceAll(string(want), "$LIMA_HOME", f.limaHome), string(b), "template against %s", golden)
	return b
}

func TestTemplateLocalImage(t *testing.T) {
	f := newFixture(t)
	cfg := Options{Project: "demo", Image: "/Users/dev/images/debian-12-arm64.qcow2", Arch: "aarch64", VMType: "vz",
		CPUs: 2, Memory: "3GiB", Disk: "20GiB", Networks: []string{"vzNAT"}}
	f.goldenTemplate(t, cfg, "testdata/template-local-image.golden.yaml")
	// vz needs the host's architecture, so Lima's validation only accepts
	// this one on an arm64 host; the default template must pass anywhere.
	def, err := Template(Options{Project: "demo"}, f.hostSocket())
	require.NoError(t, err)
	b, err := MarshalTemplate(def)
	require.NoError(t, err)
	assert.NoError(t, ValidateTemplate(b, filepath.Join(f.limaHome, "layerfs-demo")), "default template fails Lima's validation")
}

func TestTemplateRejectedByLimaValidation(t *testing.T) {
	f := newFixture(t)
	for _, tc := range []struct {
		name     string
		cfg      Options
		socket   string
		mentions string
	}{
		{"memory", Options{Project: "demo", Memory: "lots"}, f.hostSocket(), "field `memory` has an invalid value"},
		{"disk", Options{Project: "demo", Disk: "-"}, f.hostSocket(), "field `disk` has an invalid value"},
		{"socket path", Options{Project: "demo"}, "/" + strings.Repeat("s", 120) + "/layerfsd.sock", "UNIX_PATH_MAX"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			y, err := Template(tc.cfg, tc.socket)
			require.NoError(t, err)
			b, err := MarshalTemplate(y)
			require.NoError(t, err)
			guesttest.WantError(t, ValidateTemplate(b, filepath.Join(f.limaHome, "layerfs-demo")), platforms.ErrConfig, tc.mentions)
		})
	}
}

func TestNewRejectsBadConfig(t *testing.T) {
	for _, cfg := range []Options{
		{},
		{Project: "demo", Networks: []string{"bridged"}},
		{Project: "demo", Networks: []string{"socket:relative/path"}},
		{Project: strings.Repeat("p", 80)},
	} {
		_, err := New(cfg)
		assert.ErrorIs(t, err, platforms.ErrConfig, "New(%+v)", cfg)
	}
}

func TestInstanceName(t *testing.T) {
	guesttest.CheckNames(t, "InstanceName", InstanceName)
}

// TestTemplateEmulatedDirectBoot is the template the platform writes for
// scripts/ensure-lima's installation: a root disk booted with its own
// kernel and initrd (legacy BIOS, no UEFI firmware), QEMU with the "max"
// CPU model for software emulation. Lima's validation must accept it.
func TestTemplateEmulatedDirectBoot(t *testing.T) {
	f := newFixture(t)
	cfg := Options{Project: "demo", Image: "/cache/image/disk.raw", Kernel: "/cache/image/vmlinuz",
		Initrd: "/cache/image/initrd.img", KernelCmdline: kernelCmdline, Arch: "x86_64", SoftwareEmulation: true}
	b := f.goldenTemplate(t, cfg, "testdata/template-emulated.golden.yaml")
	assert.NoError(t, ValidateTemplate(b, filepath.Join(f.limaHome, "layerfs-demo")), "emulated direct-boot template fails Lima's validation")
}

// TestEmulationKeepsQEMUOffKVM checks the environment limactl gets under
// SoftwareEmulation: Lima's QEMU override carrying -machine and -accel tcg,
// and LIMA_HOME.
func TestEmulationKeepsQEMUOffKVM(t *testing.T) {
	p, err := New(Options{Project: "demo", SoftwareEmulation: true, LimaHome: "/srv/lima"})
	require.NoError(t, err)
	r, ok := p.cfg.Runner.(ExecRunner)
	require.True(t, ok, "runner is %T, want ExecRunner", p.cfg.Runner)
	assert.Contains(t, r.Env, "QEMU_SYSTEM_X86_64="+qemuTCG, "limactl's environment")
	assert.Contains(t, r.Env, "LIMA_HOME=/srv/lima", "limactl's environment")
	assert.Equal(t, DefaultEmulatedBootTimeout, p.cfg.BootTimeout, "boot timeout")
}

// scriptRunner plays limactl for TestUpCutShortDeletesWhatItCreated: no
// instance until create, then a stopped one; start is cut short by its
// context. It records every command line.
type scriptRunner struct {
	stopped []byte
	created bool
	argvs   []string
}

func (r *scriptRunner) Run(ctx context.Context, argv []string, _ io.Reader) (Result, error) {
	line := strings.Join(argv[1:], " ")
	r.argvs = append(r.argvs, line)
	switch {
	case line == "--version":
		return Result{Stdout: []byte("limactl version 1.2.1\n")}, nil
	case line == "list --json":
		if r.created {
			return Result{Stdout: r.stopped}, nil
		}
		return Result{}, nil
	case strings.HasPrefix(line, "create "):
		r.created = true
		return Result{}, nil
	case strings.HasPrefix(line, "start "):
		return Result{}, context.DeadlineExceeded
	case line == "delete --force layerfs-demo":
		return Result{}, nil
	}
	return Result{ExitCode: 1, Stderr: []byte("unexpected " + line)}, nil
}

// TestUpCutShortDeletesWhatItCreated: a start cut short (the caller's
// deadline) leaves Lima's host agent and QEMU running; Up deletes the
// instance it created rather than leave a VM booting unseen.
func TestUpCutShortDeletesWhatItCreated(t *testing.T) {
	f := newFixture(t)
	stopped, err := os.ReadFile("testdata/list-stopped.jsonl")
	require.NoError(t, err)
	r := &scriptRunner{stopped: stopped}
	p := f.platform(t, r, nil)
	require.ErrorIs(t, p.Up(t.Context()), context.DeadlineExceeded, "Up: want the start's deadline")
	assert.Equal(t, "delete --force layerfs-demo", r.argvs[len(r.argvs)-1],
		"last limactl command, want the delete of the created instance; all: %q", r.argvs)
}

// forwardRunner plays limactl and ssh for TestEmulatedUpForwardsTheSocket:
// the instance runs, and the daemon answers on the host socket once ssh
// has been asked to forward it (as the instance's SSH master then
// listens there). It records every command line.
type forwardRunner struct {
	list    []byte
	serve   func()
	argvs   []string
	forward int
}

func (r *forwardRunner) Run(ctx context.Context, argv []string, _ io.Reader) (Result, error) {
	line := strings.Join(argv, " ")
	r.argvs = append(r.argvs, line)
	switch {
	case line == "limactl --version":
		return Result{Stdout: []byte("limactl version 1.2.1\n")}, nil
	case line == "limactl list --json":
		return Result{Stdout: r.list}, nil
	case argv[0] == "ssh":
		r.forward++
		r.serve()
		return Result{}, nil
	case strings.HasPrefix(line, "limactl copy ") || strings.HasPrefix(line, "limactl shell "):
		return Result{}, nil
	}
	return Result{ExitCode: 1, Stderr: []byte("unexpected " + line)}, nil
}

// TestEmulatedUpForwardsTheSocket: under software emulation the instance
// runs in Lima's plain mode, without Lima's port forwarding, and Up asks
// the instance's SSH master to forward the daemon's socket before it
// starts the daemon; a second platform finds the forward answering and
// neither forwards nor starts anything again.
func TestEmulatedUpForwardsTheSocket(t *testing.T) {
	f := newFixture(t)
	list, err := os.ReadFile("testdata/list-running.jsonl")
	require.NoError(t, err)
	list = []byte(strings.ReplaceAll(string(list), "$LIMA_HOME", f.limaHome))
	// Plain mode drops the port forwards from the instance's configuration:
	// the socket is where the platform puts it.
	require.NoError(t, os.MkdirAll(filepath.Join(f.limaHome, "layerfs-demo"), 0o700))
	r := &forwardRunner{list: list, serve: func() { f.serveDaemon(t) }}
	p := f.platform(t, r, func(c *Options) { c.SoftwareEmulation = true })
	require.NoError(t, p.Up(t.Context()), "Up")
	want := "ssh -F " + filepath.Join(f.limaHome, "layerfs-demo", "ssh.config") + " -O forward -L " +
		f.hostSocket() + ":" + guestSocket + " lima-layerfs-demo"
	var sawForward, sawStart bool
	for _, line := range r.argvs {
		switch {
		case line == want:
			sawForward = true
			if sawStart {
				t.Errorf("the socket was forwarded after the daemon was started: %q", r.argvs)
			}
		case strings.Contains(line, "sudo sh -c"):
			sawStart = true
		}
	}
	assert.True(t, sawForward && sawStart, "commands %q: want the forward %q, then the daemon's start", r.argvs, want)
	assert.Equal(t, 1, r.forward, "forwards")

	r2 := &forwardRunner{list: list, serve: func() { t.Error("forwarded again") }}
	p2 := f.platform(t, r2, func(c *Options) { c.SoftwareEmulation = true })
	require.NoError(t, p2.Up(t.Context()), "second Up")
	for _, line := range r2.argvs {
		if strings.Contains(line, "sudo sh -c") || strings.HasPrefix(line, "ssh ") {
			t.Errorf("second Up ran %q; the daemon already answered", line)
		}
	}
}
