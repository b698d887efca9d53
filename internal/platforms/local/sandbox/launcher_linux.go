package sandbox

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"layerfs.dev/layerfs/internal/platforms"
	"layerfs.dev/layerfs/internal/platforms/internal/userns"
	"layerfs.dev/layerfs/wire"
)

// killGrace is how long past its timeout the launcher waits for the init
// to report before it kills the init itself.
const killGrace = 5 * time.Second

// Launcher starts sandboxes. The zero value is ready to use; a Launcher is
// safe for concurrent use.
type Launcher struct {
	// Exe is the binary re-executed as the sandbox init; it must call
	// InitMain first thing. Empty means this binary (/proc/self/exe, which
	// stays valid even if the file is replaced on disk).
	Exe string
	// Logger receives setup failures and cleanup problems; nil is silent.
	Logger *slog.Logger
	// NoCgroups makes the launcher use rlimits even where cgroups exist.
	NoCgroups bool
	// SyscallFilter is the seccomp programs every command runs under, as
	// internal/seccomp.BPF compiles them; nil runs commands without any.
	// It is compiled by the launcher's user rather than by the init,
	// because the compiler's package initialisation alone would add
	// about 0.3 ms to every exec. platforms/local always sets it.
	SyscallFilter [][]byte
	// UserNamespace, when set, runs every sandbox in a user namespace with
	// this mapping (its root is Host on the host), made once by the
	// launcher's spawner (spawner_linux.go), and id-maps its workspace and
	// runtime with it, so that ids on disk are the ids inside. Where that
	// cannot be done (no namespace can be made, a workspace whose file
	// system cannot be id-mapped) the exec fails with ErrNoUserNamespace:
	// it never runs in the host's user namespace instead. UserNS tells for
	// the whole launcher. platforms/local sets it unless told not to.
	UserNamespace *IDRange

	once      sync.Once
	userNS    *os.File // a namespace with UserNamespace's mapping: the first spawner's
	userNSErr error    // why there is none
	spawner   *spawner // nil: none (yet, or again once Close has stopped it)
	cg        *cgroupDirs
	prefix    string // names this launcher's cgroups: layerfs-<random>-<n>
	seq       atomic.Uint64

	mu      sync.Mutex
	running map[int]bool // pids of live inits
	// reaping holds, for each exec that returned, a channel closed once
	// its init is reaped and its cgroup removed.
	reaping map[chan struct{}]bool

	// Warm is how many inits the launcher keeps started ahead: each is a
	// fresh process in fresh PID, UTS, IPC and network namespaces, blocked
	// on reading its config (its mount namespace is made once the config
	// arrives, so it sees the host's mounts of that moment). An exec
	// without network takes one instead of starting its own, which moves
	// the process start off its latency; execs with network, and execs
	// that find the pool empty, start their init on demand. Set it before
	// the first Run; Close kills the waiting ones.
	Warm     int
	pool     chan *initProc
	warmPids map[int]bool // pids of the inits in pool
	warming  int          // inits being started for the pool
	// lowersNice: warmOne may run at warmNice and come back (canLowerNice).
	lowersNice bool
	refills    sync.WaitGroup // goroutines starting them
	closed     bool           // Close was called: no more warming

	// trace, when set, gets every exec's phase marks and the CPU time of
	// the init and everything it reaped (tests).
	trace func(marks []mark, cpu time.Duration)
}

