package sandbox

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"layerfs.dev/layerfs/internal/cloexec"
)

// initArg0 is the argv[0] the launcher gives the init; InitMain acts only
// on it. It is also what the init is called in ps.
const initArg0 = "layerfs-sandbox-init"

// The init's inherited descriptors: 0, 1 and 2 are /dev/null (each exec
// brings its own stdio).
const (
	ctlFD  = 3 // the control socket: execs come on it, reports go back
	rootFD = 4 // the first clone of the root's entries (rootEnv)
)

// An exec's message on the control socket is the exec's hostname with
// these descriptors, in this order: the workspace's clone, the read end of
// a pipe its initConfig comes on (JSON, to EOF), and its stdin, stdout and
// stderr. With the hostname the workspace can be mounted while the config
// is read.
const (
	msgWorkspace = iota
	msgConfig
	msgStdin
	msgStdout
	msgStderr
	msgFDs // how many
)

// readyMessage is what an init sends on its control socket when its
// sandbox is ready for an exec: once prepared, and again after each exec
// it keeps serving. Anything else it sends is a JSON initReport.
var readyMessage = []byte{1}

// Environment variables the launcher starts an init with, besides rootEnv
// and seccompEnv: what sandbox it prepares, so that every exec it serves
// can be checked against it.
const (
	networkEnv = "LAYERFS_SANDBOX_NETWORK" // "1": the host's network namespace
	imageEnv   = "LAYERFS_SANDBOX_IMAGE"   // the image directory of the root, if any
)

// initComm is the init's name in /proc/PID/comm (15 bytes at most).
var initComm = []byte("layerfs-sandbox\x00")

// IsInit reports whether this process was started as a sandbox init.
func IsInit() bool { return len(os.Args) > 0 && os.Args[0] == initArg0 }

// InitMain runs the sandbox init when this process was started as one and
// then exits; otherwise it returns false at once. It must be the first
// thing main (and a test binary's TestMain) calls, on the main goroutine.
func InitMain() (handled bool) {
	if len(os.Args) > 0 && os.Args[0] == spawnerArg0 {
		spawnerMain()
	}
	if len(os.Args) > 0 && os.Args[0] == restorerArg0 {
		restorerMain()
	}
	if !IsInit() {
		return false
	}
	// Capabilities, no_new_privs, rlimits of the fork and the wait for
	// children all belong to one OS thread: stay on it from here on.
	runtime.LockOSThread()
	// The init dies with its parent, the launcher or its spawner (its
	// exec of a binary it may not read cleared what its parent set), and
	// its PID namespace with it. Named as the binary it was started from.
	_ = unix.Prctl(unix.PR_SET_PDEATHSIG, uintptr(unix.SIGKILL), 0, 0, 0)
	_ = unix.Prctl(unix.PR_SET_NAME, uintptr(unsafe.Pointer(&initComm[0])), 0, 0, 0)
	in := &sandboxInit{marks: marks{}}
	in.marks.add("init")
	os.Exit(in.main())
	return true
}

// sandboxInit is the init's state: the sandbox it prepared once and keeps
// for every exec it serves.
type sandboxInit struct {
	marks    marks // of the exec being served (of the preparation before the first)
	network  bool  // the sandbox keeps the host's network namespace
	image    string
	filtered bool       // the syscall filter is loaded on the main thread
	userNS   bool       // the sandbox runs in the launcher's user namespace
	mt       *mounter   // a thread in the sandbox's mount namespace, unfiltered
	mqueue   int        // a detached mount of the IPC namespace's mqueue file system, -1 if none
	served   int        // execs served
	ready    bool       // the sandbox is ready for an exec
	sched    schedState // the main thread's, when the exec came
	res      *resident  // the init's jobs once it is resident (resident_linux.go)
}

// main prepares the sandbox, then serves execs until one retires the init
// or the launcher closes the control socket.
func (in *sandboxInit) main() int {
	unix.CloseOnExec(ctlFD)
	if err := in.prepare(); err != nil {
		// The launcher reads this as the report of the exec it sends (or
		// has sent) this init.
		_ = in.send(initReport{Error: err.Error(), Retire: true})
		return 1
	}
	for {
		x, err := receiveExec()
		if errors.Is(err, io.EOF) {
			return 0 // the launcher is done with this init
		}
		if err != nil {
			_ = in.send(initReport{Error: err.Error(), Retire: true})
			return 1
		}
		r := in.serve(x)
		if in.res != nil {
			return in.res.loop()
		}
		if err := in.send(r); err != nil {
			return 3
		}
		if r.Retire {
			if r.Error != "" {
				return 1
			}
			return 0
		}
		if err := in.reset(); err != nil {
			return 1 // never ready again: the launcher sees the socket end
		}
	}
}

