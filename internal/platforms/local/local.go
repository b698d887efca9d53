package local

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"runtime"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"layerfs.dev/layerfs/internal/egress"
	"layerfs.dev/layerfs/internal/netpolicy"
	"layerfs.dev/layerfs/internal/platforms"
	"layerfs.dev/layerfs/internal/platforms/internal/userns"
	"layerfs.dev/layerfs/internal/platforms/local/sandbox"
	"layerfs.dev/layerfs/internal/portfwd"
	"layerfs.dev/layerfs/internal/seccomp"
	"layerfs.dev/layerfs/wire"
)

// probeTimeout bounds Up's trial sandbox.
const probeTimeout = 10 * time.Second

// Options configures a Platform.
type Options struct {
	// Exe is the binary re-executed as the sandbox init (see
	// sandbox.Launcher.Exe); empty means this binary.
	Exe string
	// NoCgroups enforces limits with rlimits only.
	NoCgroups bool
	// Warm is how many sandbox inits are kept started ahead, taking the
	// process start and the root's construction off the latency of execs
	// without network (see sandbox.Launcher.Warm): 0 means DefaultWarm, a
	// negative number none.
	Warm int
	// NoSyscallFilter runs commands without the seccomp filter
	// (internal/seccomp). It exists to measure what the filter costs;
	// Identity says when it is off.
	NoSyscallFilter bool
	// UserNamespace is the host ids a sandbox's ids 0 to Size-1 map to;
	// nil means DefaultIDRange: the first subordinate range of the user
	// "layerfs" in /etc/subuid and /etc/subgid when both give it the
	// same one, else sandbox.DefaultIDRange.
	UserNamespace *sandbox.IDRange
	// NoUserNamespace runs commands in the host's user namespace (uid 0
	// without capabilities), as before user namespaces. It exists to
	// measure what they cost; Identity says when it is off.
	NoUserNamespace bool
	// KeepIdle is how long a workspace's sandbox, kept after an exec for
	// the workspace's next one (sandbox.Session), waits for it before it
	// ends: 0 means sandbox.DefaultKeepIdle, a negative value that every
	// exec gets a sandbox of its own.
	KeepIdle time.Duration
	// Egress configures the egress of workspaces with network "egress"
	// (package egress): its Upstream resolver, its nft command, its Tag.
	// A platform whose egress cannot start (no nftables) is up without it:
	// Isolation says why, and the mode is refused.
	Egress egress.Config
	Logger *slog.Logger
}

// Platform runs sandboxes on this host. Its lifecycle is the one of
// platforms.Platform: New -> Up -> Attach/Exec ... -> Down.
type Platform struct {
	opts     Options
	launcher *sandbox.Launcher // replaced by Up after a Down
	log      *slog.Logger
	// filter is the compiled seccomp program every exec loads; filterErr
	// is why it could not be compiled (Up fails with it).
	filter    [][]byte
	filterErr error

	mu        sync.Mutex
	up        bool
	down      bool // the launcher was closed by Down
	sandboxes map[*Sandbox]struct{}
	egress    *egress.Manager // nil: egressErr says why
	egressErr error
}

func (p *Platform) current() *sandbox.Launcher {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.launcher
}

var (
	_ platforms.Platform    = (*Platform)(nil)
	_ platforms.SandboxHost = (*Platform)(nil)
	_ platforms.IDMapper    = (*Platform)(nil)
	_ platforms.Isolator    = (*Platform)(nil)
	_ platforms.PortDialer  = (*Sandbox)(nil)
)

// New returns a platform that is not up yet.
func New(o Options) *Platform {
	log := o.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	p := &Platform{opts: o, log: log, sandboxes: map[*Sandbox]struct{}{}}
	if !o.NoSyscallFilter {
		p.filter, p.filterErr = seccomp.BPF()
	}
	p.launcher = p.newLauncher()
	return p
}

// DefaultWarm is how many inits a platform keeps started ahead unless
// Options.Warm says otherwise: enough for an exec and the one after it
// while the first replacement starts.
const DefaultWarm = 2

