package sandbox

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"runtime"
	"syscall"

	"golang.org/x/sys/unix"

	"layerfs.dev/layerfs/internal/cloexec"
	"layerfs.dev/layerfs/internal/seccomp/bpfload"
)

// A warm init whose commands run in a user namespace forks ahead a stub
// for its command: a process already in its new user namespace and the
// sandbox's mount namespace, with no_new_privs set and the seccomp filter
// loaded, that waits for its order, then starts the command with a vfork
// and an exec, reports the command's pid and exits. What the fork into a
// new user namespace costs (it cannot share the init's memory, since the
// child waits for its uid_map, and the Go runtime can only fork, not enter
// an existing user namespace) and the filter's loading are then off the
// exec's latency. The stub does not exec the command itself: execve in a
// Go process first ends its other threads, each of which has to be
// scheduled to exit (about a millisecond on a loaded machine, measured),
// where a vfork child is one thread. The command, once the stub is gone,
// is a child of the init, which is the PID namespace's reaper, as a
// command forked by the init is.

// stubArg0 is the argv[0] of a stub; forkAheadEnv tells a warm init to fork
// one.
const (
	stubArg0     = "layerfs-sandbox-stub"
	forkAheadEnv = "LAYERFS_SANDBOX_FORK_AHEAD"
)

func init() {
	// The stub's main goroutine stays on one thread, the main one: the
	// filter and no_new_privs are that thread's alone, and the command is
	// forked from it.
	if len(os.Args) > 0 && os.Args[0] == stubArg0 {
		runtime.LockOSThread()
	}
}

// inCgroup is the byte the launcher writes first on an init's config pipe
// once the init is in its cgroup (cgroup v1 moves a process after it
// started); a process the init forks later is in it too.
const inCgroup = '\n'

// awaitCgroup reads the launcher's inCgroup.
func awaitCgroup() error {
	var b [1]byte
	for {
		n, err := unix.Read(configFD, b[:])
		switch {
		case errors.Is(err, unix.EINTR):
			continue
		case err != nil:
			return fmt.Errorf("wait for the cgroup: %w", err)
		case n != 1 || b[0] != inCgroup:
			return errors.New("wait for the cgroup: the launcher sent something else")
		}
		return nil
	}
}

// stub is a command's stub forked ahead.
type stub struct {
	pid      int
	order    *os.File // the write end of its order pipe
	report   *os.File // the read end of its report pipe
	filtered bool     // it loaded the seccomp filter
}

// stubOrder is what the init sends a stub: the command and its process's
// settings, as the init would give them to a fork.
type stubOrder struct {
	Bin    string   `json:"bin"` // as lookPath found it
	Argv   []string `json:"argv"`
	Env    []string `json:"env"`
	Dir    string   `json:"dir"`
	UID    int      `json:"uid"`
	GID    int      `json:"gid"`
	Nofile uint64   `json:"nofile,omitempty"`
	AS     uint64   `json:"as,omitempty"`
	Nproc  uint64   `json:"nproc,omitempty"`
}