func (l *Launcher) init() {
	l.once.Do(func() {
		var b [6]byte
		_, _ = rand.Read(b[:])
		l.prefix = cgroupPrefix + strconv.Itoa(os.Getpid()) + "-" + hex.EncodeToString(b[:]) + "-"
		l.running = map[int]bool{}
		l.reaping = map[chan struct{}]bool{}
		l.pool = make(chan *initProc, max(l.Warm, 0))
		l.lowersNice = l.Warm > 0 && canLowerNice()
		l.warmPids = map[int]bool{}
		if l.UserNamespace != nil {
			// The first spawner's namespace is kept for the launcher's life
			// (IDMap hands it out), also when the spawner is replaced: the
			// mapping is the same.
			l.spawner, l.userNSErr = startSpawner(l.exe(), *l.UserNamespace)
			if l.userNSErr == nil {
				if l.userNS, l.userNSErr = l.spawner.userNS(); l.userNSErr != nil {
					l.spawner.close()
					l.spawner = nil
				}
			}
			if l.userNSErr != nil {
				l.logger().Error("no user namespace for sandboxes: every exec is refused", "err", l.userNSErr)
			}
		}
		if l.NoCgroups {
			l.cg = &cgroupDirs{}
			return
		}
		cg, err := detectCgroups()
		if err != nil {
			l.logger().Warn("no cgroups, falling back to rlimits", "err", err)
			cg = &cgroupDirs{}
		}
		l.cg = cg
	})
}

// spawnerNow is the launcher's spawner, started again if Close stopped it
// or it died (its inits died with it).
func (l *Launcher) spawnerNow() (*spawner, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.spawner != nil && l.spawner.gone() {
		l.logger().Warn("sandbox spawner died, starting another")
		l.spawner.close()
		l.spawner = nil
	}
	if l.spawner == nil {
		s, err := startSpawner(l.exe(), *l.UserNamespace)
		if err != nil {
			return nil, err
		}
		l.spawner = s
	}
	return l.spawner, nil
}

// stopSpawnerIfIdle stops the spawner once the launcher is closed and no
// exec is running: its inits would die with it. l.mu is held.
func (l *Launcher) stopSpawnerIfIdle() {
	if l.closed && l.spawner != nil && len(l.running) == 0 {
		l.spawner.close()
		l.spawner = nil
	}
}

// exe is the binary re-executed as the init.
func (l *Launcher) exe() string {
	if l.Exe == "" {
		return "/proc/self/exe"
	}
	return l.Exe
}

// UserNS tells whether commands run in a user namespace of their own, with
// which mapping, or why not: errNotConfigured without
// Launcher.UserNamespace (commands run in the host's), else an
// ErrNoUserNamespace that says why the launcher cannot make one (every
// exec is refused).
func (l *Launcher) UserNS() (IDRange, error) {
	l.init()
	switch {
	case l.UserNamespace == nil:
		return IDRange{}, errNotConfigured
	case l.userNSErr != nil:
		return IDRange{}, fmt.Errorf("%w: %w (%s; or run sandboxes in the host's user namespace, uid 0 without capabilities, "+
			"with layerfsd serve --no-user-namespace)", ErrNoUserNamespace, l.userNSErr, userns.Remedy(l.userNSErr))
	}
	return *l.UserNamespace, nil
}

// errNotConfigured: the launcher was given no user namespace.
var errNotConfigured = errors.New("not configured")

// IDMap returns the launcher's user namespace (an open /proc/PID/ns/user
// with UserNamespace's mapping, owned by the launcher: the caller must not
// close it) and its mapping, for mounting a workspace whose own file system
// cannot be id-mapped over id-mapped layers (Config.IDMapped); or why there
// is none.
func (l *Launcher) IDMap() (*os.File, IDRange, error) {
	r, err := l.UserNS()
	if err != nil {
		return nil, IDRange{}, err
	}
	return l.userNS, r, nil
}

func (l *Launcher) logger() *slog.Logger {
	if l.Logger == nil {
		return slog.New(slog.DiscardHandler)
	}
	return l.Logger
}

func (l *Launcher) cgroupName() string {
	return l.prefix + strconv.FormatUint(l.seq.Add(1), 10)
}

// Limits tells which limits this launcher enforces with cgroups (the rest
// fall back to rlimits, or to nothing).
func (l *Launcher) Limits() (memory, pids bool) {
	l.init()
	return l.cg.hasMemory(), l.cg.hasPids()
}

