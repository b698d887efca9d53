package docker

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/api/types/image"
	"github.com/docker/docker/api/types/volume"
	"github.com/docker/docker/client"

	"layerfs.dev/layerfs/internal/egress"
	"layerfs.dev/layerfs/internal/platforms"
	"layerfs.dev/layerfs/internal/platforms/internal/userns"
	"layerfs.dev/layerfs/internal/seccomp"
	"layerfs.dev/layerfs/wire"
)

// DefaultHost is the engine address used when Options.Host is empty.
const DefaultHost = "unix:///var/run/docker.sock"

// Labels on everything this package creates.
const (
	labelWorkspace = "dev.layerfs.workspace" // the workspace id
	labelOwner     = "dev.layerfs.owner"     // "<pid>-<random>" of the Platform that created it
	labelPidNS     = "dev.layerfs.pidns"     // the owner's PID namespace, in which <pid> is valid
)

// Defaults for Options fields left zero.
const (
	DefaultMemoryBytes = 8 << 30 // per container (workspace)
	DefaultTmpBytes    = 1 << 30 // the /tmp tmpfs, counted in the memory limit
)

// Options configure a Platform.
type Options struct {
	// Host is the engine address ("unix:///path" or "tcp://host:port");
	// "" is DefaultHost. The environment (DOCKER_HOST) is not consulted:
	// the command that builds Options decides.
	Host string
	// Packages are the host's Debian packages whose files make the sandbox
	// image; nil is DefaultPackages.
	Packages []string
	// MemoryBytes and Pids limit each workspace's container (all its execs
	// together); 0 is DefaultMemoryBytes and platforms.DefaultPids.
	MemoryBytes int64
	Pids        int64
	// TmpBytes is the size of each container's /tmp; 0 is DefaultTmpBytes.
	TmpBytes int64
	// Supervisor is the executable bind-mounted into every container to run
	// execs: a build of cmd/layerfs-supervise, or any binary that imports
	// this package (its init hook is the supervisor too). "" is
	// layerfs-supervise beside this process's executable or on PATH, else
	// this executable itself.
	Supervisor string
	// UserNamespace is the host ids the ids 0 to Size-1 of a container's
	// commands map to; nil is the local platform's default (the
	// subordinate ids of the user "layerfs", else 2000000000-2000065535).
	UserNamespace *userns.Range
	// NoUserNamespace runs commands in the host's user namespace (uid 0
	// without capabilities), as containers of an engine without
	// userns-remap run.
	NoUserNamespace bool
	// Egress configures the egress of workspaces with network "egress"
	// (package egress), as platforms/local's: a container's network
	// namespace gets the link. Without nftables the platform is up
	// without it and refuses the mode.
	Egress egress.Config
	// Logger receives lifecycle events; nil is silent.
	Logger *slog.Logger
}

// Platform runs sandboxes as Docker containers driven through the Engine
// API: one long-lived container per attached workspace, one docker exec per
// Exec. See the package documentation for the design.
//
// Its lifecycle is New -> Up -> Attach/Exec ... -> Down; Up is idempotent,
// Down removes every container this Platform created and keeps the sandbox
// image, and the Platform can be brought Up again after Down.
type Platform struct {
	opts  Options
	log   *slog.Logger
	owner string

	cg   *cgroupV1 // nil: per-exec limits are not available
	noCg error     // why not

	mu         sync.Mutex
	cli        *client.Client // nil when not up
	state      upState
	containers map[string]bool // ids of every container Attach created, for Leaks
	rootImages map[string]bool // ids of every root-dir image Attach made, for Leaks
	egress     *egress.Manager // nil: egressErr says why
	egressErr  error
}

// upState is what Up learned; read-only once Up returns.
type upState struct {
	version    string // engine version
	apiVersion string // negotiated API version
	info       identityInfo
	image      builtImage
	supervisor string
	imageTime  time.Duration // hashing (and, when built, importing) the image
	// seccomp is the sandbox's syscall filter (internal/seccomp) in
	// Docker's JSON profile format, the SecurityOpt of every container
	// whose commands run in the host's user namespace.
	seccomp string
	userNS  userNSState
}