// prepare does everything an exec does not need to wait for: the
// runtime's one-time work, dropping the bounding set, lo, the root (step
// 3 of the package comment), entering it, loading the filter; then it
// says it is ready.
func (in *sandboxInit) prepare() error {
	// Nothing of the daemon's may stay in the sandbox, not even in its
	// init: a FUSE device held here would let the command forge replies,
	// and would keep a crashed daemon's mounts from ever aborting.
	entries, err := entriesFromEnv()
	if err != nil {
		return err
	}
	keep := rootFD - 1
	for _, e := range entries {
		if e.tree >= 0 {
			keep = e.tree
		}
	}
	if err := cloexec.CloseInherited(keep + 1); err != nil {
		return err
	}
	in.network, in.image = os.Getenv(networkEnv) == "1", os.Getenv(imageEnv)
	in.userNS = os.Getenv(userNSEnv) != ""
	prewarm()
	spareThreads()
	if err := dropPrivileges(); err != nil {
		return err
	}
	if !in.network {
		if err := loopbackUp(); err != nil {
			return fmt.Errorf("bring up lo: %w", err)
		}
	}
	unix.Umask(0)
	ns, err := prepareRoot(entries, &in.marks)
	if err != nil {
		return err
	}
	if in.mt, err = enterAhead(ns); err != nil {
		return err
	}
	in.mqueue = -1
	if err := in.mt.do(func() error { in.mqueue = mqueueMount(); return nil }); err != nil {
		return err
	}
	if os.Getenv(seccompEnv) != "" {
		if err := loadFilterFromEnv(); err != nil {
			return err
		}
		in.filtered = true
	}
	in.marks.add("prewarmed")
	return in.sayReady()
}

// sayReady tells the launcher the sandbox is ready for an exec; it also
// gives a warm init back its priority, which it does once the init only
// waits rather than on an exec's path.
func (in *sandboxInit) sayReady() error {
	in.ready = true
	if _, err := unix.Write(ctlFD, readyMessage); err != nil {
		return fmt.Errorf("say ready: %w", err)
	}
	return nil
}

// execFDs are one exec's descriptors (see msgWorkspace) and hostname.
type execFDs struct {
	fd       [msgFDs]int
	hostname string
}

func (x *execFDs) close() {
	for i, fd := range x.fd {
		if fd >= 0 {
			unix.Close(fd)
			x.fd[i] = -1
		}
	}
}

// take returns descriptor i, which the caller now owns.
func (x *execFDs) take(i int) int {
	fd := x.fd[i]
	x.fd[i] = -1
	return fd
}

// receiveExec waits for the next exec's message.
func receiveExec() (*execFDs, error) {
	b := make([]byte, 256)
	oob := make([]byte, unix.CmsgSpace(msgFDs*4))
	for {
		n, oobn, _, _, err := unix.Recvmsg(ctlFD, b, oob, unix.MSG_CMSG_CLOEXEC)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("receive an exec: %w", err)
		}
		if n == 0 && oobn == 0 {
			return nil, io.EOF
		}
		var fds []int
		if msgs, err := unix.ParseSocketControlMessage(oob[:oobn]); err == nil {
			for _, m := range msgs {
				if fs, err := unix.ParseUnixRights(&m); err == nil {
					fds = append(fds, fs...)
				}
			}
		}
		if len(fds) != msgFDs {
			for _, fd := range fds {
				unix.Close(fd)
			}
			return nil, fmt.Errorf("receive an exec: %d descriptors came, want %d", len(fds), msgFDs)
		}
		x := &execFDs{hostname: string(b[:n])}
		copy(x.fd[:], fds)
		return x, nil
	}
}

