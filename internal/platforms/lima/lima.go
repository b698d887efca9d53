package lima

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/lima-vm/lima/pkg/store"

	"layerfs.dev/layerfs/internal/platforms"
	"layerfs.dev/layerfs/internal/platforms/internal/guest"
	"layerfs.dev/layerfs/wire"
)

// Name is the platform's registry name.
const Name = "lima"

// MinVersion is the oldest limactl the platform drives: the template it
// writes and the commands it runs are those of Lima 1.x.
const MinVersion = "1.0.0"

var minVersion = guest.Semver{1, 0, 0}

// Defaults for Options fields left zero.
const (
	DefaultBootTimeout = 10 * time.Minute // limactl start's own default
	// DefaultEmulatedBootTimeout is the boot timeout under
	// SoftwareEmulation, where a boot that takes a minute with a hypervisor
	// may take several on a loaded machine.
	DefaultEmulatedBootTimeout = 20 * time.Minute
	DefaultDaemonTimeout       = 60 * time.Second
	// DefaultEmulatedDaemonTimeout is the wait for the guest daemon's first
	// answer under SoftwareEmulation (its start and a fresh Store took
	// 10-20 s on a loaded machine).
	DefaultEmulatedDaemonTimeout = 3 * time.Minute
)

// Options say which instance to run and how.
type Options struct {
	// Project names the LayerFS project; the instance is "layerfs-" and
	// the project's name (see InstanceName). Required.
	Project string
	// Daemon is the host path of a layerfsd built for the guest (linux,
	// the guest's architecture). Required for Up.
	Daemon string
	// Image is a local disk image path or a URL; "" uses Debian 12's
	// generic cloud image (downloaded by Lima on first create).
	Image string
	// Kernel and Initrd, when set, boot Image directly (QEMU -kernel): Image
	// is then a root disk without a boot loader, such as the one
	// scripts/ensure-lima builds, and KernelCmdline the kernel's command
	// line. Direct boot needs no UEFI firmware, so the template asks for
	// legacy BIOS.
	Kernel        string
	Initrd        string
	KernelCmdline string
	// SoftwareEmulation runs QEMU with TCG instead of the hypervisor.
	// Lima picks KVM for a native guest on Linux and has no setting to
	// change that, so the platform gives limactl a QEMU command
	// ($QEMU_SYSTEM_X86_64, Lima's override of the QEMU binary) that
	// carries its own -machine and -accel, which Lima then leaves alone,
	// and asks for the "max" CPU model (Lima's default, "host", exists only
	// under KVM). For hosts whose KVM does not work; needs Runner to be an
	// ExecRunner or nil.
	SoftwareEmulation bool
	// LimaHome is the Lima directory limactl uses ($LIMA_HOME); "" is
	// Lima's default ($LIMA_HOME, else ~/.lima).
	LimaHome string
	// Arch is Lima's arch name (x86_64, aarch64); "" is the host's.
	Arch string
	// VMType is "vz" or "qemu"; "" lets Lima choose (vz on macOS 13.5+).
	VMType string
	// CPUs, Memory ("4GiB") and Disk ("50GiB"); zero values take Lima's
	// defaults.
	CPUs   int
	Memory string
	Disk   string
	// Networks adds guest networks: "lima:shared", "socket:/path" or
	// "vzNAT". None keeps Lima's default user-mode network only.
	Networks []string
	// WorkDir holds the generated template while limactl create reads it;
	// "" is os.TempDir().
	WorkDir string
	// Keep makes Down stop the instance but keep its disk, so the next Up
	// boots it instead of creating it (faster, and the guest Store
	// survives). By default Down deletes the instance.
	Keep          bool
	BootTimeout   time.Duration // limactl start --timeout
	DaemonTimeout time.Duration // wait for GET /v1/version after starting layerfsd
	Runner        Runner        // nil: ExecRunner{}
	Logger        *slog.Logger  // nil: silent
}

// Platform runs layerfsd in a Lima instance. See the package doc.
type Platform struct {
	cfg     Options
	inst    string
	limactl *guest.Tool
	ssh     *guest.Tool // the socket forward under SoftwareEmulation (plain mode)
	log     *slog.Logger

	mu         sync.Mutex
	up         bool
	dir        string // the instance's directory on the host
	hostSocket string
	vmType     string
	arch       string
}

var (
	_ platforms.Platform = (*Platform)(nil)
	_ platforms.Remote   = (*Platform)(nil)
)

