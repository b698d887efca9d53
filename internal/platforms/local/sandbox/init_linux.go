package sandbox

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"layerfs.dev/layerfs/internal/cloexec"
	"layerfs.dev/layerfs/internal/platforms/internal/userns"
)

// initArg0 is the argv[0] the launcher gives the init; InitMain acts only
// on it. It is also what the init is called in ps.
const initArg0 = "layerfs-sandbox-init"

// The init's inherited descriptors.
const (
	configFD = 3 // JSON initConfig, read to EOF
	reportFD = 4 // JSON initReport, written once
)

// IsInit reports whether this process was started as a sandbox init.
func IsInit() bool { return len(os.Args) > 0 && os.Args[0] == initArg0 }

// InitMain runs the sandbox init when this process was started as one and
// then exits; otherwise it returns false at once. It must be the first
// thing main (and a test binary's TestMain) calls, on the main goroutine.
func InitMain() (handled bool) {
	if len(os.Args) > 0 && os.Args[0] == userNSArg0 {
		userns.WaitStdin()
		os.Exit(0)
	}
	if len(os.Args) > 0 && os.Args[0] == stubArg0 {
		stubMain()
	}
	if !IsInit() {
		return false
	}
	// Capabilities, no_new_privs, rlimits of the fork and the wait for
	// children all belong to one OS thread: stay on it from here on.
	runtime.LockOSThread()
	m := &marks{}
	m.add("init")
	os.Exit(initMain(m))
	return true
}

func initMain(m *marks) int {
	unix.CloseOnExec(configFD)
	unix.CloseOnExec(reportFD)
	reportFile := os.NewFile(reportFD, "report")
	send := func(r initReport) int {
		m.add("report")
		r.Marks = *m
		// Every process of the namespace is gone: closing the init's stdio
		// ends the launcher's output streams now, not at the init's exit.
		for fd := 0; fd <= 2; fd++ {
			unix.Close(fd)
		}
		if err := json.NewEncoder(reportFile).Encode(r); err != nil {
			return 3
		}
		if err := reportFile.Close(); err != nil {
			return 3
		}
		if r.Error != "" {
			return 1
		}
		return 0
	}
	// Nothing of the daemon's may stay in the sandbox, not even in its
	// init: a FUSE device held here would let the command forge replies,
	// and would keep a crashed daemon's mounts from ever aborting.
	idRange, hasUserNS := userNSFromEnv()
	keep := reportFD
	owner := -1 // the host uid of the command's root, for /tmp and /dev/shm
	if hasUserNS {
		keep, owner = userNSFD, int(idRange.Host)
	}
	if err := cloexec.CloseInherited(keep + 1); err != nil {
		return send(initReport{Error: err.Error()})
	}

	// A warm init does all it can before its config comes: its runtime's
	// one-time work, lo, and the default root.
	ns := -1
	ahead := false // privileges dropped and spare threads made already
	var st *stub   // the command's process, forked ahead
	if os.Getenv(prewarmEnv) == "1" {
		prewarm()
		spareThreads()
		if err := dropPrivileges(); err != nil {
			return send(initReport{Error: err.Error()})
		}
		ahead = true
		if err := loopbackUp(); err != nil {
			return send(initReport{Error: "bring up lo: " + err.Error()})
		}
		unix.Umask(0)
		var err error
		if ns, err = prepareRoot("", owner, m); err != nil {
			return send(initReport{Error: err.Error()})
		}
		m.add("prewarmed")
		if hasUserNS && os.Getenv(forkAheadEnv) == "1" {
			if err := awaitCgroup(); err != nil {
				return send(initReport{Error: err.Error()})
			}
			if st, err = forkAhead(ns, idRange); err != nil {
				return send(initReport{Error: err.Error()})
			}
			m.add("forked ahead")
		}
	}
	var cfg initConfig
	cfgFile := os.NewFile(configFD, "config")
	err := json.NewDecoder(cfgFile).Decode(&cfg)
	cfgFile.Close()
	if err != nil {
		return send(initReport{Error: "read config: " + err.Error()})
	}
	m.add("config")

	if ns >= 0 && (cfg.RootDir != "" || cfg.Network) { // not what was prepared
		unix.Close(ns)
		ns = -1
	}
	if st != nil && (ns < 0 || !cfg.UserNS || !hasUserNS || cfg.ForkNow) {
		st.discard()
		st = nil
	}
	var want *IDRange // the command's user namespace, if the launcher has one
	if cfg.UserNS && hasUserNS {
		want = &idRange
	}
	userNS, why, err := setup(&cfg, ns, owner, want, m)
	if err != nil {
		return send(initReport{Error: err.Error()})
	}
	if st != nil && userNS == nil { // the workspace could not be id-mapped
		st.discard()
		st = nil
	}
	r := run(&cfg, ahead, userNS, st, m)
	r.UserNS = "none: " + why
	if userNS != nil {
		r.UserNS = userNS.String()
	}
	return send(r)
}