// serve runs one exec: its config, the workspace at /workspace, the
// command, the reaping. Whatever happens, the exec's descriptors are
// closed before it returns, so that the launcher's output streams end.
func (in *sandboxInit) serve(x *execFDs) initReport {
	defer x.close()
	cpu0 := ownCPU()
	if in.served > 0 {
		in.marks = marks{}
	}
	in.marks.add("config")
	in.served++
	in.ready = false
	in.sched = readSched()
	r := in.runExec(x)
	r.CPU = ownCPU() - cpu0
	if !r.Retire && in.sched != readSched() {
		// The command reniced or re-pinned the init (it may: it is of the
		// same uid), which the next exec's command would inherit.
		r.Retire = true
	}
	return r
}

// runExec reads the exec's config, mounts its workspace and runs it.
func (in *sandboxInit) runExec(x *execFDs) initReport {
	ws, host := x.take(msgWorkspace), x.hostname
	mounted := in.mt.start(func() error { return mountWorkspace(ws, host) })
	var cfg initConfig
	f := os.NewFile(uintptr(x.take(msgConfig)), "config")
	err := json.NewDecoder(f).Decode(&cfg)
	f.Close()
	switch merr := <-mounted; {
	case err != nil:
		return initReport{Error: "read config: " + err.Error(), Retire: true}
	case cfg.RootDir != in.image || cfg.Network != in.network || cfg.Seccomp != in.filtered:
		// The launcher gives an init only execs of the sandbox it prepared.
		return initReport{Error: "an init got an exec of another sandbox (network, root or filter)", Retire: true}
	default:
		err = merr
	}
	if err == nil {
		err = unix.Chdir(cfg.Dir)
		if err != nil {
			err = fmt.Errorf("chdir %s: %w", cfg.Dir, err)
		}
	}
	if err != nil {
		return initReport{Error: err.Error(), Retire: true}
	}
	if cfg.Job != 0 {
		// The workspace stays mounted for this job and every later one.
		in.becomeResident(&cfg, x)
		return initReport{}
	}
	in.marks.add("entered")
	r := in.run(&cfg, x)
	// The main thread's working directory must not hold the workspace's
	// mount once the exec is done.
	_ = unix.Chdir("/")
	if cfg.Last || r.Error != "" || r.TimedOut {
		r.Retire = true
	}
	return r
}

// send writes r, with the marks of the exec, as one message on the
// control socket.
func (in *sandboxInit) send(r initReport) error {
	in.marks.add("report")
	r.Marks = in.marks
	b, err := json.Marshal(r)
	if err != nil {
		return err
	}
	_, err = unix.Write(ctlFD, b)
	return err
}

// reset makes the sandbox ready for the next exec: a fresh /tmp and
// /dev/shm, the workspace unmounted, the exec's System V IPC objects and
// POSIX message queues removed. Every process of the exec is gone by then.
func (in *sandboxInit) reset() error {
	if in.served == 1 {
		// A kept init lives long and allocates with every exec: from now
		// on it collects its garbage (an init that serves one exec never
		// does).
		debug.SetGCPercent(100)
	}
	if err := in.mt.do(func() error { return resetSandbox(in.mqueue) }); err != nil {
		return err
	}
	return in.sayReady()
}