// New checks cfg and returns a platform; it runs nothing.
func New(cfg Options) (*Platform, error) {
	name, err := InstanceName(cfg.Project)
	if err != nil {
		return nil, err
	}
	for _, n := range cfg.Networks {
		if _, err := parseNetwork(n); err != nil {
			return nil, err
		}
	}
	if cfg.BootTimeout <= 0 {
		cfg.BootTimeout = DefaultBootTimeout
		if cfg.SoftwareEmulation {
			cfg.BootTimeout = DefaultEmulatedBootTimeout
		}
	}
	if cfg.SoftwareEmulation {
		r, err := emulatingRunner(cfg.Runner, cfg.LimaHome)
		if err != nil {
			return nil, err
		}
		cfg.Runner = r
	} else if cfg.LimaHome != "" {
		r, err := withEnv(cfg.Runner, "LIMA_HOME="+cfg.LimaHome)
		if err != nil {
			return nil, err
		}
		cfg.Runner = r
	}
	if cfg.DaemonTimeout <= 0 {
		cfg.DaemonTimeout = DefaultDaemonTimeout
		if cfg.SoftwareEmulation {
			cfg.DaemonTimeout = DefaultEmulatedDaemonTimeout
		}
	}
	if cfg.WorkDir == "" {
		cfg.WorkDir = os.TempDir()
	}
	p := &Platform{cfg: cfg, inst: name, log: cfg.Logger}
	if p.log == nil {
		p.log = slog.New(slog.DiscardHandler)
	}
	p.limactl = &guest.Tool{
		Argv0:        "limactl",
		Prefix:       "lima",
		Missing:      "limactl not found in PATH (install Lima " + MinVersion + " or newer: `brew install lima` on macOS, see https://lima-vm.io/docs/installation/)",
		Refuse:       refuseRoot,
		ParseVersion: parseVersion,
		MinVersion:   minVersion,
		Upgrade:      "upgrade Lima: `brew upgrade lima`",
		Runner:       cfg.Runner,
		Log:          p.log,
	}
	p.ssh = &guest.Tool{
		Argv0:   "ssh",
		Prefix:  "lima",
		Missing: "ssh not found in PATH (install OpenSSH's client: Lima needs it too)",
		Runner:  sshRunner(cfg.Runner),
		Log:     p.log,
	}
	return p, nil
}

// InstanceName derives the instance name from a project name with
// guest.Name: "layerfs-" and the name lower-cased with every run of
// characters outside [a-z0-9] made one "-", and a short hash of the
// original when that changed it, which keeps two projects from sharing an
// instance. The result is checked with Lima's own instance-name validation.
func InstanceName(project string) (string, error) {
	name, err := guest.Name(project)
	if err != nil {
		return "", fmt.Errorf("%w: %w", platforms.ErrConfig, err)
	}
	if err := store.ValidateInstName(name); err != nil {
		return "", fmt.Errorf("project %q: %w: %w", project, platforms.ErrConfig, err)
	}
	return name, nil
}

// Name implements platforms.Platform.
func (p *Platform) Name() string { return Name }

// Instance is the Lima instance name this platform drives.
func (p *Platform) Instance() string { return p.inst }

// Features implements platforms.Platform. The guest is a full Linux VM
// with Lima's user-mode network, so layerfsd can grant a sandbox the
// network; resource limits are the guest daemon's to report.
func (p *Platform) Features() platforms.Features {
	return platforms.Features{RemoteDaemon: true, Network: true}
}

// refuseRoot recognises limactl refusing root, which it does for every
// command but --version (cmd/limactl/main.go, PersistentPreRunE).
func refuseRoot(res Result) error {
	if res.ExitCode != 0 && strings.Contains(string(res.Stderr), "must not run as the root user") {
		return fmt.Errorf("limactl refuses to run as root; run LayerFS as the user who owns the Lima instances: %w", platforms.ErrUnavailable)
	}
	return nil
}

// find looks the instance up with `limactl list --json`.
func (p *Platform) find(ctx context.Context) (instance, bool, error) {
	res, err := p.limactl.Must(ctx, "list", "--json")
	if err != nil {
		return instance{}, false, err
	}
	list, err := parseList(res.Stdout)
	if err != nil {
		return instance{}, false, fmt.Errorf("lima: %w", err)
	}
	for _, in := range list {
		if in.Name == p.inst {
			return in, true, nil
		}
	}
	return instance{}, false, nil
}