// Enforcement says how the launcher enforces each limit of an ExecSpec.
func (l *Launcher) Enforcement() wire.IsolationLimits {
	l.init()
	mem, pids, cpu := l.cg.enforcement()
	return wire.IsolationLimits{Memory: mem, Pids: pids, CPU: cpu, OpenFiles: "rlimit (RLIMIT_NOFILE)"}
}

// CPULimit tells whether this launcher enforces ExecSpec.MilliCPUs (a cpu
// cgroup); there is no rlimit to fall back to.
func (l *Launcher) CPULimit() bool {
	l.init()
	return l.cg.hasCPU()
}

// Run runs one exec in a fresh sandbox and returns when the command and
// every process it started are gone. Output past the spec's limit is
// discarded and reported in the result. An error means the exec could not
// be run as asked (bad config, setup failure, canceled context); a command
// that fails is a result with a non-zero ExitCode and no error.
func (l *Launcher) Run(ctx context.Context, cfg Config, stdout, stderr io.Writer) (platforms.ExecResult, error) {
	t0 := time.Now()
	lm := marks{}
	lm.add("run")
	l.init()
	var res platforms.ExecResult
	if err := cfg.validate(); err != nil {
		return res, err
	}
	if err := ctx.Err(); err != nil {
		return res, fmt.Errorf("sandbox exec: %w", err)
	}
	if _, err := l.UserNS(); err != nil && !errors.Is(err, errNotConfigured) {
		return res, err
	}
	ic, err := l.initConfig(cfg)
	if err != nil {
		return res, err
	}
	spec := cfg.Spec

	if !l.cg.hasMemory() && spec.MemoryBytes > 0 {
		ic.RlimitAS = uint64(spec.MemoryBytes)
	}
	if spec.MilliCPUs > 0 && !l.cg.hasCPU() {
		return res, fmt.Errorf("%w: a CPU limit needs a cpu cgroup, which this host does not give the launcher", ErrInvalidConfig)
	}
	ic.RlimitNofile = uint64(spec.OpenFiles)
	// RLIMIT_NPROC counts every process of the uid on the host, so it is
	// only a stand-in for the pids cgroup when the command is not root.
	if !l.cg.hasPids() && ic.UID != 0 {
		ic.RlimitNproc = uint64(ic.pids)
	}

	limit := spec.OutputLimit
	if limit == 0 {
		limit = platforms.DefaultOutputLimit
	}
	outW := &capWriter{w: stdout, limit: limit}
	errW := &capWriter{w: stderr, limit: limit}
	if sameWriter(stdout, stderr) {
		// As os/exec does: one writer for both streams gets one Write at
		// a time.
		mu := &sync.Mutex{}
		outW.mu, errW.mu = mu, mu
	}

	// The workspace's clone, id-mapped for the launcher's user namespace
	// where the exec runs in it.
	ws, inNS, err := l.cloneWorkspace(cfg, ic)
	if err != nil {
		return res, err
	}
	// release closes ws and the init's pipes and tops the warm pool up:
	// once the exec has returned, with its reaping (see settled below), or
	// at once when it returns before its init has reported.
	var p *pipes
	release := func() {
		unix.Close(ws)
		if p != nil {
			p.closeParent()
		}
		// Replacements for the warm pool start only now. Started when
		// the exec took its init, a replacement's start (its spawn and
		// runtime, before warmOne renices it) competed with the exec's
		// init and command for two CPUs: 0.6-0.9 ms of fixed overhead
		// after idle; started at the report, it competed with the
		// answer's way back.
		l.topUp()
	}
	settling := false
	defer func() {
		if !settling {
			release()
		}
	}()

	// A warm init (already in a cgroup of its own, its root prepared), else
	// one started now; a warm init found dead is replaced by a new one.
	var ip *initProc
	var cg *execCgroup
	var werr error
	if !cfg.Network && ic.RootDir == "" {
		if ip = l.take(); ip != nil {
			cg = ip.cg
			if werr = ip.send(spec.MemoryBytes, spec.MilliCPUs, ic, ws); werr != nil {
				l.logger().Warn("sandbox warm init unusable, starting another", "err", werr)
				ip.discard()
				ip, cg = nil, nil
			}
		}
	}
	if ip == nil {
		if l.cg.hasMemory() || l.cg.hasPids() || spec.MilliCPUs > 0 {
			cg, err = l.cg.create(l.cgroupName(), spec.MemoryBytes > 0, spec.MilliCPUs > 0)
			if err != nil {
				return res, fmt.Errorf("%w: %v", ErrSetup, err)
			}
		}
		ip, werr = l.spawn(cfg.Network, cg, spec.Stdin, ic.RootDir, inNS)
		if werr != nil {
			if cg != nil {
				_ = cg.remove()
			}
			return res, werr
		}
		werr = ip.send(spec.MemoryBytes, spec.MilliCPUs, ic, ws)
	}
	p = ip.p
	if ip.pooled {
		lm.add("warm")
	}
	lm.add("sent")
	pid := ip.pid
	l.track(pid, true)

	var killed atomic.Bool
	kill := func() { killed.Store(true); _ = ip.proc.kill() }
	stopCtx := context.AfterFunc(ctx, kill)
	backstop := time.AfterFunc(ic.Timeout+killGrace, kill)
	// reap waits for the init, then removes what the exec left on the host.
	// It runs in the background once the init has reported: by then the
	// command and every process of its namespace are gone and the init has
	// closed its stdio, so only its own exit and namespace teardown remain.
	var status unix.WaitStatus
	var initCPU time.Duration
	var waitErr error
	reap := func() {
		status, initCPU, waitErr = ip.proc.wait()
		stopCtx()
		backstop.Stop()
		if cg != nil {
			if err := cg.remove(); err != nil {
				l.logger().Warn("sandbox cgroup left behind", "err", err)
			}
		}
		l.track(pid, false)
	}

	outDone := p.copy(p.outR, outW)
	errDone := p.copy(p.errR, errW)
	if _, ok := spec.Stdin.(*os.File); !ok {
		if spec.Stdin == nil {
			p.inW.Close() // the command reads EOF at once, as from /dev/null
		} else {
			go func() {
				_, _ = io.Copy(p.inW, spec.Stdin) // ends with EPIPE once the sandbox is gone
				p.inW.Close()
			}()
		}
	}

	// The report is one write of one JSON value: it is read as soon as it
	// is whole, not at the EOF of the init's close or exit.
	var rep initReport
	reported := false
	if werr == nil {
		reported = json.NewDecoder(p.repR).Decode(&rep) == nil
	} else {
		kill()
	}
	lm.add("got")
	reaped, settled := make(chan struct{}), make(chan struct{})
	l.mu.Lock()
	l.reaping[settled] = true
	l.mu.Unlock()
	settling = true
	defer func() {
		go func() {
			<-reaped
			// Off the exec's path: closing the workspace's clone (a detached
			// mount tree) and six pipe and socket ends took 0.05 ms there.
			release()
			if l.trace != nil || l.logger().Enabled(context.Background(), slog.LevelDebug) {
				l.tracePhases(lm, rep.Marks, initCPU) // the init's CPU, known once it is reaped
			}
			l.mu.Lock()
			delete(l.reaping, settled)
			l.mu.Unlock()
			close(settled)
		}()
	}()
	if reported && rep.Error == "" && ctx.Err() == nil {
		go func() { reap(); close(reaped) }()
	} else {
		reap()
		close(reaped)
	}
	p.waitOutput(outDone, errDone)
	lm.add("output")

	switch {
	case werr != nil:
		return res, werr
	case ctx.Err() != nil:
		return res, fmt.Errorf("sandbox exec: %w", ctx.Err())
	case reported && rep.Error != "":
		l.logger().Warn("sandbox setup failed", "workspace", cfg.Workspace, "err", rep.Error)
		return res, fmt.Errorf("%w: %s", ErrSetup, rep.Error)
	case reported:
		res.ExitCode, res.Signal, res.TimedOut, res.Command = rep.ExitCode, rep.Signal, rep.TimedOut, rep.Command
		res.UserNamespace = "none: not configured"
		if inNS {
			res.UserNamespace = l.UserNamespace.String()
		}
	default:
		// The init died without a report: killed by the backstop, or by
		// the OOM killer of the exec's memory cgroup.
		res.TimedOut = killed.Load()
		res.ExitCode, res.Signal = 128+int(syscall.SIGKILL), unix.SignalName(syscall.SIGKILL)
		if waitErr == nil && status.Signaled() {
			res.ExitCode, res.Signal = 128+int(status.Signal()), unix.SignalName(status.Signal())
		}
		l.logger().Warn("sandbox init ended without a report", "workspace", cfg.Workspace, "status", status, "wait", waitErr)
	}
	res.OutputTruncated = outW.truncated || errW.truncated
	res.Wall = time.Since(t0)
	lm.add("done")

	res.Command = min(res.Command, res.Wall) // 0 when the command never ran
	res.Launch = res.Wall - res.Command
	if err := errors.Join(outW.err, errW.err); err != nil {
		return res, fmt.Errorf("sandbox output: %w", err)
	}
	return res, nil
}