// run starts the command as PID 1's only child, reaps everything until
// the namespace is empty and reports how the command ended.
func (in *sandboxInit) run(cfg *initConfig, x *execFDs) initReport {
	env := cfg.Env
	bin, err := lookPath(cfg.Argv[0], env)
	if err != nil {
		return notStarted(x.fd[msgStderr], cfg.Argv[0], err)
	}
	restore, limited, err := setRlimits(cfg)
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
	if cfg.Seccomp && !in.filtered {
		restore()
		return initReport{Error: "no syscall filter was loaded"}
	}
	attr := &syscall.ProcAttr{
		Env:   env,
		Files: []uintptr{uintptr(x.fd[msgStdin]), uintptr(x.fd[msgStdout]), uintptr(x.fd[msgStderr])},
		Sys: &syscall.SysProcAttr{
			Credential: &syscall.Credential{Uid: uint32(cfg.UID), Gid: uint32(cfg.GID), Groups: []uint32{}},
			// Its own process group, so that a script's `kill 0` stays
			// within its own processes and does not reach the init.
			Setpgid: true,
		},
	}
	var term *terminal
	if cfg.TTY != nil {
		if term, err = openTerminal(cfg); err != nil {
			restore()
			return initReport{Error: err.Error()}
		}
		defer term.close()
		// A session of its own with the terminal as its controlling
		// one: job control, and Ctrl-C for its foreground group.
		attr.Files = []uintptr{uintptr(term.slave), uintptr(term.slave), uintptr(term.slave)}
		attr.Sys.Setpgid, attr.Sys.Setsid, attr.Sys.Setctty, attr.Sys.Ctty = false, true, true, 0
	}
	in.marks.add("fork")
	start := time.Now()
	pid, err := syscall.ForkExec(bin, cfg.Argv, attr)
	in.marks.add("forked")
	restore()
	if err != nil {
		return notStarted(x.fd[msgStderr], cfg.Argv[0], err)
	}
	if term != nil {
		// Only the launcher holds the master from here on: closing it
		// hangs the terminal up.
		if err := term.handOver(); err != nil {
			_ = unix.Kill(-1, unix.SIGKILL)
			r := reap(cfg, pid, start, &in.marks)
			r.Error = err.Error()
			return r
		}
	}
	// Only the command's processes may hold its stdio.
	for _, i := range []int{msgStdin, msgStdout, msgStderr} {
		unix.Close(x.take(i))
	}
	// From here on the init only signals, reaps and forks the next
	// commands: on this thread it keeps what a root command gets (a root
	// execve under no_new_privs gets no more than its parent's permitted
	// set) and what the fork of a command as another uid needs.
	_ = keepAfterFork(in.userNS)
	r := reap(cfg, pid, start, &in.marks)
	// An rlimit put back above its old value needs CAP_SYS_RESOURCE in the
	// host's user namespace, which an init in the launcher's lacks: an
	// exec that set one is the init's last.
	r.Retire = limited
	return r
}

