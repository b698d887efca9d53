package applecontainer

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
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
const Name = "applecontainer"

// MinVersion is the oldest `container` CLI the platform drives: 1.0.0 added
// --cap-add (and dropped CAP_SYS_ADMIN from the default set, which FUSE and
// namespaces need), and the 1.x line has `container copy`.
const MinVersion = "1.1.0"

var minVersion = guest.Semver{1, 1, 0}

// DefaultImage is the guest's root file system when Options.Image is empty.
const DefaultImage = "docker.io/library/debian:bookworm-slim"

// Defaults for Options fields left zero.
const DefaultDaemonTimeout = 60 * time.Second

// Paths inside the container. The socket sits on the root file system, not
// a tmpfs: --publish-socket does not relay a socket on tmpfs in every
// release (apple/container issue 2101).
const (
	guestDir    = "/var/lib/layerfs"
	guestSocket = guestDir + "/run/layerfsd.sock"
	guestStore  = guestDir + "/store"
	guestPID    = guestDir + "/run/layerfsd.pid"
	guestDaemon = "/usr/local/bin/layerfsd"
	guestLog    = "/var/log/layerfsd.log"
)

// unixPathMax is macOS's limit on a socket path (sun_path is 104 bytes).
const unixPathMax = 104

// Options say which container to run and how.
type Options struct {
	// Project names the LayerFS project; the container is "layerfs-" and
	// the project's name (see ContainerName). Required.
	Project string
	// Daemon is the host path of a layerfsd built for linux/arm64.
	// Required for Up.
	Daemon string
	// Image is the OCI image of the guest's root file system; "" is
	// DefaultImage. It needs /bin/sh.
	Image string
	// CPUs and Memory ("4G") of the container's VM; zero values take the
	// CLI's defaults.
	CPUs   int
	Memory string
	// NoNetwork runs the VM with --network none (loopback only): then no
	// sandbox can be granted the network.
	NoNetwork bool
	// RunDir holds the host end of the daemon's published socket; "" is
	// $TMPDIR/layerfs. Its path must stay under macOS's 104-byte limit.
	RunDir        string
	DaemonTimeout time.Duration // wait for GET /v1/version after starting layerfsd
	Runner        Runner        // nil: ExecRunner{}
	Logger        *slog.Logger  // nil: silent
}

// Platform runs layerfsd in one container (one lightweight VM) of Apple's
// container CLI. See the package doc.
type Platform struct {
	cfg        Options
	name       string
	hostSocket string
	cli        *guest.Tool // the container CLI
	log        *slog.Logger

	mu   sync.Mutex
	up   bool
	info containerInfo
}

var (
	_ platforms.Platform = (*Platform)(nil)
	_ platforms.Remote   = (*Platform)(nil)
)

// New checks cfg and returns a platform; it runs nothing.
func New(cfg Options) (*Platform, error) {
	name, err := ContainerName(cfg.Project)
	if err != nil {
		return nil, err
	}
	if cfg.Image == "" {
		cfg.Image = DefaultImage
	}
	if cfg.RunDir == "" {
		cfg.RunDir = filepath.Join(os.TempDir(), "layerfs")
	}
	if cfg.DaemonTimeout <= 0 {
		cfg.DaemonTimeout = DefaultDaemonTimeout
	}
	if cfg.CPUs < 0 {
		return nil, fmt.Errorf("cpus %d: %w", cfg.CPUs, platforms.ErrConfig)
	}
	sock := filepath.Join(cfg.RunDir, name+".sock")
	if !filepath.IsAbs(sock) || len(sock) >= unixPathMax {
		return nil, fmt.Errorf("host socket %q must be an absolute path shorter than %d bytes (set RunDir): %w", sock, unixPathMax, platforms.ErrConfig)
	}
	p := &Platform{cfg: cfg, name: name, hostSocket: sock, log: cfg.Logger}
	if p.log == nil {
		p.log = slog.New(slog.DiscardHandler)
	}
	p.cli = &guest.Tool{
		Argv0:        "container",
		Prefix:       "applecontainer",
		Missing:      "the container CLI is not in PATH (install Apple's container " + MinVersion + " or newer from the signed package at https://github.com/apple/container/releases; it needs a Mac with Apple silicon and macOS 26)",
		ParseVersion: parseVersion,
		MinVersion:   minVersion,
		Upgrade:      "install the newer signed package from https://github.com/apple/container/releases",
		Runner:       cfg.Runner,
		Log:          p.log,
	}
	return p, nil
}