// setup turns this fresh set of namespaces into the sandbox: network,
// hostname, the new root (unless ns is one prepared ahead) and the
// workspace, and the working directory. The workspace is id-mapped for
// userNS when that is set, which is then the command's user namespace;
// where it cannot be (or userNS is nil), why says why the command has none.
func setup(cfg *initConfig, ns, owner int, userNS *IDRange, m *marks) (granted *IDRange, why string, err error) {
	if ns < 0 {
		if !cfg.Network {
			if err := loopbackUp(); err != nil {
				return nil, "", fmt.Errorf("bring up lo: %w", err)
			}
		}
		unix.Umask(0)
		if ns, err = prepareRoot(cfg.RootDir, owner, m); err != nil {
			return nil, "", err
		}
	}
	if err := unix.Sethostname([]byte(cfg.Hostname)); err != nil {
		unix.Close(ns)
		return nil, "", fmt.Errorf("set hostname: %w", err)
	}
	idmap := -1
	granted, why = userNS, "the launcher has none"
	if userNS != nil && !cfg.WorkspaceMapped {
		idmap, why = userNSFD, ""
	}
	ws, err := cloneWorkspace(cfg.Workspace, idmap)
	if errors.Is(err, errNoIDMap) {
		granted, why = nil, err.Error()
		ws, err = cloneWorkspace(cfg.Workspace, -1)
	}
	if err != nil {
		unix.Close(ns)
		return nil, "", fmt.Errorf("clone workspace %s: %w", cfg.Workspace, err)
	}
	err = enterRoot(ns, ws, cfg.Dir)
	m.add("entered")
	return granted, why, err
}

// loopbackUp sets IFF_UP on lo, the only interface of a new network
// namespace.
func loopbackUp() error {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	ifr, err := unix.NewIfreq("lo")
	if err != nil {
		return err
	}
	if err := unix.IoctlIfreq(fd, unix.SIOCGIFFLAGS, ifr); err != nil {
		return err
	}
	ifr.SetUint16(ifr.Uint16() | unix.IFF_UP)
	return unix.IoctlIfreq(fd, unix.SIOCSIFFLAGS, ifr)
}

