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
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
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
	// because the compiler's package initialisation would otherwise run
	// at every exec. platforms/local always sets it.
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

	devNull *os.File // an init's stdio between its execs

	mu      sync.Mutex
	running map[int]bool // pids of inits serving an exec or being reaped
	// reaping holds, for each exec that returned, a channel closed once
	// its init is reaped and its cgroup removed.
	reaping map[chan struct{}]bool
	// sessions are the open Sessions; kept the pids of the inits they
	// keep.
	sessions map[*Session]bool
	kept     map[int]bool

	// KeepIdle is how long a Session keeps an init that has served an exec
	// and waits for the next: 0 means DefaultKeepIdle, a negative value
	// not at all. Set it before the first Run.
	KeepIdle time.Duration

	// Warm is how many inits the launcher keeps started ahead: each is a
	// fresh process in fresh PID, UTS, IPC and network namespaces, its
	// root built, waiting for an exec (the workspace's clone comes with
	// the exec, so it may be mounted after the init started). An exec
	// without network or image takes one instead of starting its own,
	// which moves the process start off its latency; execs with network,
	// and execs that find the pool empty, start their init on demand. Set
	// it before the first Run; Close kills the waiting ones.
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
		l.sessions = map[*Session]bool{}
		l.kept = map[int]bool{}
		if f, err := os.Open(os.DevNull); err == nil {
			l.devNull = f
		} else {
			l.logger().Error("sandbox: no /dev/null for the inits' stdio", "err", err)
		}
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
	return l.run(ctx, nil, cfg, stdout, stderr)
}

// run runs one exec, on an init that s keeps when s is not nil.
func (l *Launcher) run(ctx context.Context, s *Session, cfg Config, stdout, stderr io.Writer) (platforms.ExecResult, error) {
	x, err := l.newExecution(ctx, s, cfg, stdout, stderr)
	if err != nil {
		return platforms.ExecResult{}, err
	}
	if err := x.start(ctx); err != nil {
		x.releaseUnstarted()
		return platforms.ExecResult{}, err
	}
	x.await(ctx)
	return x.result(ctx)
}

// initConfig resolves a validated Config into what the init is sent.
func (l *Launcher) initConfig(cfg Config) (initConfigX, error) {
	s := cfg.Spec
	ws, err := realDir(cfg.Workspace)
	if err != nil {
		return initConfigX{}, fmt.Errorf("%w: workspace: %w", platforms.ErrBadSpec, err)
	}
	root := ""
	if cfg.RootDir != "" {
		if root, err = realDir(cfg.RootDir); err != nil {
			return initConfigX{}, fmt.Errorf("%w: root dir: %w", platforms.ErrBadSpec, err)
		}
	}
	if r := l.UserNamespace; l.userNS != nil && (uint64(s.UID) >= uint64(r.Size) || uint64(s.GID) >= uint64(r.Size)) {
		return initConfigX{}, fmt.Errorf("%w: uid %d or gid %d is outside the user namespace's %d ids", platforms.ErrBadSpec, s.UID, s.GID, r.Size)
	}
	host := s.Hostname
	if host == "" {
		host = platforms.DefaultHostname
	}
	ic := initConfigX{initConfig: initConfig{
		Workspace: ws, RootDir: root, Network: cfg.Network,
		Argv: s.Argv, Env: s.Env, Dir: s.Workdir(), Timeout: s.Timeout,
		UID: s.UID, GID: s.GID, Hostname: host, Seccomp: len(l.SyscallFilter) > 0,
	}, pids: s.Pids}
	if t := s.Terminal; t != nil {
		ic.TTY = &ttySize{Rows: uint16(t.Rows), Cols: uint16(t.Cols)}
	}
	return ic, nil
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
// cgroups that were not removed and inits still running (warm inits and
// those Sessions keep are not leaks). Empty while no exec is in flight
// means clean.
func (l *Launcher) Leaks(ctx context.Context) ([]string, error) {
	l.init()
	if err := l.Settle(ctx); err != nil {
		return nil, err
	}
	var out []string
	waiting := map[string]bool{} // warm and kept inits hold a cgroup of their own
	l.mu.Lock()
	for pid := range l.running {
		out = append(out, "sandbox init still running: pid "+strconv.Itoa(pid))
	}
	for _, pids := range []map[int]bool{l.warmPids, l.kept} {
		for pid := range pids {
			waiting[strconv.Itoa(pid)] = true
		}
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
			if procs := strings.Fields(string(b)); len(procs) == 1 && waiting[procs[0]] {
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
// sysmon takes it back, which after idle can take one of sysmon's long
// looks (see package maxprocs), and meanwhile
// the goroutines that copy the exec's output to its end may have no P to
// run on. Where there is no pidfd it returns at
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

// outputGrace bounds the wait for output EOF after the init reported: only
// a descriptor smuggled out of the sandbox could keep a pipe open longer.
const outputGrace = 5 * time.Second