// ContainerName derives the container's name (its id for the CLI) from a
// project name with guest.Name: "layerfs-" and the name lower-cased with
// every run of characters outside [a-z0-9] made one "-"; when that changed
// the name, a short hash of the original keeps projects apart.
func ContainerName(project string) (string, error) {
	name, err := guest.Name(project)
	if err != nil {
		return "", fmt.Errorf("%w: %w", platforms.ErrConfig, err)
	}
	if len(name) > 63 {
		return "", fmt.Errorf("project %q makes a container name longer than 63 characters: %w", project, platforms.ErrConfig)
	}
	return name, nil
}

// Name implements platforms.Platform.
func (p *Platform) Name() string { return Name }

// Container is the name of the container this platform drives.
func (p *Platform) Container() string { return p.name }

// Features implements platforms.Platform. The container VM has a network
// unless NoNetwork; resource limits are the guest daemon's to report.
func (p *Platform) Features() platforms.Features {
	return platforms.Features{RemoteDaemon: true, Network: !p.cfg.NoNetwork}
}

// ensureSystem starts the container services (API server, and on first
// use the default kernel) unless `container system status` says they run.
func (p *Platform) ensureSystem(ctx context.Context) error {
	res, err := p.cli.Run(ctx, "system", "status")
	if err != nil {
		return err
	}
	if res.ExitCode == 0 {
		return nil
	}
	p.log.Info("applecontainer: starting container services")
	// --enable-kernel-install answers the first-run kernel prompt, which
	// would otherwise read stdin.
	res, err = p.cli.Run(ctx, "system", "start", "--enable-kernel-install")
	if err != nil {
		return err
	}
	if res.ExitCode != 0 {
		return fmt.Errorf("applecontainer: container services did not start: %w (container system start exited with status %d); it said:\n%s",
			platforms.ErrStart, res.ExitCode, guest.Tail(append(res.Stdout, res.Stderr...), 20))
	}
	return nil
}

func (p *Platform) find(ctx context.Context) (containerInfo, bool, error) {
	res, err := p.cli.Must(ctx, "list", "--all", "--format", "json")
	if err != nil {
		return containerInfo{}, false, err
	}
	list, err := parseList(res.Stdout)
	if err != nil {
		return containerInfo{}, false, fmt.Errorf("applecontainer: %w", err)
	}
	for _, c := range list {
		if c.Configuration.ID == p.name {
			return c, true, nil
		}
	}
	return containerInfo{}, false, nil
}

// Leaks lists what this platform left on the host: its container, while it
// exists (the conformance suite checks it is gone after Down).
func (p *Platform) Leaks(ctx context.Context) ([]string, error) {
	if _, found, err := p.find(ctx); err != nil || !found {
		return nil, err
	}
	return []string{"container " + p.name}, nil
}

// runArgs is the `container run` command line that creates the guest: a
// detached container whose main process only keeps it alive, with every
// capability (FUSE mounts and namespace sandboxes need CAP_SYS_ADMIN, which
// the CLI no longer grants by default since 1.0.0) and the daemon's socket
// published on this host.
func (p *Platform) runArgs() []string {
	args := []string{"run", "--detach", "--name", p.name, "--cap-add", "ALL",
		"--label", "layerfs.project=" + p.cfg.Project}
	if p.cfg.CPUs > 0 {
		args = append(args, "--cpus", strconv.Itoa(p.cfg.CPUs))
	}
	if p.cfg.Memory != "" {
		args = append(args, "--memory", p.cfg.Memory)
	}
	if p.cfg.NoNetwork {
		args = append(args, "--network", "none")
	}
	args = append(args, "--publish-socket", p.hostSocket+":"+guestSocket, p.cfg.Image, "sleep", "infinity")
	return args
}