// initConfig resolves a validated Config into what the init is sent.
func (l *Launcher) initConfig(cfg Config) (initConfigX, error) {
	s := cfg.Spec
	ws, err := realDir(cfg.Workspace)
	if err != nil {
		return initConfigX{}, fmt.Errorf("%w: workspace: %v", ErrInvalidConfig, err)
	}
	root := ""
	if cfg.RootDir != "" {
		if root, err = realDir(cfg.RootDir); err != nil {
			return initConfigX{}, fmt.Errorf("%w: root dir: %v", ErrInvalidConfig, err)
		}
	}
	if r := l.UserNamespace; l.userNS != nil && (uint64(s.UID) >= uint64(r.Size) || uint64(s.GID) >= uint64(r.Size)) {
		return initConfigX{}, fmt.Errorf("%w: uid %d or gid %d is outside the user namespace's %d ids", ErrInvalidConfig, s.UID, s.GID, r.Size)
	}
	dir, _ := cleanDir(s.Dir)
	timeout := s.Timeout
	if timeout == 0 {
		timeout = platforms.DefaultTimeout
	}
	pids := s.Pids
	if pids == 0 {
		pids = platforms.DefaultPids
	}
	host := s.Hostname
	if host == "" {
		host = DefaultHostname
	}
	return initConfigX{initConfig: initConfig{
		Workspace: ws, RootDir: root, Network: cfg.Network,
		Argv: s.Argv, Env: sandboxEnv(s.Env), Dir: dir, Timeout: timeout,
		UID: s.UID, GID: s.GID, Hostname: host, Seccomp: len(l.SyscallFilter) > 0,
	}, pids: pids}, nil
}

