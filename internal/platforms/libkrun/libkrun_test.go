package libkrun

import (
	"encoding/json"
	"net"
	"os"
	"path/filepath"
	"strconv"
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

// fixture sets up what a replayed scenario refers to: a state directory,
// a daemon binary to copy, and a free port. The scenarios in testdata/
// (guesttest.Scenario) use them as $STATEDIR, $DAEMON and $PORT; their
// outputs follow microsandbox's sources (see doc.go).
type fixture struct {
	stateDir, daemon string
	port             int
	vars             map[string]string
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	f := &fixture{stateDir: t.TempDir(), daemon: guesttest.FakeDaemon(t)}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	f.port = l.Addr().(*net.TCPAddr).Port
	l.Close()
	f.vars = map[string]string{"STATEDIR": f.stateDir, "DAEMON": f.daemon, "PORT": strconv.Itoa(f.port)}
	return f
}

func (f *fixture) platform(t *testing.T, r Runner, mod func(*Options)) *Platform {
	t.Helper()
	cfg := Options{Project: "demo", Daemon: f.daemon, StateDir: f.stateDir, HostPort: f.port, CPUs: 2, Memory: "2G", Runner: r, DaemonTimeout: 5 * time.Second}
	return guesttest.New(t, New, cfg, mod)
}

// serveDaemon answers GET /v1/version on the published port, as layerfsd
// behind msb's port forward does, refusing requests without the token
// written to the token file that is copied into the guest.
func (f *fixture) serveDaemon(t *testing.T) {
	t.Helper()
	guesttest.ServeVersion(t, "tcp", "127.0.0.1:"+strconv.Itoa(f.port), wire.Version{Version: "0.1.0-test", API: "v1"}, func() (string, error) {
		tok, err := os.ReadFile(filepath.Join(f.stateDir, "layerfs-demo.token"))
		return strings.TrimSpace(string(tok)), err
	})
}

func TestUpCreatesStartsAndTearsDown(t *testing.T) {
	f := newFixture(t)
	r := guesttest.NewReplayer(t, "up-create.json", f.vars)
	r.Hooks["serve-daemon"] = func() { f.serveDaemon(t) }
	p := f.platform(t, r, nil)
	ctx := t.Context()
	require.NoError(t, p.Up(ctx), "Up")
	addr, token, err := p.Endpoint(ctx)
	if err != nil || addr != "http://127.0.0.1:"+strconv.Itoa(f.port) || len(token) != 64 {
		t.Fatalf("Endpoint = %q, %q, %v", addr, token, err)
	}
	for _, file := range []string{"layerfs-demo.token", "layerfs-demo.json"} {
		fi, err := os.Stat(filepath.Join(f.stateDir, file))
		if assert.NoError(t, err, file) {
			assert.Equal(t, os.FileMode(0o600), fi.Mode().Perm(), "%s: mode", file)
		}
	}
	id, err := p.Identity(ctx)
	require.NoError(t, err, "Identity")
	want := platforms.Identity{Platform: "libkrun", Kernel: "6.12.34", CPUs: 2, MemoryBytes: 2014764 * 1024,
		Runtime: "msb 0.7.8", Image: "debian:bookworm-slim", Details: "sandbox layerfs-demo (libkrun microVM)"}
	assert.Equal(t, want, id, "Identity")
	require.NoError(t, p.Down(ctx), "Down")
	if ents, _ := os.ReadDir(f.stateDir); len(ents) != 0 {
		t.Errorf("Down left state files: %v", ents)
	}
	guesttest.DownAgain(t, p)
}

func TestUpReusesAnsweringDaemon(t *testing.T) {
	f := newFixture(t)
	st := state{Port: f.port, Token: "0123456789abcdef"}
	b, _ := json.Marshal(st)
	require.NoError(t, os.WriteFile(filepath.Join(f.stateDir, "layerfs-demo.json"), b, 0o600))
	require.NoError(t, os.WriteFile(filepath.Join(f.stateDir, "layerfs-demo.token"), []byte(st.Token+"\n"), 0o600))
	f.serveDaemon(t)
	// Another process: no port in its Options, it reads the saved one.
	p := f.platform(t, guesttest.NewReplayer(t, "up-running.json", f.vars), func(c *Options) { c.HostPort = 0 })
	guesttest.Up(t, p, 2)
	if _, tok, _ := p.Endpoint(t.Context()); tok != st.Token {
		t.Errorf("Endpoint token %q, want the saved %q", tok, st.Token)
	}
}

func TestUpReplacesStoppedMicroVM(t *testing.T) {
	f := newFixture(t)
	r := guesttest.NewReplayer(t, "up-replace-stopped.json", f.vars)
	r.Hooks["serve-daemon"] = func() { f.serveDaemon(t) }
	require.NoError(t, f.platform(t, r, nil).Up(t.Context()), "Up")
}

func TestUpFailures(t *testing.T) {
	for _, tc := range []struct {
		scenario string
		want     error
		mentions []string
	}{
		{"run-fails.json", platforms.ErrStart, []string{`run microVM "layerfs-demo"`, "status 1", "KVM is not available"}},
		{"daemon-timeout.json", platforms.ErrDaemon, []string{"did not answer GET /v1/version", "within 1s", "open /dev/fuse: no such device"}},
		{"missing.json", platforms.ErrUnavailable, []string{"msb (microsandbox) not found", "0.7.3"}},
		{"too-old.json", platforms.ErrUnavailable, []string{"msb 0.2.6 is too old", "needs 0.7.3 or newer"}},
	} {
		t.Run(tc.scenario, func(t *testing.T) {
			f := newFixture(t)
			p := f.platform(t, guesttest.NewReplayer(t, tc.scenario, f.vars), func(c *Options) { c.DaemonTimeout = time.Second })
			guesttest.WantError(t, p.Up(t.Context()), tc.want, tc.mentions...)
		})
	}
}

func TestNewRejectsBadConfig(t *testing.T) {
	for _, cfg := range []Options{
		{},
		{Project: "demo", StateDir: "relative"},
		{Project: "demo", HostPort: 70000},
		{Project: "demo", CPUs: 300},
	} {
		_, err := New(cfg)
		assert.ErrorIs(t, err, platforms.ErrConfig, "New(%+v)", cfg)
	}
}

func TestParseListAndVersion(t *testing.T) {
	list, err := parseList([]byte("[\n  {\n    \"name\": \"a\",\n    \"status\": \"Running\",\n    \"created_at\": null,\n    \"image\": \"alpine\"\n  }\n]\n"))
	if err != nil || len(list) != 1 || !list[0].running() || list[0].Image != "alpine" {
		t.Errorf("parseList = %+v, %v", list, err)
	}
	for _, bad := range []string{"NAME IMAGE STATUS\n", `[{"status":"Running"}]`} {
		_, err := parseList([]byte(bad))
		assert.Error(t, err, "parseList(%q) accepted it", bad)
	}
	if v, raw, err := parseVersion([]byte("msb 0.7.8\n")); err != nil || v != (guest.Semver{0, 7, 8}) || raw != "0.7.8" {
		t.Errorf("parseVersion = %v %q %v", v, raw, err)
	}
	_, _, err = parseVersion([]byte("microsandbox 0.7.8\n"))
	assert.Error(t, err, "parseVersion accepted another program's version")
}