// forkAhead starts a stub in a new user namespace with mapping r, in the
// mount namespace ns (the sandbox's root, prepared ahead; the workspace is
// mounted there later and the stub sees it then), as root of its namespace,
// in its own process group, with the init's stdio. It is forked from a
// thread of its own that enters ns and ends with the goroutine; the stub
// execs this binary through /proc/self/exe, which the sandbox's /proc
// resolves to it whatever the new root shows.
func forkAhead(ns int, r IDRange) (*stub, error) {
	// The stub gets fds 0, 1, 2 and its two pipes and nothing else (the
	// init's own, such as the launcher's user namespace, stay here).
	if err := cloexec.All(); err != nil {
		return nil, fmt.Errorf("fork ahead: %w", err)
	}
	pr, pw, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("fork ahead: %w", err)
	}
	defer pr.Close()
	rr, rw, err := os.Pipe()
	if err != nil {
		pw.Close()
		return nil, fmt.Errorf("fork ahead: %w", err)
	}
	defer rw.Close()
	// One P: a stub needs no more, and has fewer threads to renice.
	env := []string{"HOME=/", "GOMAXPROCS=1"}
	filtered := false
	if v := os.Getenv(seccompEnv); v != "" {
		env, filtered = append(env, seccompEnv+"="+v), true
	}
	type forked struct {
		pid int
		err error
	}
	done := make(chan forked, 1)
	go func() {
		// Never unlocked: this thread's root and mount namespace are the
		// sandbox's, and it ends with the goroutine.
		runtime.LockOSThread()
		if err := unix.Unshare(unix.CLONE_FS); err != nil {
			done <- forked{err: fmt.Errorf("unshare fs: %w", err)}
			return
		}
		if err := unix.Setns(ns, unix.CLONE_NEWNS); err != nil {
			done <- forked{err: fmt.Errorf("enter the sandbox's mount namespace: %w", err)}
			return
		}
		attr := &syscall.ProcAttr{
			Dir: "/", Env: env, Files: []uintptr{0, 1, 2, pr.Fd(), rw.Fd()},
			Sys: &syscall.SysProcAttr{Credential: &syscall.Credential{Groups: []uint32{}}, Setpgid: true},
		}
		userNSAttr(attr.Sys, r)
		pid, err := syscall.ForkExec("/proc/self/exe", []string{stubArg0}, attr)
		done <- forked{pid, err}
	}()
	f := <-done
	if f.err != nil {
		pw.Close()
		rr.Close()
		return nil, fmt.Errorf("fork ahead: %w", f.err)
	}
	return &stub{pid: f.pid, order: pw, report: rr, filtered: filtered}, nil
}

// send sends the stub its order, after giving its threads the priority
// nice (it was forked at the warm pool's; nice is per thread).
func (s *stub) send(o stubOrder, nice int) error {
	renice(s.pid, nice)
	err := json.NewEncoder(s.order).Encode(o)
	if cerr := s.order.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("send the order: %w", err)
	}
	return nil
}

// started reads, once the stub has exited, the pid of the command it
// started, or why it could not start it (an errno from the command's exec,
// as an *os.SyscallError: see notStarted).
func (s *stub) started(m *marks) (int, error) {
	var rep stubReport
	err := json.NewDecoder(s.report).Decode(&rep)
	s.report.Close()
	switch {
	case err != nil:
		return 0, fmt.Errorf("read the report: %w", err)
	case rep.Errno != 0:
		return 0, &os.SyscallError{Syscall: "exec", Err: syscall.Errno(rep.Errno)}
	case rep.Error != "":
		return 0, fmt.Errorf("stub: %s", rep.Error)
	}
	*m = append(*m, rep.Marks...)
	return rep.Pid, nil
}

// stubReport is what a stub answers its order with.
type stubReport struct {
	Pid   int    `json:"pid,omitempty"`
	Errno int    `json:"errno,omitempty"` // the command's exec failed
	Error string `json:"error,omitempty"` // anything else failed
	Marks marks  `json:"marks,omitempty"` // its phases, for the launcher's trace
}

// discard kills a stub that will not be used and reaps it.
func (s *stub) discard() {
	s.order.Close()
	s.report.Close()
	_ = unix.Kill(s.pid, unix.SIGKILL)
	var ws unix.WaitStatus
	for {
		if _, err := unix.Wait4(s.pid, &ws, 0, nil); !errors.Is(err, unix.EINTR) {
			return
		}
	}
}

// stubMain is the whole life of a stub: it sets no_new_privs, loads the
// filter, waits for its order, starts the command and reports on fd 4.
// Without an order (the init is gone or discarded it) it exits quietly.
func stubMain() {
	rep := stubRun()
	_ = json.NewEncoder(os.NewFile(4, "report")).Encode(rep)
	os.Exit(0)
}