// cloneWorkspace clones the exec's workspace for its /workspace, id-mapped
// for the launcher's user namespace when it has one (inNS): a workspace
// that cannot be id-mapped then fails with ErrNoUserNamespace.
func (l *Launcher) cloneWorkspace(cfg Config, ic initConfigX) (ws int, inNS bool, err error) {
	idmap := -1
	switch {
	case l.userNS == nil: // no user namespace was asked for (UserNS)
	case cfg.IDMapped: // the workspace shows the namespace's ids already
		inNS = true
	default:
		inNS, idmap = true, int(l.userNS.Fd())
	}
	ws, err = cloneWorkspace(ic.Workspace, idmap)
	switch {
	case errors.Is(err, errNoIDMap):
		return -1, false, fmt.Errorf("%w: %s: %w (serve it over id-mapped layers, or from a file system that can be id-mapped; "+
			"or run sandboxes in the host's user namespace with layerfsd serve --no-user-namespace)", ErrNoUserNamespace, ic.Workspace, err)
	case err != nil:
		return -1, false, fmt.Errorf("%w: clone workspace %s: %w", ErrSetup, ic.Workspace, err)
	}
	return ws, inNS, nil
}

// initConfigX is the wire config plus what only the launcher needs.
type initConfigX struct {
	initConfig
	pids int
}