func (p *Platform) newLauncher() *sandbox.Launcher {
	warm := p.opts.Warm
	switch {
	case warm == 0:
		warm = DefaultWarm
	case warm < 0:
		warm = 0
	}
	var ids *sandbox.IDRange
	if !p.opts.NoUserNamespace {
		ids = p.opts.UserNamespace
		if ids == nil {
			r := DefaultIDRange(p.log)
			ids = &r
		}
	}
	return &sandbox.Launcher{Exe: p.opts.Exe, Logger: p.log, NoCgroups: p.opts.NoCgroups, Warm: warm,
		SyscallFilter: p.filter, UserNamespace: ids, KeepIdle: p.opts.KeepIdle}
}

// Name is "local".
func (p *Platform) Name() string { return "local" }

// Features: host paths, the host network on request, and memory and pids
// limits where this host has the cgroup controllers for them.
func (p *Platform) Features() platforms.Features {
	l := p.current()
	mem, pids := l.Limits()
	p.mu.Lock()
	eg := p.egress != nil
	p.mu.Unlock()
	return platforms.Features{HostMounts: true, Network: true, Egress: eg, MemoryLimit: mem, PidsLimit: pids,
		CPULimit: l.CPULimit(), OpenFilesLimit: true, Terminal: true, Ports: true}
}

// Up checks that this host can run sandboxes by running `true` in one.
func (p *Platform) Up(ctx context.Context) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.up {
		return nil
	}
	if p.down {
		p.launcher, p.down = p.newLauncher(), false
	}
	if os.Geteuid() != 0 {
		return fmt.Errorf("local: %w: namespace sandboxes need root", platforms.ErrUnavailable)
	}
	if p.filterErr != nil {
		return fmt.Errorf("local: %w: %w", platforms.ErrUnavailable, p.filterErr)
	}
	// Fail closed: sandboxes asked to have a user namespace run in one or
	// not at all.
	if _, err := p.launcher.UserNS(); err != nil && !p.opts.NoUserNamespace {
		return fmt.Errorf("local: %w: %w", platforms.ErrUnavailable, err)
	}
	// Exec cgroups a crashed daemon left behind: empty ones go now.
	if removed, err := p.launcher.RemoveStale(time.Minute); len(removed) > 0 || err != nil {
		p.log.Info("stale sandbox cgroups", "removed", len(removed), "err", err)
	}
	dir, err := os.MkdirTemp("", "layerfs-probe-")
	if err != nil {
		return fmt.Errorf("local: probe: %w", err)
	}
	defer os.RemoveAll(dir)
	ctx, cancel := context.WithTimeout(ctx, probeTimeout)
	defer cancel()
	var stderr strings.Builder
	res, err := p.launcher.Run(ctx, sandbox.Config{Workspace: dir, Spec: platforms.ExecSpec{
		Argv: []string{"true"}, Timeout: probeTimeout / 2,
	}}, io.Discard, &stderr)
	if err == nil && res.ExitCode != 0 {
		err = fmt.Errorf("true exited %d: %s", res.ExitCode, strings.TrimSpace(stderr.String()))
	}
	if err != nil {
		if ctx.Err() != nil {
			err = fmt.Errorf("%w (does the binary call sandbox.InitMain first thing in main?)", err)
		}
		return fmt.Errorf("local: %w: trial sandbox: %w", platforms.ErrUnavailable, err)
	}
	p.up = true
	p.startEgress(ctx)
	p.log.Debug("local platform up", "launch", res.Launch)
	return nil
}

// startEgress starts the platform's egress, or records why it cannot.
// p.mu is held.
func (p *Platform) startEgress(ctx context.Context) {
	cfg := p.opts.Egress
	if cfg.Logger == nil {
		cfg.Logger = p.log
	}
	m, err := egress.New(cfg)
	if err == nil {
		err = m.Start(ctx)
	}
	if err != nil {
		p.egress, p.egressErr = nil, fmt.Errorf("local: %w", err)
		p.log.Warn("egress unavailable: workspaces with network egress are refused", "err", err)
		return
	}
	p.egress, p.egressErr = m, nil
}

// egressManager is the platform's egress, or why there is none.
func (p *Platform) egressManager() (*egress.Manager, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.egress == nil {
		if p.egressErr == nil {
			return nil, fmt.Errorf("local: egress: %w", platforms.ErrNotUp)
		}
		return nil, p.egressErr
	}
	return p.egress, nil
}