type identityInfo struct {
	kernel   string
	cpus     int
	memory   int64
	driver   string
	cgroup   string
	security []string
}

var (
	_ platforms.Platform    = (*Platform)(nil)
	_ platforms.SandboxHost = (*Platform)(nil)
	_ platforms.Isolator    = (*Platform)(nil)
	_ platforms.IDMapper    = (*Platform)(nil)
)

// New returns a Platform; nothing is contacted until Up.
func New(opts Options) *Platform {
	if opts.Host == "" {
		opts.Host = DefaultHost
	}
	if opts.Packages == nil {
		opts.Packages = DefaultPackages
	}
	if opts.MemoryBytes == 0 {
		opts.MemoryBytes = DefaultMemoryBytes
	}
	if opts.Pids == 0 {
		opts.Pids = platforms.DefaultPids
	}
	if opts.TmpBytes == 0 {
		opts.TmpBytes = DefaultTmpBytes
	}
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	var rnd [4]byte
	_, _ = rand.Read(rnd[:])
	p := &Platform{opts: opts, log: log, owner: strconv.Itoa(os.Getpid()) + "-" + hex.EncodeToString(rnd[:])}
	// Per-exec cgroups need the engine's processes visible here: a local
	// engine (a unix socket) on a cgroup v1 host.
	if !strings.HasPrefix(opts.Host, "unix://") {
		p.noCg = fmt.Errorf("engine %s is not local", opts.Host)
	} else {
		p.cg, p.noCg = detectCgroupV1()
	}
	return p
}

// Name is "docker".
func (p *Platform) Name() string { return "docker" }

// Features: workspaces are host paths bind-mounted into containers; the
// network is the host's when granted ("host" mode), else none. ExecSpec's
// memory and pids limits are enforced per exec where the engine is local
// and the host has cgroup v1 (see cgroup.go); elsewhere only the
// container's limits (Options), shared by a workspace's execs, apply.
func (p *Platform) Features() platforms.Features {
	p.mu.Lock()
	eg := p.egress != nil
	p.mu.Unlock()
	return platforms.Features{HostMounts: true, Network: true, Egress: eg, MemoryLimit: p.cg != nil, PidsLimit: p.cg != nil,
		CPULimit: p.cg != nil && p.cg.cpu.Dir != "", OpenFilesLimit: true, Ports: true}
}

// Up connects to the engine, checks it, and ensures the sandbox image.
func (p *Platform) Up(ctx context.Context) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cli != nil {
		return nil
	}
	cli, err := client.NewClientWithOpts(client.WithHost(p.opts.Host), client.WithAPIVersionNegotiation())
	if err != nil {
		return fmt.Errorf("docker: engine address %q: %w: %w", p.opts.Host, platforms.ErrUnavailable, err)
	}
	st, err := p.connect(ctx, cli)
	if err != nil {
		_ = cli.Close()
		return err
	}
	p.cli, p.state = cli, st
	p.startEgress(ctx)
	return nil
}