// MarshalJSON sends only the wire part.
func (x initConfigX) MarshalJSON() ([]byte, error) { return json.Marshal(x.initConfig) }

// realDir resolves symlinks in an absolute path and checks it is a
// directory: the init clones it without following symlinks.
func realDir(p string) (string, error) {
	r, err := filepath.EvalSymlinks(p)
	if err != nil {
		return "", err
	}
	st, err := os.Stat(r)
	if err != nil {
		return "", err
	}
	if !st.IsDir() {
		return "", fmt.Errorf("%s is not a directory", p)
	}
	return r, nil
}

func (l *Launcher) track(pid int, on bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if on {
		l.running[pid] = true
	} else {
		delete(l.running, pid)
		l.stopSpawnerIfIdle()
	}
}

// Settle waits until the inits of execs that have returned are reaped and
// their cgroups removed. Run returns as soon as the command's processes are
// gone; the init's own exit and the teardown of its namespaces finish in
// the background, off the exec's latency.
func (l *Launcher) Settle(ctx context.Context) error {
	l.init()
	l.mu.Lock()
	chans := make([]chan struct{}, 0, len(l.reaping))
	for c := range l.reaping {
		chans = append(chans, c)
	}
	l.mu.Unlock()
	for _, c := range chans {
		select {
		case <-c:
		case <-ctx.Done():
			return fmt.Errorf("sandbox settle: %w", ctx.Err())
		}
	}
	return nil
}

// Leaks lists what this launcher's past execs left behind on the host:
// cgroups that were not removed and inits still running. Empty while no
// exec is in flight means clean.
func (l *Launcher) Leaks(ctx context.Context) ([]string, error) {
	l.init()
	if err := l.Settle(ctx); err != nil {
		return nil, err
	}
	var out []string
	warm := map[string]bool{} // warm inits hold a cgroup of their own
	l.mu.Lock()
	for pid := range l.running {
		out = append(out, "sandbox init still running: pid "+strconv.Itoa(pid))
	}
	for pid := range l.warmPids {
		warm[strconv.Itoa(pid)] = true
	}
	l.mu.Unlock()
	for _, parent := range l.cg.parents() {
		ents, err := os.ReadDir(parent)
		if err != nil {
			return out, err
		}
		for _, e := range ents {
			if !e.IsDir() || !strings.HasPrefix(e.Name(), l.prefix) {
				continue
			}
			d := filepath.Join(parent, e.Name())
			b, _ := os.ReadFile(filepath.Join(d, "cgroup.procs"))
			if procs := strings.Fields(string(b)); len(procs) == 1 && warm[procs[0]] {
				continue
			}
			out = append(out, "sandbox cgroup left behind: "+d)
		}
	}
	sort.Strings(out)
	return out, nil
}

// cgroupPrefix starts the name of every exec cgroup; the owning process's
// pid follows ("layerfs-<pid>-<random>-<n>"), so that a later launcher can
// tell a dead owner's cgroups from those of launchers still running.
const cgroupPrefix = "layerfs-"