// EgressStats are the platform's egress decisions and bytes, for
// /metrics; ok is false without egress.
func (p *Platform) EgressStats() (s egress.Stats, ok bool) {
	m, err := p.egressManager()
	if err != nil {
		return s, false
	}
	return m.Stats(), true
}

// Down cancels every running exec, waits for them and detaches every
// workspace. It can be called more than once.
func (p *Platform) Down(ctx context.Context) error {
	p.mu.Lock()
	p.up, p.down = false, true
	l := p.launcher
	eg := p.egress
	p.egress, p.egressErr = nil, nil
	open := make([]*Sandbox, 0, len(p.sandboxes))
	for s := range p.sandboxes {
		open = append(open, s)
	}
	p.mu.Unlock()
	var errs []error
	for _, s := range open {
		errs = append(errs, s.Close(ctx))
	}
	errs = append(errs, l.Close(ctx))
	if eg != nil {
		errs = append(errs, eg.Close(ctx))
	}
	return errors.Join(errs...)
}

// Identity describes this host.
func (p *Platform) Identity(ctx context.Context) (platforms.Identity, error) {
	p.mu.Lock()
	up := p.up
	p.mu.Unlock()
	if !up {
		return platforms.Identity{}, fmt.Errorf("local: identity: %w", platforms.ErrNotUp)
	}
	var u unix.Utsname
	if err := unix.Uname(&u); err != nil {
		return platforms.Identity{}, fmt.Errorf("local: uname: %w", err)
	}
	var si unix.Sysinfo_t
	if err := unix.Sysinfo(&si); err != nil {
		return platforms.Identity{}, fmt.Errorf("local: sysinfo: %w", err)
	}
	mem, pids := p.current().Limits()
	return platforms.Identity{
		Platform:    p.Name(),
		Kernel:      unix.ByteSliceToString(u.Release[:]),
		CPUs:        runtime.NumCPU(),
		MemoryBytes: int64(si.Totalram) * int64(si.Unit),
		Runtime:     "layerfs-ns " + runtime.Version(),
		Details: fmt.Sprintf("cgroup limits: memory %v, pids %v, cpu %v; seccomp: %s; user namespace: %s",
			mem, pids, p.current().CPULimit(), p.filterName(), p.userNSName()),
	}, nil
}

// userNSName says which user namespace execs run in.
func (p *Platform) userNSName() string {
	r, err := p.current().UserNS()
	if err != nil {
		return "none (uid 0 without capabilities in the host's; " + p.noUserNS(err) + ")"
	}
	return fmt.Sprintf("uid_map %q: uid 0 inside is %d on the host, workspaces id-mapped (overlay: its layers)", r.String(), r.Host)
}

// noUserNS says why execs run in the host's user namespace, given UserNS's
// error.
func (p *Platform) noUserNS(err error) string {
	if p.opts.NoUserNamespace {
		return "turned off (layerfsd serve --no-user-namespace)"
	}
	return err.Error()
}

// Isolation says what this host's sandboxes get (platforms.Isolator).
func (p *Platform) Isolation(context.Context) (wire.Isolation, error) {
	l := p.current()
	iso := wire.Isolation{Platform: p.Name(), Seccomp: p.filterName(), Limits: l.Enforcement(),
		Network:  platforms.NetworkEgressIsolation,
		Boundary: "the host's kernel: fresh namespaces, a read-only runtime, no capabilities over the host"}
	r, err := l.UserNS()
	switch {
	case p.opts.NoUserNamespace:
		iso.NoUserNamespace = p.noUserNS(err) + ": uid 0 without capabilities in the host's"
	case err != nil:
		return wire.Isolation{}, fmt.Errorf("local: %w", err)
	default:
		iso.UserNamespace = r.String()
	}
	if m, err := p.egressManager(); err != nil {
		iso.Egress = "unavailable: " + err.Error()
	} else {
		iso.Egress = m.Describe()
	}
	return iso, nil
}