// Leaks lists what this platform left on the host: its instance, while it
// exists (the conformance suite checks it is gone after Down).
func (p *Platform) Leaks(ctx context.Context) ([]string, error) {
	if _, found, err := p.find(ctx); err != nil || !found {
		return nil, err
	}
	return []string{"lima instance " + p.inst}, nil
}

// Up implements platforms.Platform: create the instance if it is missing,
// boot it, install and start layerfsd in it, and wait until the daemon
// answers on the forwarded socket. It does nothing more when all that is
// already so.
func (p *Platform) Up(ctx context.Context) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if err := p.limactl.CheckVersion(ctx); err != nil {
		return err
	}
	in, found, err := p.find(ctx)
	if err != nil {
		return err
	}
	created := !found
	if created {
		if err := p.create(ctx); err != nil {
			return err
		}
		if in, found, err = p.find(ctx); err != nil {
			return err
		} else if !found {
			return fmt.Errorf("lima: instance %q was created but limactl list does not show it: %w", p.inst, platforms.ErrStart)
		}
	}
	p.dir, p.vmType, p.arch = in.Dir, in.VMType, in.Arch
	p.hostSocket = hostSocketOf(in)
	if !in.running() {
		p.log.Info("lima: starting instance", "instance", p.inst, "status", in.Status)
		res, err := p.limactl.Run(ctx, "start", "--tty=false", "--timeout="+p.cfg.BootTimeout.String(), p.inst)
		if err != nil {
			// Cut short (ctx): Lima's host agent and QEMU outlive the
			// killed limactl and would boot on unseen.
			return errors.Join(err, p.abandon(ctx, created))
		}
		if res.ExitCode != 0 {
			err := fmt.Errorf("lima: start instance %q: %w (limactl exited with status %d; see %s/ha.stderr.log); limactl said:\n%s",
				p.inst, platforms.ErrStart, res.ExitCode, in.Dir, guest.Tail(res.Stderr, 20))
			if created {
				err = errors.Join(err, p.abandon(ctx, created))
			}
			return err
		}
	}
	daemon := guest.UnixDaemon(p.hostSocket)
	if v, err := daemon.Version(ctx); err == nil {
		p.log.Info("lima: guest layerfsd already answering", "instance", p.inst, "version", v.Version)
		p.up = true
		return nil
	}
	if p.cfg.SoftwareEmulation {
		if err := p.forwardSocket(ctx, in.Dir); err != nil {
			return err
		}
	}
	if err := p.startDaemon(ctx); err != nil {
		return err
	}
	v, err := daemon.Wait(ctx, p.cfg.DaemonTimeout)
	if err != nil {
		logTail := p.daemonLog(ctx)
		return fmt.Errorf("lima: %w: layerfsd in instance %q did not answer GET /v1/version on %s within %s: %w; guest log %s:\n%s",
			platforms.ErrDaemon, p.inst, p.hostSocket, p.cfg.DaemonTimeout, err, guestLog, logTail)
	}
	p.log.Info("lima: guest layerfsd is up", "instance", p.inst, "version", v.Version, "socket", p.hostSocket)
	p.up = true
	return nil
}

// abandonTimeout bounds the clean-up of a start that failed.
const abandonTimeout = 2 * time.Minute

// abandon cleans up after a start that failed or was cut short: an
// instance Up created is deleted, another is stopped, so that no VM boots on
// unseen. It runs even when ctx is done.
func (p *Platform) abandon(ctx context.Context, created bool) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), abandonTimeout)
	defer cancel()
	args := []string{"stop", "--force", p.inst}
	if created {
		args = []string{"delete", "--force", p.inst}
	}
	p.log.Warn("lima: start failed; cleaning up", "instance", p.inst, "limactl", args[0])
	if _, err := p.limactl.Must(ctx, args...); err != nil {
		return fmt.Errorf("lima: clean up after the failed start: %w", err)
	}
	return nil
}

// hostSocketOf finds the host end of the daemon's socket forward in the
// instance's configuration (Lima has filled in the absolute path), falling
// back to where this package puts it.
func hostSocketOf(in instance) string {
	if in.Config != nil {
		for _, r := range in.Config.PortForwards {
			if r.GuestSocket == guestSocket && r.HostSocket != "" {
				return r.HostSocket
			}
		}
	}
	return filepath.Join(in.Dir, "sock", "layerfsd.sock")
}