func (p *Platform) connect(ctx context.Context, cli *client.Client) (upState, error) {
	var st upState
	pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	ping, err := cli.Ping(pctx)
	cancel()
	if err != nil {
		return st, fmt.Errorf("docker: %w: no engine answers at %s: %w; start one with "+
			"scripts/ensure-docker (as root), `dockerd &` or `systemctl start docker`, "+
			"or point Options.Host at a running engine", platforms.ErrUnavailable, p.opts.Host, err)
	}
	cli.NegotiateAPIVersionPing(ping)
	st.apiVersion = cli.ClientVersion()
	ver, err := cli.ServerVersion(ctx)
	if err != nil {
		return st, fmt.Errorf("docker: engine version: %w", err)
	}
	st.version = ver.Version
	info, err := cli.Info(ctx)
	if err != nil {
		return st, fmt.Errorf("docker: engine info: %w", err)
	}
	if info.OSType != "linux" {
		return st, fmt.Errorf("docker: engine runs %q containers, need linux: %w", info.OSType, platforms.ErrUnavailable)
	}
	st.info = identityInfo{kernel: info.KernelVersion, cpus: info.NCPU, memory: info.MemTotal,
		driver: info.Driver, cgroup: info.CgroupVersion, security: info.SecurityOptions}

	if st.seccomp, err = seccomp.DockerProfile(false); err != nil {
		return st, fmt.Errorf("docker: %w: %w", platforms.ErrUnavailable, err)
	}
	st.supervisor = p.opts.Supervisor
	if st.supervisor == "" {
		if st.supervisor, err = defaultSupervisor(); err != nil {
			return st, fmt.Errorf("docker: find the supervisor: %w", err)
		}
	}
	if st.supervisor, err = filepath.EvalSymlinks(st.supervisor); err != nil {
		return st, fmt.Errorf("docker: supervisor: %w", err)
	}

	if err := p.setUpUserNS(&st); err != nil {
		return st, err
	}

	start := time.Now()
	root, err := sandboxRoot(p.opts.Packages, st.supervisor)
	if err != nil {
		return st, fmt.Errorf("docker: assemble sandbox image: %w", err)
	}
	st.image, err = ensureImage(ctx, cli, sandboxRepo, "sandbox", root)
	if err != nil {
		return st, fmt.Errorf("docker: %w", err)
	}
	st.imageTime = time.Since(start)
	p.log.Info("docker up", "engine", st.version, "api", st.apiVersion, "image", st.image.Ref,
		"image_id", st.image.ID, "built", st.image.Built, "image_bytes", st.image.SizeBytes, "took", st.imageTime)

	// Old sandbox images (the host's packages changed) and what crashed
	// owners left behind go now; neither is worth failing Up for.
	if err := pruneImages(ctx, cli, "sandbox", st.image.ID); err != nil {
		p.log.Warn("docker: prune old sandbox images", "err", err)
	}
	// Owners are pids of this host: only a local engine's can be checked.
	if strings.HasPrefix(p.opts.Host, "unix://") {
		if err := removeOrphans(ctx, cli); err != nil {
			p.log.Warn("docker: remove leftovers of dead owners", "err", err)
		}
		if err := dropOrphanClones(); err != nil {
			p.log.Warn("docker: remove id-mapped workspaces of dead owners", "err", err)
		}
	}
	return st, nil
}

// Down removes every container, volume and root-dir image this Platform
// created, keeps the sandbox image, and disconnects. Safe to call twice.
func (p *Platform) Down(ctx context.Context) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cli == nil {
		return nil
	}
	err := removeLabelled(ctx, p.cli, labelOwner+"="+p.owner)
	if err == nil {
		if perr := pruneImages(ctx, p.cli, "rootdir", ""); perr != nil {
			p.log.Warn("docker: remove root-dir images", "err", perr)
		}
	}
	if cerr := p.cli.Close(); err == nil {
		err = cerr
	}
	if p.state.userNS.ns != nil {
		p.state.userNS.ns.Close()
	}
	if p.egress != nil {
		err = errors.Join(err, p.egress.Close(ctx))
	}
	p.cli, p.state, p.egress, p.egressErr = nil, upState{}, nil, nil
	return err
}

// removeLabelled force-removes the containers and volumes that carry label
// ("key=value" or "key").
func removeLabelled(ctx context.Context, cli *client.Client, label string) error {
	f := filters.NewArgs(filters.Arg("label", label))
	cs, err := cli.ContainerList(ctx, container.ListOptions{All: true, Filters: f})
	if err != nil {
		return fmt.Errorf("docker: list containers %s: %w", label, err)
	}
	var errs []error
	for _, c := range cs {
		if err := cli.ContainerRemove(ctx, c.ID, container.RemoveOptions{Force: true, RemoveVolumes: true}); err != nil && !gone(err) {
			errs = append(errs, fmt.Errorf("docker: remove container %s: %w", c.ID[:12], err))
		}
	}
	vs, err := cli.VolumeList(ctx, volume.ListOptions{Filters: f})
	if err != nil {
		return errors.Join(append(errs, fmt.Errorf("docker: list volumes %s: %w", label, err))...)
	}
	for _, v := range vs.Volumes {
		if err := cli.VolumeRemove(ctx, v.Name, true); err != nil && !cerrdefs.IsNotFound(err) {
			errs = append(errs, fmt.Errorf("docker: remove volume %s: %w", v.Name, err))
		}
	}
	return errors.Join(errs...)
}