// reap waits for the command pid, started at start, and everything else
// in the namespace, killing what the command leaves behind, or everything
// once the exec's timeout fires, and reports how the command ended.
func reap(cfg *initConfig, pid int, start time.Time, m *marks) initReport {
	var timedOut atomic.Bool
	timer := time.AfterFunc(cfg.Timeout, func() {
		timedOut.Store(true)
		_ = unix.Kill(-1, unix.SIGKILL) // everything in the namespace but PID 1
	})
	defer timer.Stop()

	var status unix.WaitStatus
	var end time.Time
	for {
		var ws unix.WaitStatus
		wpid, err := unix.Wait4(-1, &ws, 0, nil)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil { // ECHILD: the namespace is empty
			break
		}
		if wpid == pid {
			end = time.Now()
			m.add("exit")
			status = ws
			// The command is done; whatever it left behind goes with it.
			_ = unix.Kill(-1, unix.SIGKILL)
		}
	}
	m.add("reaped")
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

// ownCPU is the CPU time this process and the children it reaped used.
func ownCPU() time.Duration {
	var s, c unix.Rusage
	_ = unix.Getrusage(unix.RUSAGE_SELF, &s)
	_ = unix.Getrusage(unix.RUSAGE_CHILDREN, &c)
	return time.Duration(s.Utime.Nano() + s.Stime.Nano() + c.Utime.Nano() + c.Stime.Nano())
}

// schedState is what a command inherits from the thread that forks it and
// may change on its init, a process of its own uid: the nice value, the
// scheduling policy, the CPU affinity and the I/O priority.
type schedState struct {
	nice, policy, ioprio int
	cpus                 unix.CPUSet
}

func readSched() schedState {
	var s schedState
	s.nice, _ = unix.Getpriority(unix.PRIO_PROCESS, 0)
	p, _, _ := unix.RawSyscall(unix.SYS_SCHED_GETSCHEDULER, 0, 0, 0)
	s.policy = int(p)
	const ioprioWhoProcess = 1
	io, _, _ := unix.RawSyscall(unix.SYS_IOPRIO_GET, ioprioWhoProcess, 0, 0)
	s.ioprio = int(io)
	_ = unix.SchedGetaffinity(0, &s.cpus)
	return s
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
// does: a message on the exec's stderr and 127 (not found) or 126 (not
// executable).
func notStarted(stderr int, name string, err error) initReport {
	code := 126
	if errors.Is(err, unix.ENOENT) || errors.Is(err, errNotFound) {
		code = 127
	}
	_, _ = unix.Write(stderr, []byte(fmt.Sprintf("layerfs: %s: %v\n", name, err)))
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

// dropPrivileges empties this thread's ambient and inheritable capability
// sets and its bounding set, but for rootCaps in the launcher's user
// namespace, and sets no_new_privs. The command forked from this thread
// inherits them; a root execve grants only what the bounding set holds, so
// a command that runs as root gets rootCaps in the user namespace (which
// act on nothing outside its ids) or, in the host's, none at all; any other
// uid gets none. Permitted and effective stay until the first fork, so
// that the init can still bring up lo and the child can setuid/setgid to
// the configured ids; then keepAfterFork reduces them.
func dropPrivileges() error {
	keep := uint64(0)
	if os.Getenv(userNSEnv) != "" {
		keep = rootCaps
	}
	for c := 0; c <= 63; c++ {
		if keep&(1<<c) != 0 {
			continue
		}
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

// rootCaps are what a command's root may do in the launcher's user
// namespace: Docker's default capabilities for a container's root, all of
// which act only on the ids and namespaces of the user namespace. Not
// among them: CAP_SYS_ADMIN (the sandbox's mount namespace is the user
// namespace's: with it, its root could unmount the masks over /proc or make
// the runtime's clones writable), CAP_NET_ADMIN, CAP_SYS_PTRACE,
// CAP_SYS_RESOURCE.
const rootCaps = 1<<unix.CAP_CHOWN | 1<<unix.CAP_DAC_OVERRIDE | 1<<unix.CAP_FOWNER | 1<<unix.CAP_FSETID |
	1<<unix.CAP_KILL | 1<<unix.CAP_SETGID | 1<<unix.CAP_SETUID | 1<<unix.CAP_SETPCAP |
	1<<unix.CAP_NET_BIND_SERVICE | 1<<unix.CAP_NET_RAW | 1<<unix.CAP_SYS_CHROOT | 1<<unix.CAP_MKNOD |
	1<<unix.CAP_AUDIT_WRITE | 1<<unix.CAP_SETFCAP

// keepAfterFork reduces this thread's permitted and effective
// capabilities to what the init's main thread needs once it has forked a
// command: CAP_KILL to signal a command of another uid, CAP_SETUID and
// CAP_SETGID to fork the next one as its uid and gid, and, in the
// launcher's user namespace, rootCaps, which a root command forked from
// this thread gets (its execve under no_new_privs grants no more than the
// thread holds).
func keepAfterFork(userNS bool) error {
	keep := uint64(1<<unix.CAP_KILL | 1<<unix.CAP_SETUID | 1<<unix.CAP_SETGID)
	if userNS {
		keep |= rootCaps
	}
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	data[0].Permitted, data[0].Effective = uint32(keep), uint32(keep)
	data[1].Permitted, data[1].Effective = uint32(keep>>32), uint32(keep>>32)
	return unix.Capset(&hdr, &data[0])
}

// setRlimits applies the open files limit and the limits the host has no
// cgroup for. Rlimits belong to the process, so the init sets them just
// around the fork and restores its own afterwards (which, in a user
// namespace, fails for any limit raised back: limited says one was set).
func setRlimits(cfg *initConfig) (restore func(), limited bool, err error) {
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
	for _, l := range []struct {
		res  int
		v    uint64
		name string
	}{
		{unix.RLIMIT_AS, cfg.RlimitAS, "RLIMIT_AS"},
		{unix.RLIMIT_NPROC, cfg.RlimitNproc, "RLIMIT_NPROC"},
		{unix.RLIMIT_NOFILE, cfg.RlimitNofile, "RLIMIT_NOFILE"},
	} {
		if l.v == 0 {
			continue
		}
		if err := set(l.res, l.v); err != nil {
			restore()
			return nil, false, fmt.Errorf("set %s: %w", l.name, err)
		}
	}
	return restore, len(undo) > 0, nil
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

// prewarm builds the JSON codecs' type caches and grows the heap once.
func prewarm() {
	var cfg initConfig
	_ = json.Unmarshal([]byte(`{"workspace":"/w","argv":["true"],"env":["A=b"],"dir":"/workspace","timeout":1,"uid":0,"gid":0,"hostname":"h"}`), &cfg)
	_, _ = json.Marshal(initReport{Marks: []mark{{"x", 1}}})
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