// forwardSocket forwards the daemon's guest socket to p.hostSocket under
// SoftwareEmulation, where the instance runs in Lima's plain mode (see
// Template), which turns Lima's own port forwarding off. It asks the
// instance's SSH master, which Lima's host agent keeps for the instance's
// life, to listen on the host socket (`ssh -O forward`, as Lima's own
// socket forwards do), so the forward lives and ends with the instance and
// no process of this one carries it. A forward that still answers is kept;
// a stale socket (the master it belonged to is gone) is removed first.
func (p *Platform) forwardSocket(ctx context.Context, instDir string) error {
	if c, err := net.Dial("unix", p.hostSocket); err == nil {
		c.Close()
		return nil
	}
	if err := os.Remove(p.hostSocket); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("lima: remove the stale socket forward: %w", err)
	}
	// The socket's directory belongs to whoever runs limactl (its master
	// listens there).
	dir := filepath.Dir(p.hostSocket)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("lima: socket forward: %w", err)
	}
	if st, err := os.Stat(instDir); err == nil {
		if sys, ok := st.Sys().(*syscall.Stat_t); ok {
			if err := os.Lchown(dir, int(sys.Uid), int(sys.Gid)); err != nil {
				return fmt.Errorf("lima: socket forward: %w", err)
			}
		}
	}
	_, err := p.ssh.Must(ctx, "-F", filepath.Join(instDir, "ssh.config"), "-O", "forward",
		"-L", p.hostSocket+":"+guestSocket, "lima-"+p.inst)
	if err != nil {
		return fmt.Errorf("lima: forward the daemon's socket through the instance's SSH master: %w", err)
	}
	return nil
}

// create writes the template and runs limactl create.
func (p *Platform) create(ctx context.Context) error {
	instDir, err := p.instanceDir()
	if err != nil {
		return err
	}
	y, err := Template(p.cfg, filepath.Join(instDir, "sock", "layerfsd.sock"))
	if err != nil {
		return err
	}
	b, err := MarshalTemplate(y)
	if err != nil {
		return err
	}
	if err := ValidateTemplate(b, instDir); err != nil {
		return fmt.Errorf("lima: instance %q: %w", p.inst, err)
	}
	file := filepath.Join(p.cfg.WorkDir, p.inst+".yaml")
	// Readable by all: limactl may run as another user (see Install).
	if err := os.WriteFile(file, b, 0o644); err != nil {
		return fmt.Errorf("lima: write template: %w", err)
	}
	defer os.Remove(file)
	p.log.Info("lima: creating instance", "instance", p.inst, "template", file)
	res, err := p.limactl.Run(ctx, "create", "--tty=false", "--name="+p.inst, file)
	if err != nil {
		return err
	}
	if res.ExitCode != 0 {
		return fmt.Errorf("lima: create instance %q: %w (limactl exited with status %d); limactl said:\n%s",
			p.inst, platforms.ErrStart, res.ExitCode, guest.Tail(res.Stderr, 20))
	}
	return nil
}

// startScript installs the uploaded layerfsd and starts it detached as
// root. Lima forwards a guest socket over SSH as the guest user, who needs
// read-write access to it (Lima's templates/default.yaml says so); the
// daemon makes its socket 0600 root, so the script gives it to the user
// that sudo came from.
var startScript = strings.Join([]string{
	"set -eu",
	"install -m 0755 " + guestUpload + " " + guestDaemon,
	"rm -f " + guestUpload,
	"mkdir -p /run/layerfs " + guestStore,
	"[ -e /dev/fuse ] || mknod -m 0666 /dev/fuse c 10 229",
	stopScript,
	"rm -f " + guestSocket,
	guest.UserNSFlag,
	"setsid " + guestDaemon + " serve $userns --store " + guestStore + " --socket " + guestSocket +
		" </dev/null >>" + guestLog + " 2>&1 &",
	"echo $! >" + guestPID,
	"i=0; while [ ! -S " + guestSocket + " ] && [ $i -lt 100 ]; do sleep 0.1; i=$((i+1)); done",
	"if [ -S " + guestSocket + " ]; then chown \"${SUDO_USER:-root}\" " + guestSocket + "; fi",
}, "\n")

// stopScript stops a daemon started by startScript, waiting up to 10 s for
// it to unmount and exit.
var stopScript = "if [ -f " + guestPID + " ] && kill -0 \"$(cat " + guestPID + ")\" 2>/dev/null; then " +
	"kill \"$(cat " + guestPID + ")\"; i=0; " +
	"while kill -0 \"$(cat " + guestPID + ")\" 2>/dev/null && [ $i -lt 100 ]; do sleep 0.1; i=$((i+1)); done; fi"