// prepScript runs before the binary is copied in: it stops a daemon left
// from an earlier Up and makes what the daemon needs. udev does not run in
// the container, so /dev/fuse may have to be made by hand.
var prepScript = strings.Join([]string{
	"set -eu",
	"mkdir -p " + guestDir + "/run " + guestStore,
	"[ -e /dev/fuse ] || mknod -m 0666 /dev/fuse c 10 229",
	stopScript,
	"rm -f " + guestSocket,
}, "\n")

// stopScript stops a daemon started by daemonScript, waiting up to 10 s.
var stopScript = "if [ -f " + guestPID + " ] && kill -0 \"$(cat " + guestPID + ")\" 2>/dev/null; then " +
	"kill \"$(cat " + guestPID + ")\"; i=0; " +
	"while kill -0 \"$(cat " + guestPID + ")\" 2>/dev/null && [ $i -lt 100 ]; do sleep 0.1; i=$((i+1)); done; fi"

// daemonScript becomes layerfsd (exec keeps the pid the script wrote).
var daemonScript = guest.UserNSFlag + "; chmod 0755 " + guestDaemon + " && echo $$ >" + guestPID + " && exec " + guestDaemon +
	" serve $userns --store " + guestStore + " --socket " + guestSocket + " </dev/null >>" + guestLog + " 2>&1"

// Up implements platforms.Platform: start the container services if they
// are down, create or start the container, copy layerfsd in and start it,
// and wait until it answers on the published socket. It does nothing more
// when the daemon already answers.
func (p *Platform) Up(ctx context.Context) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if err := p.cli.CheckVersion(ctx); err != nil {
		return err
	}
	if err := p.ensureSystem(ctx); err != nil {
		return err
	}
	c, found, err := p.find(ctx)
	if err != nil {
		return err
	}
	switch {
	case !found:
		if err := os.MkdirAll(p.cfg.RunDir, 0o700); err != nil {
			return fmt.Errorf("applecontainer: %w", err)
		}
		p.log.Info("applecontainer: creating container", "container", p.name, "image", p.cfg.Image)
		if err := p.startOrFail(ctx, p.runArgs()...); err != nil {
			return err
		}
	case !c.running():
		p.log.Info("applecontainer: starting container", "container", p.name, "state", c.state())
		if err := p.startOrFail(ctx, "start", p.name); err != nil {
			return err
		}
	}
	if c, found, err = p.find(ctx); err != nil {
		return err
	} else if !found || !c.running() {
		return fmt.Errorf("applecontainer: container %q is not running after start (state %q): %w", p.name, c.state(), platforms.ErrStart)
	}
	p.info = c
	daemon := guest.UnixDaemon(p.hostSocket)
	if v, err := daemon.Version(ctx); err == nil {
		p.log.Info("applecontainer: guest layerfsd already answering", "container", p.name, "version", v.Version)
		p.up = true
		return nil
	}
	if err := p.startDaemon(ctx); err != nil {
		return err
	}
	v, err := daemon.Wait(ctx, p.cfg.DaemonTimeout)
	if err != nil {
		return fmt.Errorf("applecontainer: %w: layerfsd in container %q did not answer GET /v1/version on %s within %s: %w; guest log %s:\n%s",
			platforms.ErrDaemon, p.name, p.hostSocket, p.cfg.DaemonTimeout, err, guestLog, p.daemonLog(ctx))
	}
	p.log.Info("applecontainer: guest layerfsd is up", "container", p.name, "version", v.Version, "socket", p.hostSocket)
	p.up = true
	return nil
}