// run starts the command as PID 1's only child (st, when it is forked
// ahead and can take the exec), reaps everything until the namespace is
// empty and reports how the command ended.
func run(cfg *initConfig, ahead bool, userNS *IDRange, st *stub, m *marks) initReport {
	env := cfg.Env
	bin, err := lookPath(cfg.Argv[0], env)
	if err != nil {
		if st != nil {
			st.discard()
		}
		return notStarted(cfg.Argv[0], err)
	}
	if st != nil && (st.filtered != cfg.Seccomp || !stubTakes(cfg)) {
		st.discard()
		st = nil
	}
	if st != nil {
		m.add("fork")
		start := time.Now()
		err := st.send(stubOrder{Bin: bin, Argv: cfg.Argv, Env: env, Dir: cfg.Dir, UID: cfg.UID, GID: cfg.GID,
			Nofile: cfg.RlimitNofile, AS: cfg.RlimitAS, Nproc: cfg.RlimitNproc}, ownNice())
		m.add("forked")
		if err != nil {
			st.discard()
			return initReport{Error: "start the command from its stub forked ahead: " + err.Error()}
		}
		_ = keepOnlyKill()
		return reap(cfg, 0, st, start, m)
	}
	if !ahead {
		if err := dropPrivileges(); err != nil {
			return initReport{Error: err.Error()}
		}
		spareThreads()
	}
	restore, err := setRlimits(cfg)
	if err != nil {
		return initReport{Error: err.Error()}
	}
	// The command gets fds 0, 1 and 2 and nothing else, whatever this
	// init opened since it started.
	if err := cloexec.All(); err != nil {
		restore()
		return initReport{Error: err.Error()}
	}
	unix.Umask(0o022)
	gcPercent := -2 // -2: collection was left as it was
	if cfg.Seccomp {
		progs, err := filterFromEnv()
		listener := -1
		if err == nil {
			listener, err = loadSyscallFilter(progs)
		}
		if err != nil {
			restore()
			return initReport{Error: err.Error()}
		}
		if listener >= 0 {
			// The fork below is a raw clone that waits for the answer
			// while it holds its P: the answer needs another P (an init
			// with one CPU would otherwise deadlock), and no collection may
			// run meanwhile: its mark termination waits for every P
			// (forEachP), and with this one held the answer never gets a
			// P either. Seen as one exec in a few hundred hanging in
			// cmd/layerfsd's TestLoad: SetGCPercent(-1) returns once a
			// cycle's mark is done, before its forEachP, so the launcher
			// starts inits with collection off (GOGC=off, initEnv); one
			// started with it on waits here, with a stop of the world,
			// for a cycle in progress to end.
			runtime.GOMAXPROCS(max(runtime.GOMAXPROCS(0), 2))
			if gcPercent = debug.SetGCPercent(-1); gcPercent >= 0 {
				var ms runtime.MemStats
				runtime.ReadMemStats(&ms) // holds the world until the cycle is over
			}
			// On a thread of its own, which the filter does not bind; it
			// lives as long as the init. The fork waits until it runs: a
			// goroutine still queued on this P when the clone blocks would
			// never be run (seen as a hang of every exec, depending on
			// scheduling, once the binary linked more packages).
			ready := make(chan struct{})
			go answerNewUser(listener, unix.Gettid(), ready)
			<-ready
		}
		m.add("filter")
	}
	attr := &syscall.ProcAttr{
		Env:   env,
		Files: []uintptr{0, 1, 2},
		Sys: &syscall.SysProcAttr{
			Credential: &syscall.Credential{Uid: uint32(cfg.UID), Gid: uint32(cfg.GID), Groups: []uint32{}},
			// Its own process group, so that a script's `kill 0` stays
			// within its own processes and does not reach the init.
			Setpgid: true,
		},
	}
	if userNS != nil {
		userNSAttr(attr.Sys, *userNS)
	}
	m.add("fork")
	start := time.Now()
	pid, err := syscall.ForkExec(bin, cfg.Argv, attr)
	m.add("forked")
	if gcPercent != -2 {
		debug.SetGCPercent(gcPercent)
	}
	restore()
	if err != nil {
		return notStarted(cfg.Argv[0], err)
	}
	// From here on the init only signals and reaps: on this thread it keeps
	// CAP_KILL alone, which it needs for a command running as another uid.
	_ = keepOnlyKill()
	return reap(cfg, pid, nil, start, m)
}

// stubTakes reports whether a stub can set the exec's limits: it cannot
// raise a hard limit (it has no capabilities in the host's user namespace),
// so a limit above the one it inherited from the init needs a fork now.
func stubTakes(cfg *initConfig) bool {
	for _, l := range []struct {
		res int
		v   uint64
	}{{unix.RLIMIT_NOFILE, cfg.RlimitNofile}, {unix.RLIMIT_AS, cfg.RlimitAS}, {unix.RLIMIT_NPROC, cfg.RlimitNproc}} {
		var cur unix.Rlimit
		if l.v > 0 && (unix.Getrlimit(l.res, &cur) != nil || l.v > cur.Max) {
			return false
		}
	}
	return true
}