// startDaemon copies layerfsd into the guest and starts it.
func (p *Platform) startDaemon(ctx context.Context) error {
	if p.cfg.Daemon == "" {
		return fmt.Errorf("lima: Options.Daemon (a layerfsd built for the guest) is not set: %w", platforms.ErrConfig)
	}
	daemon, err := filepath.Abs(p.cfg.Daemon)
	if err != nil {
		return fmt.Errorf("lima: %w", err)
	}
	if _, err := os.Stat(daemon); err != nil {
		return fmt.Errorf("lima: layerfsd for the guest: %w: %w", platforms.ErrConfig, err)
	}
	if runsAsOtherUser(p.cfg.Runner) {
		// That user may not read a private directory of this process (a
		// test's temporary directory): it copies a readable copy.
		staged := filepath.Join(p.cfg.WorkDir, p.inst+"-layerfsd")
		if err := copyFile(daemon, staged, 0o755); err != nil {
			return fmt.Errorf("lima: stage layerfsd for the guest: %w", err)
		}
		defer os.Remove(staged)
		daemon = staged
	}
	if _, err := p.limactl.Must(ctx, "copy", daemon, p.inst+":"+guestUpload); err != nil {
		return err
	}
	if _, err := p.limactl.Must(ctx, "shell", "--workdir", "/", p.inst, "sudo", "sh", "-c", startScript); err != nil {
		return err
	}
	return nil
}

// daemonLog returns the tail of the guest daemon's log, or why it could
// not be read.
func (p *Platform) daemonLog(ctx context.Context) string {
	return guest.LogTail(p.limactl.Run(ctx, "shell", "--workdir", "/", p.inst, "sudo", "tail", "-n", "40", guestLog))
}

// Endpoint implements platforms.Remote: the forwarded socket on this host.
func (p *Platform) Endpoint(ctx context.Context) (string, string, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.up {
		return "", "", fmt.Errorf("lima: endpoint of %q: %w", p.inst, platforms.ErrNotUp)
	}
	return "unix://" + p.hostSocket, "", nil
}

// Isolation implements platforms.Isolator: what the guest daemon's
// sandboxes get, inside the VM.
func (p *Platform) Isolation(ctx context.Context) (wire.Isolation, error) {
	return guest.RemoteIsolation(ctx, p, Name, "a Lima VM ("+p.vmType+")")
}

// Identity implements platforms.Platform with facts read in the guest.
func (p *Platform) Identity(ctx context.Context) (platforms.Identity, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.up {
		return platforms.Identity{}, fmt.Errorf("lima: identity of %q: %w", p.inst, platforms.ErrNotUp)
	}
	res, err := p.limactl.Must(ctx, "shell", "--workdir", "/", p.inst, "sh", "-c", guest.FactsScript)
	if err != nil {
		return platforms.Identity{}, err
	}
	id, err := guest.ParseFacts(res.Stdout)
	if err != nil {
		return platforms.Identity{}, fmt.Errorf("lima: %w", err)
	}
	id.Platform, id.Runtime, id.Image = Name, "limactl "+p.limactl.Version(), p.cfg.Image
	if id.Image == "" {
		id.Image = "debian-12-genericcloud (latest)"
	}
	id.Details = fmt.Sprintf("instance %s, vmType %s, arch %s", p.inst, p.vmType, p.arch)
	return id, nil
}

// Down implements platforms.Platform: delete the instance (with Keep: stop
// the daemon and the instance). A missing instance is not an error, so Down
// may be called any number of times.
func (p *Platform) Down(ctx context.Context) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if err := p.limactl.CheckVersion(ctx); err != nil {
		return err
	}
	p.up = false
	in, found, err := p.find(ctx)
	if err != nil || !found {
		return err
	}
	if !p.cfg.Keep {
		// --force stops the VM first (pkg/instance: Delete refuses a
		// running instance otherwise).
		_, err := p.limactl.Must(ctx, "delete", "--force", p.inst)
		return err
	}
	if !in.running() {
		return nil
	}
	if _, err := p.limactl.Must(ctx, "shell", "--workdir", "/", p.inst, "sudo", "sh", "-c", stopScript); err != nil {
		return err
	}
	_, err = p.limactl.Must(ctx, "stop", p.inst)
	return err
}
