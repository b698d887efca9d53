package libkrun

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"layerfs.dev/layerfs/internal/platforms"
	"layerfs.dev/layerfs/internal/platforms/internal/guest"
	"layerfs.dev/layerfs/wire"
)

// Name is the platform's registry name.
const Name = "libkrun"

// MinVersion is the oldest msb the platform drives: microsandbox's v0.7
// migration guide targets 0.7.3 or later, and the commands used here
// (run --detach with --copy-file and --port, exec, ls --format json,
// rm --force) are those of that line.
const MinVersion = "0.7.3"

var minVersion = guest.Semver{0, 7, 3}

// DefaultImage is the guest's root file system when Options.Image is empty.
const DefaultImage = "debian:bookworm-slim"

// DefaultDaemonTimeout bounds the wait for the daemon after boot.
const DefaultDaemonTimeout = 60 * time.Second

// Inside the guest. The daemon listens on TCP (msb publishes TCP ports, not
// unix sockets) with a bearer token, and on its unix socket for use inside.
const (
	guestPort   = 7411
	guestSocket = "/run/layerfs/layerfsd.sock"
	guestStore  = "/var/lib/layerfs/store"
	guestDaemon = "/usr/local/bin/layerfsd"
	guestToken  = "/etc/layerfs/token"
	guestLog    = "/var/log/layerfsd.log"
)

// Options say which microVM to run and how.
type Options struct {
	// Project names the LayerFS project; the sandbox is "layerfs-" and the
	// project's name (see SandboxName). Required.
	Project string
	// Daemon is the host path of a layerfsd built for the guest (linux,
	// the host's architecture). Required for Up.
	Daemon string
	// Image is the OCI image of the guest's root file system; "" is
	// DefaultImage. It needs /bin/sh.
	Image string
	// CPUs and Memory ("2G"); zero values take msb's defaults.
	CPUs   int
	Memory string
	// HostPort is the loopback port the daemon's API is published on; 0
	// picks a free one when the microVM is created.
	HostPort int
	// StateDir keeps the published port and the API token between
	// processes; "" is $TMPDIR/layerfs.
	StateDir      string
	DaemonTimeout time.Duration // wait for GET /v1/version after boot
	Runner        Runner        // nil: ExecRunner{}
	Logger        *slog.Logger  // nil: silent
}

// state is what a later process needs to reach the same daemon.
type state struct {
	Port  int    `json:"port"`
	Token string `json:"token"`
}

// Platform runs layerfsd in a libkrun microVM managed by microsandbox's
// msb. See the package doc.
type Platform struct {
	cfg  Options
	name string
	msb  *guest.Tool
	log  *slog.Logger

	mu sync.Mutex
	up bool
	st state
}

var (
	_ platforms.Platform = (*Platform)(nil)
	_ platforms.Remote   = (*Platform)(nil)
)

// New checks cfg and returns a platform; it runs nothing.
func New(cfg Options) (*Platform, error) {
	name, err := SandboxName(cfg.Project)
	if err != nil {
		return nil, err
	}
	if cfg.Image == "" {
		cfg.Image = DefaultImage
	}
	if cfg.StateDir == "" {
		cfg.StateDir = filepath.Join(os.TempDir(), "layerfs")
	}
	if !filepath.IsAbs(cfg.StateDir) {
		return nil, fmt.Errorf("state dir %q is not absolute: %w", cfg.StateDir, platforms.ErrConfig)
	}
	if cfg.HostPort < 0 || cfg.HostPort > 65535 || cfg.CPUs < 0 || cfg.CPUs > 255 {
		return nil, fmt.Errorf("port %d / cpus %d out of range: %w", cfg.HostPort, cfg.CPUs, platforms.ErrConfig)
	}
	if cfg.DaemonTimeout <= 0 {
		cfg.DaemonTimeout = DefaultDaemonTimeout
	}
	p := &Platform{cfg: cfg, name: name, log: cfg.Logger}
	if p.log == nil {
		p.log = slog.New(slog.DiscardHandler)
	}
	p.msb = &guest.Tool{
		Argv0:        "msb",
		Prefix:       "libkrun",
		Missing:      "msb (microsandbox) not found in PATH (install microsandbox " + MinVersion + " or newer: see https://docs.microsandbox.dev; it needs KVM on Linux or Apple silicon on macOS)",
		ParseVersion: parseVersion,
		MinVersion:   minVersion,
		Upgrade:      "upgrade: msb self update",
		Runner:       cfg.Runner,
		Log:          p.log,
	}
	return p, nil
}

// SandboxName derives the sandbox name from a project name with
// guest.Name: "layerfs-" and the name lower-cased with every run of
// characters outside [a-z0-9] made one "-"; when that changed the name, a
// short hash of the original keeps projects apart.
func SandboxName(project string) (string, error) {
	name, err := guest.Name(project)
	if err != nil {
		return "", fmt.Errorf("%w: %w", platforms.ErrConfig, err)
	}
	if len(name) > 128 { // msb's limit: 128 bytes
		return "", fmt.Errorf("project %q makes a sandbox name longer than 128 bytes: %w", project, platforms.ErrConfig)
	}
	return name, nil
}