// IDMap is the launcher's user namespace, for workspaces mounted over
// id-mapped layers (platforms.Workspace.IDMapped).
func (p *Platform) IDMap() (*os.File, uint32, uint32, error) {
	f, r, err := p.current().IDMap()
	if err != nil {
		return nil, 0, 0, fmt.Errorf("local: %w", err)
	}
	return f, r.Host, r.Size, nil
}

// filterName says which syscall filter execs run under.
func (p *Platform) filterName() string {
	if p.filter == nil {
		return "off (NoSyscallFilter)"
	}
	n := 0
	for _, prog := range p.filter {
		n += len(prog) / 8
	}
	return fmt.Sprintf("%s (%d programs, %d instructions)", seccomp.Name, len(p.filter), n)
}

// Leaks lists what execs left on this host: sandbox cgroups and inits that
// should be gone. Empty when no exec is running means clean.
func (p *Platform) Leaks(ctx context.Context) ([]string, error) {
	return p.current().Leaks(ctx)
}

// Attach makes w.HostPath the /workspace of the returned Sandbox's execs.
// The sandbox outlives the call: its context is its own, not the caller's.
func (p *Platform) Attach(_ context.Context, w platforms.Workspace) (platforms.Sandbox, error) {
	if err := w.Validate(); err != nil {
		return nil, fmt.Errorf("local: attach: %w", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.up {
		cancel()
		return nil, fmt.Errorf("local: attach %s: %w", w.ID, platforms.ErrNotUp)
	}
	s := &Sandbox{p: p, launcher: p.launcher, session: p.launcher.NewSession(), w: w, ctx: ctx, cancel: cancel,
		mode: wire.NetworkNone, events: w.NetEvents}
	p.mu.Unlock()
	err := s.SetNetwork(ctx, w.Mode(), w.Egress)
	p.mu.Lock()
	if err != nil {
		cancel()
		_ = s.session.Close(context.Background())
		return nil, fmt.Errorf("local: attach %s: %w", w.ID, err)
	}
	p.sandboxes[s] = struct{}{}
	return s, nil
}

// Sandbox runs the execs of one attached workspace, each in a sandbox of
// its own: the sandbox of an exec that ended cleanly, made ready again,
// serves the workspace's next (sandbox.Session).
type Sandbox struct {
	p        *Platform
	launcher *sandbox.Launcher
	session  *sandbox.Session
	w        platforms.Workspace

	// ctx ends when the sandbox is closed; it cancels running execs.
	ctx    context.Context
	cancel context.CancelFunc

	mu      sync.Mutex
	closed  bool
	running sync.WaitGroup

	// The workspace's network now: its mode, its egress (made at the
	// first change to egress, kept until Close) and who sees its
	// decisions.
	netMu  sync.Mutex
	mode   string
	pol    *netpolicy.Policy // egress's rules (made into enet's policy)
	enet   *egress.Net
	events func(wire.NetEvent)
}

// Exec runs spec in a fresh sandbox on the workspace.
func (s *Sandbox) Exec(ctx context.Context, spec platforms.ExecSpec, stdout, stderr io.Writer) (platforms.ExecResult, error) {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return platforms.ExecResult{}, fmt.Errorf("local: exec in %s: %w", s.w.ID, platforms.ErrClosed)
	}
	s.running.Add(1)
	s.mu.Unlock()
	defer s.running.Done()

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stop := context.AfterFunc(s.ctx, cancel)
	defer stop()
	cfg := sandbox.Config{Workspace: s.w.HostPath, RootDir: s.w.RootDir, RootWritable: s.w.RootWritable, IDMapped: s.w.IDMapped, Spec: spec}
	mode, err := s.network(&cfg)
	if err != nil {
		return platforms.ExecResult{}, err
	}
	res, err := s.session.Run(ctx, cfg, stdout, stderr)
	if err == nil && res.Network == nil {
		res.Network = &wire.NetUsage{Mode: mode}
	}
	if err != nil {
		if s.ctx.Err() != nil {
			err = fmt.Errorf("%w: %w", platforms.ErrClosed, err)
		}
		return res, fmt.Errorf("local: exec in %s: %w", s.w.ID, err)
	}
	if s.p.opts.NoUserNamespace {
		res.UserNamespace = "none: " + s.p.noUserNS(nil)
	}
	return res, nil
}

var _ platforms.ServiceHost = (*Sandbox)(nil)

// StartService starts spec as a service in the workspace's sandbox
// (sandbox.Session.Start): the sandbox its execs run in from then on,
// while any service runs.
func (s *Sandbox) StartService(ctx context.Context, spec platforms.ExecSpec, stdout, stderr io.Writer) (platforms.Service, error) {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil, fmt.Errorf("local: start a service in %s: %w", s.w.ID, platforms.ErrClosed)
	}
	s.running.Add(1)
	s.mu.Unlock()
	defer s.running.Done()
	sv, err := s.session.Start(ctx, sandbox.Config{
		Workspace: s.w.HostPath, RootDir: s.w.RootDir, RootWritable: s.w.RootWritable, Network: s.w.Network, IDMapped: s.w.IDMapped, Spec: spec,
	}, stdout, stderr)
	if err != nil {
		return nil, fmt.Errorf("local: start a service in %s: %w", s.w.ID, err)
	}
	return sv, nil
}