// RemoveStale removes exec cgroups that launchers of processes that died
// (a crashed daemon) left below this process's cgroups. The owner of each
// is named in it: a dead owner's cgroups go at once, and any process still
// in one is killed first (none should be: an init dies with its daemon, and
// its PID namespace with it). Cgroups without an owner's pid go only when
// empty and created more than olderThan ago, since another launcher may be
// between creating one and moving its init in.
func (l *Launcher) RemoveStale(olderThan time.Duration) (removed []string, err error) {
	l.init()
	var errs []error
	for _, parent := range l.cg.parents() {
		ents, err := os.ReadDir(parent)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		for _, e := range ents {
			if !e.IsDir() || !strings.HasPrefix(e.Name(), cgroupPrefix) {
				continue
			}
			d := filepath.Join(parent, e.Name())
			switch owner, ok := cgroupOwner(e.Name()); {
			case ok && processAlive(owner):
				continue
			case ok:
				if err := killCgroup(d); err != nil {
					errs = append(errs, err)
					continue
				}
			default:
				info, err := e.Info()
				if err != nil || time.Since(info.ModTime()) < olderThan {
					continue
				}
			}
			if err := unix.Rmdir(d); err != nil {
				errs = append(errs, fmt.Errorf("remove stale cgroup %s: %w", d, err))
				continue
			}
			removed = append(removed, d)
		}
	}
	return removed, errors.Join(errs...)
}

// cgroupOwner reads the owner's pid from an exec cgroup's name.
func cgroupOwner(name string) (int, bool) {
	pid, _, ok := strings.Cut(strings.TrimPrefix(name, cgroupPrefix), "-")
	n, err := strconv.Atoi(pid)
	return n, ok && err == nil && n > 0
}

// processAlive reports whether a process with this pid exists (a reused
// pid counts as alive: the cgroup then waits for a later launcher).
func processAlive(pid int) bool {
	err := unix.Kill(pid, 0)
	return err == nil || errors.Is(err, unix.EPERM)
}