// removeOrphans removes containers and volumes of owners (processes in this
// PID namespace) that no longer exist: what a crashed run left behind.
// Owners in other namespaces sharing the engine are never judged.
func removeOrphans(ctx context.Context, cli *client.Client) error {
	ns := pidNamespace()
	if ns == "" {
		return nil // owners' pids cannot be checked
	}
	cs, err := cli.ContainerList(ctx, container.ListOptions{All: true, Filters: filters.NewArgs(
		filters.Arg("label", labelOwner), filters.Arg("label", labelPidNS+"="+ns))})
	if err != nil {
		return err
	}
	dead := map[string]bool{}
	for _, c := range cs {
		if owner := c.Labels[labelOwner]; ownerGone(owner) {
			dead[owner] = true
		}
	}
	var errs []error
	for owner := range dead {
		errs = append(errs, removeLabelled(ctx, cli, labelOwner+"="+owner))
	}
	return errors.Join(errs...)
}

// Leaks lists what this Platform left on the engine and the host: its
// containers and volumes, root-dir images, and per-exec cgroups. After Down
// it must be empty (platformtest checks).
func (p *Platform) Leaks(ctx context.Context) ([]string, error) {
	cli, err := client.NewClientWithOpts(client.WithHost(p.opts.Host), client.WithAPIVersionNegotiation())
	if err != nil {
		return nil, err
	}
	defer cli.Close()
	var out []string
	f := filters.NewArgs(filters.Arg("label", labelOwner+"="+p.owner))
	cs, err := cli.ContainerList(ctx, container.ListOptions{All: true, Filters: f})
	if err != nil {
		return nil, fmt.Errorf("docker: list containers: %w", err)
	}
	for _, c := range cs {
		out = append(out, "container "+c.ID[:12]+" "+strings.Join(c.Names, ","))
	}
	vs, err := cli.VolumeList(ctx, volume.ListOptions{Filters: f})
	if err != nil {
		return nil, fmt.Errorf("docker: list volumes: %w", err)
	}
	for _, v := range vs.Volumes {
		out = append(out, "volume "+v.Name)
	}
	imgs, err := cli.ImageList(ctx, image.ListOptions{All: true, Filters: filters.NewArgs(filters.Arg("label", labelImage+"=rootdir"))})
	if err != nil {
		return nil, fmt.Errorf("docker: list images: %w", err)
	}
	p.mu.Lock()
	for _, im := range imgs {
		// Root-dir images are named by content and may be another
		// owner's (a test binary running beside this one): only those
		// this Platform made count.
		if p.rootImages[im.ID] {
			out = append(out, "root-dir image "+im.ID)
		}
	}
	p.mu.Unlock()
	if p.cg != nil {
		p.mu.Lock()
		ids := slices.Collect(maps.Keys(p.containers))
		p.mu.Unlock()
		for _, id := range ids {
			for _, dir := range []string{p.cg.memory.Dir, p.cg.pids.Dir} {
				// The container's cgroup is below the mount, at a path
				// that depends on the engine's cgroup parent and driver.
				left, _ := filepath.Glob(filepath.Join(dir, "*", "*"+id+"*", execCgroupPrefix+"*"))
				for _, d := range left {
					out = append(out, "cgroup "+d)
				}
			}
		}
	}
	return out, nil
}

// pidNamespace names this process's PID namespace ("pid:[4026531836]"),
// or is "" when it cannot be read.
func pidNamespace() string {
	ns, err := os.Readlink("/proc/self/ns/pid")
	if err != nil {
		return ""
	}
	return ns
}