// DialPort connects to port in the network namespace of the workspace's
// sandbox (platforms.PortDialer): that of each init that runs one of its
// execs now, the newest first, until one answers. Nothing listens while
// no exec runs: an exec's processes all end with it.
func (s *Sandbox) DialPort(ctx context.Context, port int) (net.Conn, error) {
	if err := portfwd.CheckPort(port); err != nil {
		return nil, err
	}
	s.mu.Lock()
	closed := s.closed
	s.mu.Unlock()
	switch {
	case closed:
		return nil, fmt.Errorf("local: port %d of %s: %w", port, s.w.ID, platforms.ErrClosed)
	case s.w.Network:
		return nil, fmt.Errorf("local: port %d of %s: %w", port, s.w.ID, platforms.ErrHostNetwork)
	}
	nss, err := s.session.NetNamespaces()
	if err != nil {
		return nil, fmt.Errorf("local: port %d of %s: %w", port, s.w.ID, err)
	}
	defer func() {
		for _, ns := range nss {
			ns.Close()
		}
	}()
	if len(nss) == 0 {
		return nil, fmt.Errorf("%w: port %d of workspace %s: nothing runs in its sandbox", portfwd.ErrRefused, port, s.w.ID)
	}
	for _, ns := range nss {
		c, err := portfwd.Dial(ctx, ns, port)
		if err == nil {
			return c, nil
		}
		if !errors.Is(err, portfwd.ErrRefused) {
			return nil, fmt.Errorf("local: port %d of %s: %w", port, s.w.ID, err)
		}
	}
	return nil, fmt.Errorf("%w: port %d of workspace %s", portfwd.ErrRefused, port, s.w.ID)
}

// Close cancels the workspace's running execs and waits until their
// processes are gone (or ctx ends). It can be called more than once.
func (s *Sandbox) Close(ctx context.Context) error {
	s.mu.Lock()
	s.closed = true
	s.mu.Unlock()
	s.cancel()
	done := make(chan struct{})
	go func() { s.running.Wait(); close(done) }()
	select {
	case <-done:
	case <-ctx.Done():
		return fmt.Errorf("local: close %s: %w", s.w.ID, ctx.Err())
	}
	// The inits' namespaces hold the workspace until they are reaped.
	if err := s.session.Close(ctx); err != nil {
		return fmt.Errorf("local: close %s: %w", s.w.ID, err)
	}
	s.netMu.Lock()
	enet := s.enet
	s.enet = nil
	s.netMu.Unlock()
	if enet != nil {
		if err := enet.Close(); err != nil {
			return fmt.Errorf("local: close %s: %w", s.w.ID, err)
		}
	}
	s.p.mu.Lock()
	delete(s.p.sandboxes, s)
	s.p.mu.Unlock()
	return nil
}

// DefaultIDRange is the user namespace mapping of a platform whose Options
// name none (userns.DefaultRange: the subordinate ids of the user
// "layerfs", else sandbox.DefaultIDRange).
func DefaultIDRange(log *slog.Logger) sandbox.IDRange { return userns.DefaultRange(log) }
