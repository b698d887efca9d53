package applecontainer

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"layerfs.dev/layerfs/internal/platforms"
	"layerfs.dev/layerfs/internal/platforms/internal/guest"
	"layerfs.dev/layerfs/internal/platforms/internal/guest/guesttest"
	"layerfs.dev/layerfs/wire"
)

// fixture sets up what a replayed scenario refers to: a run directory for
// the host socket and a daemon binary to copy. The scenarios in testdata/
// (guesttest.Scenario) use them as $RUNDIR and $DAEMON; their outputs
// follow apple/container's sources (see doc.go).
type fixture struct {
	runDir, daemon string
	vars           map[string]string
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	f := &fixture{runDir: t.TempDir(), daemon: guesttest.FakeDaemon(t)}
	f.vars = map[string]string{"RUNDIR": f.runDir, "DAEMON": f.daemon}
	return f
}

func (f *fixture) platform(t *testing.T, r Runner, mod func(*Options)) *Platform {
	t.Helper()
	cfg := Options{Project: "demo", Daemon: f.daemon, RunDir: f.runDir, CPUs: 4, Memory: "4G", Runner: r, DaemonTimeout: 5 * time.Second}
	return guesttest.New(t, New, cfg, mod)
}

func (f *fixture) hostSocket() string { return filepath.Join(f.runDir, "layerfs-demo.sock") }

// serveDaemon answers GET /v1/version on the host socket, as the CLI's
// socket relay does once the guest daemon listens.
func (f *fixture) serveDaemon(t *testing.T) {
	t.Helper()
	guesttest.ServeVersion(t, "unix", f.hostSocket(), wire.Version{Version: "0.1.0-test", API: "v1"}, nil)
}

func TestUpCreatesStartsAndTearsDown(t *testing.T) {
	f := newFixture(t)
	r := guesttest.NewReplayer(t, "up-create.json", f.vars)
	r.Hooks["serve-daemon"] = func() { f.serveDaemon(t) }
	p := f.platform(t, r, nil)
	ctx := t.Context()
	require.NoError(t, p.Up(ctx), "Up")
	addr, token, err := p.Endpoint(ctx)
	if err != nil || addr != "unix://"+f.hostSocket() || token != "" {
		t.Fatalf("Endpoint = %q, %q, %v", addr, token, err)
	}
	id, err := p.Identity(ctx)
	require.NoError(t, err, "Identity")
	want := platforms.Identity{Platform: "applecontainer", Kernel: "6.12.28", CPUs: 4, MemoryBytes: 4005336 * 1024,
		Runtime: "container 1.2.1",
		Image:   "docker.io/library/debian:bookworm-slim@sha256:4b44499bd3b3ad5c6b7d2c1f8a2e1b6c2a0f0a9d3f2d0b5e1e3c4a8b7f6e5d4c3",
		Details: "container layerfs-demo"}
	assert.Equal(t, want, id, "Identity")
	require.NoError(t, p.Down(ctx), "Down")
	_, err = os.Stat(f.hostSocket())
	assert.ErrorIs(t, err, os.ErrNotExist, "Down left the host socket")
	guesttest.DownAgain(t, p)
}

func TestUpIsIdempotentWhenDaemonAnswers(t *testing.T) {
	f := newFixture(t)
	f.serveDaemon(t)
	guesttest.Up(t, f.platform(t, guesttest.NewReplayer(t, "up-running.json", f.vars), nil), 2)
}