// killCgroup kills every process in cgroup dir until it is empty.
func killCgroup(dir string) error {
	for range 50 {
		b, err := os.ReadFile(filepath.Join(dir, "cgroup.procs"))
		if err != nil {
			return fmt.Errorf("stale cgroup %s: %w", dir, err)
		}
		pids := strings.Fields(string(b))
		if len(pids) == 0 {
			return nil
		}
		for _, p := range pids {
			if pid, err := strconv.Atoi(p); err == nil {
				_ = unix.Kill(pid, unix.SIGKILL)
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	return fmt.Errorf("stale cgroup %s: processes survive SIGKILL", dir)
}

// capWriter passes the first limit bytes to w and drains the rest, so a
// chatty command never blocks on a full pipe. A failing w is remembered and
// the stream still drained.
type capWriter struct {
	w         io.Writer
	mu        *sync.Mutex // shared with the other stream's when w is the same
	limit, n  int64
	truncated bool
	err       error
}

func (c *capWriter) Write(p []byte) (int, error) {
	if c.mu != nil {
		c.mu.Lock()
		defer c.mu.Unlock()
	}
	keep := p
	if room := c.limit - c.n; int64(len(p)) > room {
		keep = p[:max(room, 0)]
		c.truncated = true
	}
	c.n += int64(len(keep))
	if len(keep) > 0 && c.w != nil && c.err == nil {
		if _, err := c.w.Write(keep); err != nil {
			c.err = err
		}
	}
	return len(p), nil
}

// tracePhases logs (at debug level) how long each phase of an exec took,
// merging the launcher's and the init's marks on their shared clock.
func (l *Launcher) tracePhases(launcher, init marks, cpu time.Duration) {
	all := append(slices.Clone(launcher), init...)
	slices.SortStableFunc(all, func(a, b mark) int { return cmp.Compare(a.NS, b.NS) })
	if l.trace != nil {
		l.trace(all, cpu)
	}
	if !l.logger().Enabled(context.Background(), slog.LevelDebug) {
		return
	}
	attrs := make([]any, 0, 2*len(all)+2)
	attrs = append(attrs, "init_cpu", cpu)
	for i := 1; i < len(all); i++ {
		attrs = append(attrs, all[i].Name, time.Duration(all[i].NS-all[i-1].NS))
	}
	l.logger().Debug("sandbox phases", attrs...)
}

// awaitExit returns once process pid (a child not yet reaped) has exited,
// waiting through the runtime's poller on a pidfd rather than in a
// blocking wait4: a goroutine blocked in a system call holds its P until
// sysmon takes it back, which after idle can take 10 ms, and meanwhile
// the goroutines that copy the exec's output to its end may have no P to
// run on (see package maxprocs). Where there is no pidfd it returns at
// once, and the caller's wait blocks as before.
func awaitExit(pid int) {
	fd, err := unix.PidfdOpen(pid, unix.PIDFD_NONBLOCK)
	if err != nil {
		return
	}
	f := os.NewFile(uintptr(fd), "pidfd")
	defer f.Close()
	rc, err := f.SyscallConn()
	if err != nil {
		return
	}
	_ = rc.Read(func(fd uintptr) bool {
		// A pidfd is readable once its process has exited.
		fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
		n, err := unix.Poll(fds, 0)
		return err != nil || (n == 1 && fds[0].Revents != 0)
	})
}

// pipes are the descriptors between the launcher and one init.
type pipes struct {
	cfgR, cfgW *os.File // config, to the init's fd 3
	repR, repW *os.File // report, from the init's fd 4
	outR, outW *os.File
	errR, errW *os.File
	inR, inW   *os.File
	// A socket the workspace's clone is sent on, to the init's fd 5; a
	// warm init says on it when it is ready.
	wsOurs, wsTheirs *os.File
}

func newPipes() (*pipes, error) {
	p := &pipes{}
	for _, pair := range []struct{ r, w **os.File }{
		{&p.cfgR, &p.cfgW}, {&p.repR, &p.repW}, {&p.outR, &p.outW}, {&p.errR, &p.errW}, {&p.inR, &p.inW},
	} {
		r, w, err := os.Pipe()
		if err != nil {
			p.closeChild()
			p.closeParent()
			return nil, fmt.Errorf("sandbox pipes: %w", err)
		}
		*pair.r, *pair.w = r, w
	}
	// Our end non-blocking, so that waiting for a warm init's word takes
	// no thread (see initProc.restoreWhenReady); the init's blocking.
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC|unix.SOCK_NONBLOCK, 0)
	if err == nil {
		if err = unix.SetNonblock(fds[1], false); err != nil {
			unix.Close(fds[0])
			unix.Close(fds[1])
		}
	}
	if err != nil {
		p.closeChild()
		p.closeParent()
		return nil, fmt.Errorf("sandbox socket: %w", err)
	}
	p.wsOurs, p.wsTheirs = os.NewFile(uintptr(fds[0]), "workspace"), os.NewFile(uintptr(fds[1]), "workspace")
	return p, nil
}

// closeChild closes the ends the init inherited.
func (p *pipes) closeChild() {
	for _, f := range []*os.File{p.cfgR, p.repW, p.outW, p.errW, p.inR, p.wsTheirs} {
		if f != nil {
			f.Close()
		}
	}
}

// closeParent closes the launcher's ends (closing twice is harmless).
func (p *pipes) closeParent() {
	for _, f := range []*os.File{p.cfgW, p.repR, p.outR, p.errR, p.inW, p.wsOurs} {
		if f != nil {
			f.Close()
		}
	}
}

// copy drains r into w until EOF and closes the returned channel.
func (p *pipes) copy(r *os.File, w io.Writer) <-chan struct{} {
	done := make(chan struct{})
	go func() {
		defer close(done)
		_, _ = io.Copy(w, r)
	}()
	return done
}

// outputGrace bounds the wait for output EOF after the init reported: only
// a descriptor smuggled out of the sandbox could keep a pipe open longer.
const outputGrace = 5 * time.Second

func (p *pipes) waitOutput(done ...<-chan struct{}) {
	t := time.NewTimer(outputGrace)
	defer t.Stop()
	for _, d := range done {
		select {
		case <-d:
		case <-t.C:
			p.outR.Close()
			p.errR.Close()
			<-d
		}
	}
}

// sameWriter reports whether a and b are the same comparable writer.
func sameWriter(a, b io.Writer) bool {
	if a == nil || b == nil {
		return false
	}
	ta, tb := reflect.TypeOf(a), reflect.TypeOf(b)
	return ta == tb && ta.Comparable() && a == b
}