// Identity describes the engine and the sandbox image.
func (p *Platform) Identity(ctx context.Context) (platforms.Identity, error) {
	_, st, err := p.current()
	if err != nil {
		return platforms.Identity{}, err
	}
	return platforms.Identity{
		Platform:    p.Name(),
		Kernel:      st.info.kernel,
		CPUs:        st.info.cpus,
		MemoryBytes: st.info.memory,
		Runtime:     "docker " + st.version,
		Image:       st.image.ID,
		Details: fmt.Sprintf("api %s, storage %s, cgroup v%s, image %s (%d bytes), supervisor %s, per-exec limits: %s, seccomp: %s, user namespace: %s",
			st.apiVersion, st.info.driver, st.info.cgroup, st.image.Ref, st.image.SizeBytes, st.supervisor, p.limitsNote(), seccomp.Name, st.userNSName()),
	}, nil
}

// Isolation says what the engine's sandboxes get (platforms.Isolator).
func (p *Platform) Isolation(context.Context) (wire.Isolation, error) {
	_, st, err := p.current()
	if err != nil {
		return wire.Isolation{}, err
	}
	perExec := "cgroup v1 (the container's, and the exec's own when it sets one)"
	if p.cg == nil {
		perExec = "the container's cgroup only (per exec: none: " + p.noCg.Error() + ")"
	}
	iso := wire.Isolation{Platform: p.Name(), Seccomp: seccomp.Name + " (the supervisor's Docker profile; each command under the BPF filter)",
		Limits:   wire.IsolationLimits{Memory: perExec, Pids: perExec, CPU: "cgroup v1 of the exec's own", OpenFiles: "rlimit (RLIMIT_NOFILE)"},
		Network:  platforms.NetworkEgressIsolation,
		Egress:   p.egressDescription(),
		Boundary: "the host's kernel: a container with all capabilities dropped, a read-only root, no-new-privileges"}
	if p.cg == nil || p.cg.cpu.Dir == "" {
		iso.Limits.CPU = "none: an exec that asks for a CPU limit is refused"
	}
	if st.userNS.ns == nil {
		iso.NoUserNamespace = st.userNS.why + ": uid 0 without capabilities in the host's"
		iso.Seccomp = seccomp.Name + " (Docker profile)"
	} else {
		iso.UserNamespace = st.userNS.ids.String()
	}
	return iso, nil
}

// remapped tells whether the engine runs containers in a user namespace
// of its own (userns-remap, a setting of the whole daemon).
func (i identityInfo) remapped() bool {
	return slices.ContainsFunc(i.security, func(o string) bool { return strings.Contains(o, "name=userns") })
}

// userNSName says which user namespace commands run in.
func (st upState) userNSName() string {
	switch {
	case st.userNS.ns != nil:
		return fmt.Sprintf("uid_map %q: each exec's uid 0 is %d on the host, workspaces id-mapped", st.userNS.ids.String(), st.userNS.ids.Host)
	case st.info.remapped():
		return "the engine's userns-remap (every container's root is an unprivileged host uid)"
	}
	return "none (uid 0 without capabilities in the host's; " + st.userNS.why + ")"
}

func (p *Platform) limitsNote() string {
	if p.cg != nil {
		return "cgroup v1"
	}
	return "none (" + p.noCg.Error() + ")"
}

// ImageID is the sandbox image's id (sha256:...); it needs Up.
func (p *Platform) ImageID() (string, error) {
	_, st, err := p.current()
	return st.image.ID, err
}

func (p *Platform) current() (*client.Client, upState, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cli == nil {
		return nil, upState{}, fmt.Errorf("docker: %w", platforms.ErrNotUp)
	}
	return p.cli, p.state, nil
}

// gone tells whether a removal failed only because the container is gone
// or already being removed (by another process cleaning up a dead
// owner's containers at the same time, say).
func gone(err error) bool {
	return cerrdefs.IsNotFound(err) || (cerrdefs.IsConflict(err) && strings.Contains(err.Error(), "already in progress"))
}

// ownerGone tells whether owner ("PID-random", see Platform.owner) names a
// process of this PID namespace that no longer exists.
func ownerGone(owner string) bool {
	pid, err := strconv.Atoi(strings.SplitN(owner, "-", 2)[0])
	if err != nil || pid <= 0 {
		return false
	}
	_, err = os.Stat("/proc/" + strconv.Itoa(pid))
	return errors.Is(err, os.ErrNotExist)
}