// reap waits for the command pid, started at start, and everything else
// in the namespace, killing what the command leaves behind, or everything
// once the exec's timeout fires, and reports how the command ended. With
// st, the command is the one st starts, whose pid st reports when it exits
// (pid is 0 until then): the init waits for the command's end at once,
// not for the stub's report first.
func reap(cfg *initConfig, pid int, st *stub, start time.Time, m *marks) initReport {
	var timedOut atomic.Bool
	timer := time.AfterFunc(cfg.Timeout, func() {
		timedOut.Store(true)
		_ = unix.Kill(-1, unix.SIGKILL) // everything in the namespace but PID 1
	})
	defer timer.Stop()

	var status unix.WaitStatus
	var end time.Time
	var failed *initReport // st could not start the command
	ended := func(ws unix.WaitStatus) {
		end = time.Now()
		m.add("exit")
		status = ws
		// The command is done; whatever it left behind goes with it.
		_ = unix.Kill(-1, unix.SIGKILL)
	}
	for {
		var ws unix.WaitStatus
		wpid, err := unix.Wait4(-1, &ws, 0, nil)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil { // ECHILD: the namespace is empty
			break
		}
		if st != nil {
			// The first child to end: the stub, the command (the stub
			// forks it as this init's child) or a process the command
			// started, so the stub has reported or is about to.
			m.add("stub ended")
			var serr error
			pid, serr = st.started(m)
			st = nil
			var exe *os.SyscallError
			switch {
			case errors.As(serr, &exe):
				r := notStarted(cfg.Argv[0], exe.Err)
				failed = &r
			case serr != nil && timedOut.Load(): // killed before it reported
				ended(unix.WaitStatus(unix.SIGKILL))
			case serr != nil:
				failed = &initReport{Error: "start the command from its stub forked ahead: " + serr.Error()}
			}
		}
		if pid > 0 && wpid == pid {
			ended(ws)
		}
	}
	m.add("reaped")
	if failed != nil {
		return *failed
	}
	r := initReport{Started: true, Command: end.Sub(start), TimedOut: timedOut.Load()}
	switch {
	case status.Signaled():
		r.ExitCode = 128 + int(status.Signal())
		r.Signal = unix.SignalName(status.Signal())
	default:
		r.ExitCode = status.ExitStatus()
	}
	return r
}

// spareThreads makes sure the runtime has idle threads for the timeout
// timer and the reaping to run on: once a fork bomb has used up the pids
// cgroup, the init can make no new thread, and a runtime that needs one and
// cannot make it dies. Threads that were locked and then unlocked stay
// with the runtime, idle.
func spareThreads() {
	const n = 3
	var ready, release sync.WaitGroup
	ready.Add(n)
	release.Add(1)
	for range n {
		go func() {
			runtime.LockOSThread()
			ready.Done()
			release.Wait() // all n hold a thread at once
			runtime.UnlockOSThread()
		}()
	}
	ready.Wait()
	release.Done()
}

// notStarted reports a command that could not be executed the way a shell
// does: a message on stderr and 127 (not found) or 126 (not executable).
func notStarted(name string, err error) initReport {
	code := 126
	if errors.Is(err, unix.ENOENT) || errors.Is(err, errNotFound) {
		code = 127
	}
	fmt.Fprintf(os.Stderr, "layerfs: %s: %v\n", name, err)
	return initReport{Started: true, ExitCode: code}
}

var errNotFound = errors.New("command not found")

// lookPath finds name on the sandbox's PATH (not the init's, which is empty).
func lookPath(name string, env []string) (string, error) {
	if strings.Contains(name, "/") {
		return name, nil
	}
	pathVar := ""
	for _, kv := range env {
		if v, ok := strings.CutPrefix(kv, "PATH="); ok {
			pathVar = v
		}
	}
	for _, dir := range filepath.SplitList(pathVar) {
		if dir == "" {
			dir = "."
		}
		p := filepath.Join(dir, name)
		var st unix.Stat_t
		if unix.Stat(p, &st) == nil && st.Mode&unix.S_IFMT == unix.S_IFREG && unix.Access(p, unix.X_OK) == nil {
			return p, nil
		}
	}
	return "", errNotFound
}