func stubRun() stubReport {
	unix.CloseOnExec(4)
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		return stubReport{Error: "set no_new_privs: " + err.Error()}
	}
	// The codecs' type caches, built now rather than on the exec's time.
	_ = json.Unmarshal([]byte(`{"bin":"/t","argv":["t"],"env":["A=b"],"dir":"/","uid":1,"nofile":1}`), &stubOrder{})
	_, _ = json.Marshal(stubReport{Pid: 1})
	if os.Getenv(seccompEnv) != "" {
		progs, err := filterFromEnv()
		if err == nil {
			err = loadStubFilter(progs)
		}
		if err != nil {
			return stubReport{Error: err.Error()}
		}
	}
	raw, err := readOrder()
	var m marks
	m.add("stub woke")
	var o stubOrder
	if err != nil || json.Unmarshal(raw, &o) != nil || len(o.Argv) == 0 {
		os.Exit(0) // no order
	}
	if err := o.limits(); err != nil {
		return stubReport{Error: err.Error()}
	}
	unix.Umask(0o022)
	m.add("stub fork")
	pid, err := syscall.ForkExec(o.Bin, o.Argv, &syscall.ProcAttr{
		Dir: o.Dir, Env: o.Env, Files: []uintptr{0, 1, 2},
		Sys: &syscall.SysProcAttr{
			Credential: &syscall.Credential{Uid: uint32(o.UID), Gid: uint32(o.GID), Groups: []uint32{}},
			// Its own process group, as a command the init forks has.
			Setpgid: true,
			// The init's child, not this stub's: the init reaps the
			// command as it ends, not only once this stub has exited.
			Cloneflags: unix.CLONE_PARENT,
		},
	})
	m.add("stub forked")
	var errno syscall.Errno
	switch {
	case errors.As(err, &errno):
		return stubReport{Errno: int(errno)}
	case err != nil:
		return stubReport{Error: err.Error()}
	}
	return stubReport{Pid: pid, Marks: m}
}

// readOrder reads fd 3 to its end with plain blocking reads on this
// thread. (Through os.File the pipe would be the runtime poller's, whose
// wake-up of a goroutine locked to the main thread takes a handoff between
// threads: about a millisecond on a loaded machine.)
func readOrder() ([]byte, error) {
	defer unix.Close(3)
	if err := unix.SetNonblock(3, false); err != nil {
		return nil, err
	}
	var out []byte
	buf := make([]byte, 64<<10)
	for {
		n, err := unix.Read(3, buf)
		switch {
		case errors.Is(err, unix.EINTR):
			continue
		case err != nil:
			return nil, err
		case n == 0:
			return out, nil
		}
		out = append(out, buf[:n]...)
	}
}

// limits sets the order's rlimits on this process; the command inherits
// them.
func (o stubOrder) limits() error {
	for _, l := range []struct {
		res int
		v   uint64
	}{{unix.RLIMIT_NOFILE, o.Nofile}, {unix.RLIMIT_AS, o.AS}, {unix.RLIMIT_NPROC, o.Nproc}} {
		if l.v > 0 {
			if err := unix.Setrlimit(l.res, &unix.Rlimit{Cur: l.v, Max: l.v}); err != nil {
				return fmt.Errorf("set rlimit %d: %w", l.res, err)
			}
		}
	}
	return nil
}

// loadStubFilter loads the filter on this thread for a stub, whose user
// namespace exists already: clone's "notify" for CLONE_NEWUSER (the init's
// exception for its own fork, see answerNewUser) becomes EPERM, so that
// every such clone of the command is refused as the rest of the filter's
// refusals are.
func loadStubFilter(progs [][]byte) error {
	for _, p := range bpfload.RefuseNewUser(progs) {
		if _, err := bpfload.Load(p, 0); err != nil {
			return err
		}
	}
	return nil
}