// Name implements platforms.Platform.
func (p *Platform) Name() string { return Name }

// Sandbox is the msb sandbox name this platform drives.
func (p *Platform) Sandbox() string { return p.name }

// Features implements platforms.Platform. The microVM has msb's network, so
// layerfsd can grant a sandbox the network; limits are the guest daemon's
// to report.
func (p *Platform) Features() platforms.Features {
	return platforms.Features{RemoteDaemon: true, Network: true}
}

func (p *Platform) find(ctx context.Context) (sandboxInfo, bool, error) {
	res, err := p.msb.Must(ctx, "ls", "--format", "json")
	if err != nil {
		return sandboxInfo{}, false, err
	}
	list, err := parseList(res.Stdout)
	if err != nil {
		return sandboxInfo{}, false, fmt.Errorf("libkrun: %w", err)
	}
	for _, s := range list {
		if s.Name == p.name {
			return s, true, nil
		}
	}
	return sandboxInfo{}, false, nil
}

// Leaks lists what this platform left on the host: its microVM, while it
// exists (the conformance suite checks it is gone after Down).
func (p *Platform) Leaks(ctx context.Context) ([]string, error) {
	if _, found, err := p.find(ctx); err != nil || !found {
		return nil, err
	}
	return []string{"microVM " + p.name}, nil
}

func (p *Platform) statePath() string { return filepath.Join(p.cfg.StateDir, p.name+".json") }
func (p *Platform) tokenPath() string { return filepath.Join(p.cfg.StateDir, p.name+".token") }

func (p *Platform) loadState() (state, bool) {
	b, err := os.ReadFile(p.statePath())
	if err != nil {
		return state{}, false
	}
	var st state
	if json.Unmarshal(b, &st) != nil || st.Port <= 0 || st.Token == "" {
		return state{}, false
	}
	return st, true
}

// newState picks the port and token of a new microVM and writes them, and
// the token file that is copied into the guest, readable by the owner only.
func (p *Platform) newState() (state, error) {
	st := state{Port: p.cfg.HostPort}
	if st.Port == 0 {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return state{}, fmt.Errorf("libkrun: pick a port: %w", err)
		}
		st.Port = l.Addr().(*net.TCPAddr).Port
		if err := l.Close(); err != nil {
			return state{}, fmt.Errorf("libkrun: pick a port: %w", err)
		}
	}
	tok := make([]byte, 32)
	if _, err := rand.Read(tok); err != nil {
		return state{}, fmt.Errorf("libkrun: token: %w", err)
	}
	st.Token = hex.EncodeToString(tok)
	if err := os.MkdirAll(p.cfg.StateDir, 0o700); err != nil {
		return state{}, fmt.Errorf("libkrun: %w", err)
	}
	if err := writeFile(p.tokenPath(), []byte(st.Token+"\n")); err != nil {
		return state{}, err
	}
	b, err := json.Marshal(st)
	if err != nil {
		return state{}, err
	}
	return st, writeFile(p.statePath(), b)
}

func writeFile(path string, b []byte) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return fmt.Errorf("libkrun: %w", err)
	}
	if _, err := f.Write(b); err != nil {
		f.Close()
		return fmt.Errorf("libkrun: write %s: %w", path, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("libkrun: close %s: %w", path, err)
	}
	return nil
}

// bootScript is the microVM's background command: it becomes layerfsd.
// The guest kernel (libkrunfw) has FUSE built in, since virtio-fs needs
// it, but nothing makes /dev/fuse for a plain image.
var bootScript = strings.Join([]string{
	"set -eu",
	"mkdir -p /run/layerfs " + guestStore,
	"[ -e /dev/fuse ] || mknod -m 0666 /dev/fuse c 10 229",
	"chmod 0755 " + guestDaemon,
	guest.UserNSFlag,
	"exec " + guestDaemon + " serve $userns --store " + guestStore + " --socket " + guestSocket +
		" --tcp 0.0.0.0:" + strconv.Itoa(guestPort) + " --token-file " + guestToken +
		" </dev/null >>" + guestLog + " 2>&1",
}, "\n")

// runArgs is the `msb run` command line that creates and boots the microVM
// with layerfsd as its background command.
func (p *Platform) runArgs(daemon string, st state) []string {
	args := []string{"run", "--detach", "--quiet", "--name", p.name, "--label", "layerfs.project=" + p.cfg.Project}
	if p.cfg.CPUs > 0 {
		args = append(args, "--cpus", strconv.Itoa(p.cfg.CPUs))
	}
	if p.cfg.Memory != "" {
		args = append(args, "--memory", p.cfg.Memory)
	}
	return append(args,
		"--port", fmt.Sprintf("127.0.0.1:%d:%d", st.Port, guestPort),
		"--copy-file", daemon+":"+guestDaemon,
		"--copy-file", p.tokenPath()+":"+guestToken,
		p.cfg.Image, "--", "sh", "-c", bootScript)
}

func (p *Platform) url(st state) string { return fmt.Sprintf("http://127.0.0.1:%d", st.Port) }