// dropPrivileges empties this thread's bounding, ambient and inheritable
// capability sets and sets no_new_privs. The command forked from this thread
// inherits them; whatever uid it runs as, execve leaves it with no
// capabilities at all, since a root execve grants only what the bounding and
// inheritable sets hold. Permitted and effective stay until the fork so that
// the init can still enter its mount namespace and mount the workspace, and
// the child can setuid/setgid to the configured ids; a warm init drops the
// rest ahead.
func dropPrivileges() error {
	for c := 0; c <= 63; c++ {
		if err := unix.Prctl(unix.PR_CAPBSET_DROP, uintptr(c), 0, 0, 0); err != nil {
			if errors.Is(err, unix.EINVAL) { // past the kernel's last capability
				break
			}
			return fmt.Errorf("drop bounding capability %d: %w", c, err)
		}
	}
	if err := unix.Prctl(unix.PR_CAP_AMBIENT, unix.PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0); err != nil {
		return fmt.Errorf("clear ambient capabilities: %w", err)
	}
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	if err := unix.Capget(&hdr, &data[0]); err != nil {
		return fmt.Errorf("read capabilities: %w", err)
	}
	data[0].Inheritable, data[1].Inheritable = 0, 0
	if err := unix.Capset(&hdr, &data[0]); err != nil {
		return fmt.Errorf("clear inheritable capabilities: %w", err)
	}
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		return fmt.Errorf("set no_new_privs: %w", err)
	}
	// Nothing in the sandbox may ptrace or read the init's memory.
	if err := unix.Prctl(unix.PR_SET_DUMPABLE, 0, 0, 0, 0); err != nil {
		return fmt.Errorf("clear dumpable: %w", err)
	}
	return nil
}

// keepOnlyKill reduces this thread's permitted and effective capabilities
// to CAP_KILL.
func keepOnlyKill() error {
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	data[0].Permitted = 1 << unix.CAP_KILL
	data[0].Effective = 1 << unix.CAP_KILL
	return unix.Capset(&hdr, &data[0])
}

// setRlimits applies the open files limit and the limits the host has no
// cgroup for. Rlimits belong
// to the process, so the init sets them just around the fork and restores
// its own afterwards.
func setRlimits(cfg *initConfig) (restore func(), err error) {
	type saved struct {
		res int
		old unix.Rlimit
	}
	var undo []saved
	restore = func() {
		for _, s := range undo {
			_ = unix.Setrlimit(s.res, &s.old)
		}
	}
	set := func(res int, v uint64) error {
		var old unix.Rlimit
		if err := unix.Getrlimit(res, &old); err != nil {
			return err
		}
		if err := unix.Setrlimit(res, &unix.Rlimit{Cur: v, Max: v}); err != nil {
			return err
		}
		undo = append(undo, saved{res, old})
		return nil
	}
	if cfg.RlimitAS > 0 {
		if err := set(unix.RLIMIT_AS, cfg.RlimitAS); err != nil {
			restore()
			return nil, fmt.Errorf("set RLIMIT_AS: %w", err)
		}
	}
	if cfg.RlimitNproc > 0 {
		if err := set(unix.RLIMIT_NPROC, cfg.RlimitNproc); err != nil {
			restore()
			return nil, fmt.Errorf("set RLIMIT_NPROC: %w", err)
		}
	}
	if cfg.RlimitNofile > 0 {
		if err := set(unix.RLIMIT_NOFILE, cfg.RlimitNofile); err != nil {
			restore()
			return nil, fmt.Errorf("set RLIMIT_NOFILE: %w", err)
		}
	}
	return restore, nil
}

// marks records CLOCK_MONOTONIC readings of the init's phases for the
// launcher's debug log (the clock is shared: there is no time namespace).
type marks []mark

func (m *marks) add(name string) { *m = append(*m, mark{name, monotonic()}) }

func monotonic() int64 {
	var ts unix.Timespec
	_ = unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts)
	return ts.Nano()
}

// prewarmEnv is set for inits started ahead (the warm pool): they do the
// init's one-time work while they wait, instead of after their config came.
const prewarmEnv = "LAYERFS_SANDBOX_PREWARM"

// prewarm builds the JSON codecs' type caches and grows the heap once.
func prewarm() {
	var cfg initConfig
	_ = json.Unmarshal([]byte(`{"workspace":"/w","argv":["true"],"env":["A=b"],"dir":"/workspace","timeout":1,"uid":0,"gid":0,"hostname":"h"}`), &cfg)
	_, _ = json.Marshal(initReport{Marks: []mark{{"x", 1}}})
}