func TestUpFailures(t *testing.T) {
	for _, tc := range []struct {
		scenario string
		want     error
		mentions []string
	}{
		{"run-fails.json", platforms.ErrStart, []string{`run container "layerfs-demo"`, "status 1", "vm.bootstrapStart timed out"}},
		{"services-fail.json", platforms.ErrStart, []string{"container services did not start", "XPC connection error"}},
		{"daemon-timeout.json", platforms.ErrDaemon, []string{"did not answer GET /v1/version", "layerfs-demo.sock", "disk I/O error"}},
		{"missing.json", platforms.ErrUnavailable, []string{"not in PATH", "github.com/apple/container/releases", "1.1.0"}},
		{"too-old.json", platforms.ErrUnavailable, []string{"container 0.5.0 is too old", "needs 1.1.0 or newer"}},
	} {
		t.Run(tc.scenario, func(t *testing.T) {
			f := newFixture(t)
			p := f.platform(t, guesttest.NewReplayer(t, tc.scenario, f.vars), func(c *Options) { c.DaemonTimeout = time.Second })
			guesttest.WantError(t, p.Up(t.Context()), tc.want, tc.mentions...)
		})
	}
}

func TestRunArgs(t *testing.T) {
	p, err := New(Options{Project: "demo", RunDir: "/tmp/l", NoNetwork: true, Image: "ghcr.io/acme/guest:1"})
	require.NoError(t, err)
	got := strings.Join(p.runArgs(), " ")
	want := "run --detach --name layerfs-demo --cap-add ALL --label layerfs.project=demo --network none " +
		"--publish-socket /tmp/l/layerfs-demo.sock:/var/lib/layerfs/run/layerfsd.sock ghcr.io/acme/guest:1 sleep infinity"
	assert.Equal(t, want, got, "runArgs")
	if p.Features().Network {
		t.Error("NoNetwork platform claims the network")
	}
}

func TestNewRejectsBadConfig(t *testing.T) {
	for _, cfg := range []Options{
		{},
		{Project: "demo", RunDir: "relative"},
		{Project: "demo", RunDir: "/" + strings.Repeat("d", 100)},
		{Project: "demo", CPUs: -1},
		{Project: strings.Repeat("p", 60)},
	} {
		_, err := New(cfg)
		assert.ErrorIs(t, err, platforms.ErrConfig, "New(%+v)", cfg)
	}
}

func TestParseList(t *testing.T) {
	for _, tc := range []struct {
		file  string
		ids   []string
		state []string
	}{
		{"testdata/list-running.json", []string{"buildkit", "layerfs-demo"}, []string{"running", "running"}},
		{"testdata/list-stopped.json", []string{"layerfs-demo"}, []string{"stopped"}},
		{"testdata/list-running-0x.json", []string{"layerfs-demo"}, []string{"running"}},
	} {
		b, err := os.ReadFile(tc.file)
		require.NoError(t, err)
		list, err := parseList(b)
		if err != nil || len(list) != len(tc.ids) {
			t.Fatalf("%s: %d containers, %v", tc.file, len(list), err)
		}
		for i, c := range list {
			if c.Configuration.ID != tc.ids[i] || c.state() != tc.state[i] {
				t.Errorf("%s: container %d = %s %s", tc.file, i, c.Configuration.ID, c.state())
			}
		}
	}
	for _, bad := range []string{"ID IMAGE\n", `[{"status":"running"}]`} {
		_, err := parseList([]byte(bad))
		assert.Error(t, err, "parseList(%q) accepted it", bad)
	}
	if l, err := parseList(nil); err != nil || l != nil {
		t.Errorf("parseList(empty) = %v, %v", l, err)
	}
}

func TestParseVersion(t *testing.T) {
	for _, tc := range []struct {
		out  string
		want guest.Semver
		bad  bool
	}{
		{out: "container CLI version 1.2.1 (build: release, commit: n/a)\n", want: guest.Semver{1, 2, 1}},
		{out: "container CLI version 0.4.1 (build: release, commit: 4ac18b5)\n", want: guest.Semver{0, 4, 1}},
		{out: "container CLI version  (build: release, commit: )\n", bad: true},
		{out: "Error: unknown option '--version'\n", bad: true},
	} {
		v, _, err := parseVersion([]byte(tc.out))
		if tc.bad != (err != nil) || (!tc.bad && v != tc.want) {
			t.Errorf("parseVersion(%q) = %v, %v", tc.out, v, err)
		}
	}
}