// Up implements platforms.Platform: boot the microVM with layerfsd as its
// background command unless it already runs and the daemon answers, then
// wait until the daemon answers on the published port. A microVM that
// exists but is stopped, or runs without an answering daemon, is removed
// and created anew: its guest Store does not survive that.
func (p *Platform) Up(ctx context.Context) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if err := p.msb.CheckVersion(ctx); err != nil {
		return err
	}
	s, found, err := p.find(ctx)
	if err != nil {
		return err
	}
	if found {
		if st, ok := p.loadState(); ok && s.running() {
			if _, err := guest.TCPDaemon(p.url(st), st.Token).Version(ctx); err == nil {
				p.st, p.up = st, true
				return nil
			}
		}
		p.log.Info("libkrun: replacing a microVM without an answering daemon", "sandbox", p.name, "status", s.Status)
		if _, err := p.msb.Must(ctx, "rm", "--force", p.name); err != nil {
			return err
		}
	}
	if p.cfg.Daemon == "" {
		return fmt.Errorf("libkrun: Options.Daemon (a layerfsd built for the guest) is not set: %w", platforms.ErrConfig)
	}
	daemon, err := filepath.Abs(p.cfg.Daemon)
	if err != nil {
		return fmt.Errorf("libkrun: %w", err)
	}
	if _, err := os.Stat(daemon); err != nil {
		return fmt.Errorf("libkrun: layerfsd for the guest: %w: %w", platforms.ErrConfig, err)
	}
	st, err := p.newState()
	if err != nil {
		return err
	}
	p.log.Info("libkrun: creating microVM", "sandbox", p.name, "image", p.cfg.Image, "port", st.Port)
	res, err := p.msb.Run(ctx, p.runArgs(daemon, st)...)
	if err != nil {
		return err
	}
	if res.ExitCode != 0 {
		return fmt.Errorf("libkrun: run microVM %q: %w (msb exited with status %d); it said:\n%s", p.name, platforms.ErrStart, res.ExitCode, guest.Tail(res.Stderr, 20))
	}
	v, err := guest.TCPDaemon(p.url(st), st.Token).Wait(ctx, p.cfg.DaemonTimeout)
	if err != nil {
		return fmt.Errorf("libkrun: %w: layerfsd in microVM %q did not answer GET /v1/version on %s within %s: %w; guest log %s:\n%s",
			platforms.ErrDaemon, p.name, p.url(st), p.cfg.DaemonTimeout, err, guestLog, p.daemonLog(ctx))
	}
	p.log.Info("libkrun: guest layerfsd is up", "sandbox", p.name, "version", v.Version, "url", p.url(st))
	p.st, p.up = st, true
	return nil
}

func (p *Platform) daemonLog(ctx context.Context) string {
	return guest.LogTail(p.msb.Run(ctx, "exec", "--no-tty", p.name, "--", "tail", "-n", "40", guestLog))
}

// Endpoint implements platforms.Remote: the published loopback port and the
// daemon's bearer token.
func (p *Platform) Endpoint(ctx context.Context) (string, string, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.up {
		return "", "", fmt.Errorf("libkrun: endpoint of %q: %w", p.name, platforms.ErrNotUp)
	}
	return p.url(p.st), p.st.Token, nil
}

// Isolation implements platforms.Isolator: what the guest daemon's
// sandboxes get, inside the VM.
func (p *Platform) Isolation(ctx context.Context) (wire.Isolation, error) {
	return guest.RemoteIsolation(ctx, p, Name, "a libkrun microVM")
}

// Identity implements platforms.Platform with facts read in the guest.
func (p *Platform) Identity(ctx context.Context) (platforms.Identity, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.up {
		return platforms.Identity{}, fmt.Errorf("libkrun: identity of %q: %w", p.name, platforms.ErrNotUp)
	}
	res, err := p.msb.Must(ctx, "exec", "--no-tty", p.name, "--", "sh", "-c", guest.FactsScript)
	if err != nil {
		return platforms.Identity{}, err
	}
	id, err := guest.ParseFacts(res.Stdout)
	if err != nil {
		return platforms.Identity{}, fmt.Errorf("libkrun: %w", err)
	}
	id.Platform, id.Runtime, id.Image = Name, "msb "+p.msb.Version(), p.cfg.Image
	id.Details = fmt.Sprintf("sandbox %s (libkrun microVM)", p.name)
	return id, nil
}

// Down implements platforms.Platform: remove the microVM (and so the guest
// Store) and the state files. A missing microVM is not an error.
func (p *Platform) Down(ctx context.Context) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if err := p.msb.CheckVersion(ctx); err != nil {
		return err
	}
	p.up = false
	if _, found, err := p.find(ctx); err != nil {
		return err
	} else if found {
		if _, err := p.msb.Must(ctx, "rm", "--force", p.name); err != nil {
			return err
		}
	}
	for _, f := range []string{p.statePath(), p.tokenPath()} {
		if err := os.Remove(f); err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("libkrun: %w", err)
		}
	}
	return nil
}