// startOrFail runs a command that boots the container's VM.
func (p *Platform) startOrFail(ctx context.Context, args ...string) error {
	res, err := p.cli.Run(ctx, args...)
	if err != nil {
		return err
	}
	if res.ExitCode != 0 {
		return fmt.Errorf("applecontainer: %s container %q: %w (container exited with status %d); it said:\n%s",
			args[0], p.name, platforms.ErrStart, res.ExitCode, guest.Tail(res.Stderr, 20))
	}
	return nil
}

func (p *Platform) startDaemon(ctx context.Context) error {
	if p.cfg.Daemon == "" {
		return fmt.Errorf("applecontainer: Options.Daemon (a layerfsd built for linux/arm64) is not set: %w", platforms.ErrConfig)
	}
	// container copy resolves a relative host path against / (issue 1738).
	daemon, err := filepath.Abs(p.cfg.Daemon)
	if err != nil {
		return fmt.Errorf("applecontainer: %w", err)
	}
	if _, err := os.Stat(daemon); err != nil {
		return fmt.Errorf("applecontainer: layerfsd for the guest: %w: %w", platforms.ErrConfig, err)
	}
	if _, err := p.cli.Must(ctx, "exec", p.name, "sh", "-c", prepScript); err != nil {
		return err
	}
	if _, err := p.cli.Must(ctx, "copy", daemon, p.name+":"+guestDaemon); err != nil {
		return err
	}
	_, err = p.cli.Must(ctx, "exec", "--detach", p.name, "sh", "-c", daemonScript)
	return err
}

func (p *Platform) daemonLog(ctx context.Context) string {
	return guest.LogTail(p.cli.Run(ctx, "exec", p.name, "tail", "-n", "40", guestLog))
}

// Endpoint implements platforms.Remote: the published socket on this host.
func (p *Platform) Endpoint(ctx context.Context) (string, string, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.up {
		return "", "", fmt.Errorf("applecontainer: endpoint of %q: %w", p.name, platforms.ErrNotUp)
	}
	return "unix://" + p.hostSocket, "", nil
}

// Isolation implements platforms.Isolator: what the guest daemon's
// sandboxes get, inside the VM.
func (p *Platform) Isolation(ctx context.Context) (wire.Isolation, error) {
	return guest.RemoteIsolation(ctx, p, Name, "an Apple container VM")
}

// Identity implements platforms.Platform with facts read in the guest.
func (p *Platform) Identity(ctx context.Context) (platforms.Identity, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.up {
		return platforms.Identity{}, fmt.Errorf("applecontainer: identity of %q: %w", p.name, platforms.ErrNotUp)
	}
	res, err := p.cli.Must(ctx, "exec", p.name, "sh", "-c", guest.FactsScript)
	if err != nil {
		return platforms.Identity{}, err
	}
	id, err := guest.ParseFacts(res.Stdout)
	if err != nil {
		return platforms.Identity{}, fmt.Errorf("applecontainer: %w", err)
	}
	id.Platform, id.Runtime, id.Image = Name, "container "+p.cli.Version(), p.info.image()
	id.Details = fmt.Sprintf("container %s", p.name)
	return id, nil
}

// Down implements platforms.Platform: delete the container (and so its VM
// and the guest Store) and the host socket. A missing container is not an
// error.
func (p *Platform) Down(ctx context.Context) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if err := p.cli.CheckVersion(ctx); err != nil {
		return err
	}
	p.up = false
	if err := p.ensureSystem(ctx); err != nil {
		return err
	}
	if _, found, err := p.find(ctx); err != nil {
		return err
	} else if found {
		if _, err := p.cli.Must(ctx, "delete", "--force", p.name); err != nil {
			return err
		}
	}
	if err := os.Remove(p.hostSocket); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("applecontainer: %w", err)
	}
	return nil
}
