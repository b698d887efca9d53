package supervise

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"layerfs.dev/layerfs/internal/platforms/internal/userns"
	"layerfs.dev/layerfs/internal/seccomp/bpfload"
)

// Name is the supervisor's program name; a binary run under it (argv[0]'s
// base name) is a supervisor.
const Name = "layerfs-supervise"

// Trailer flags.
const (
	FlagTimedOut  = 1 << 0 // the supervisor's own deadline passed
	FlagCancelled = 1 << 1 // the host asked it to stop (SIGTERM/SIGINT/SIGHUP)
	FlagNoStart   = 1 << 2 // the command could not be started
)

// trailerMagic starts the trailer; a NUL keeps it out of ordinary text.
const trailerMagic = "\x00layerfs-exec\x00"

// TrailerLen is the fixed length of an encoded trailer.
var TrailerLen = len(Trailer{}.Encode())

// Trailer is what the supervisor reports about one exec.
type Trailer struct {
	Exit    int           // exit status 0-255, or 128+signal
	Signal  int           // signal that ended the command, or 0
	Flags   int           // flag* bits
	Command time.Duration // from just before fork to just after the command was reaped
}

// Encode returns the trailer's fixed-size text form.
func (t Trailer) Encode() []byte {
	return fmt.Appendf(nil, "%s%03d %03d %03d %020d\n", trailerMagic, t.Exit, t.Signal, t.Flags, int64(t.Command))
}

// ErrNoTrailer: the bytes are not a trailer.
var ErrNoTrailer = errors.New("supervisor trailer missing")

// DecodeTrailer parses a trailer of exactly TrailerLen bytes.
func DecodeTrailer(b []byte) (Trailer, error) {
	if len(b) != TrailerLen || !bytes.HasPrefix(b, []byte(trailerMagic)) || b[len(b)-1] != '\n' {
		return Trailer{}, ErrNoTrailer
	}
	f := strings.Fields(string(b[len(trailerMagic) : len(b)-1]))
	if len(f) != 4 {
		return Trailer{}, fmt.Errorf("%w: %d fields", ErrNoTrailer, len(f))
	}
	var n [4]int64
	for i, s := range f {
		v, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			return Trailer{}, fmt.Errorf("%w: %w", ErrNoTrailer, err)
		}
		n[i] = v
	}
	return Trailer{Exit: int(n[0]), Signal: int(n[1]), Flags: int(n[2]), Command: time.Duration(n[3])}, nil
}

// Main runs the supervisor with its arguments (os.Args[1:]) and returns its
// exit status:
//
//	idle                          the container's PID 1: reap orphans, exit on SIGTERM
//	exec TIMEOUT_NS [wait] [nofile=N] -- ARGV  run ARGV; see the package documentation
func Main(args []string) int {
	if len(args) >= 1 {
		switch args[0] {
		case "idle":
			return idle()
		case "hold":
			userns.WaitStdin()
			return 0
		case "enter":
			return enter(args[1:])
		case "pivot":
			return pivot(args[1:])
		}
	}
	usage := func() int {
		fmt.Fprintf(os.Stderr, "usage: %s idle | hold | exec TIMEOUT_NS [wait] [nofile=N] [userns=HOST:SIZE] -- ARGV...\n", Name)
		return 2
	}
	if len(args) < 2 || args[0] != "exec" {
		return usage()
	}
	timeout, err := strconv.ParseInt(args[1], 10, 64)
	if err != nil || timeout <= 0 {
		fmt.Fprintf(os.Stderr, "%s: bad timeout %q\n", Name, args[1])
		return 2
	}
	wait, nofile := false, uint64(0)
	var ids *userns.Range
	var cred *syscall.Credential
	rest := args[2:]
	for ; len(rest) > 0 && rest[0] != "--"; rest = rest[1:] {
		if rest[0] == "wait" {
			wait = true
		} else if v, ok := strings.CutPrefix(rest[0], "nofile="); ok {
			if nofile, err = strconv.ParseUint(v, 10, 64); err != nil || nofile == 0 {
				fmt.Fprintf(os.Stderr, "%s: bad %q\n", Name, rest[0])
				return 2
			}
		} else if v, ok := strings.CutPrefix(rest[0], "userns="); ok {
			r, err := userns.ParseArg(v)
			if err != nil {
				fmt.Fprintf(os.Stderr, "%s: bad %q: %v\n", Name, rest[0], err)
				return 2
			}
			ids = &r
		} else if v, ok := strings.CutPrefix(rest[0], "as="); ok {
			u, g, ok := strings.Cut(v, ":")
			uid, err1 := strconv.ParseUint(u, 10, 32)
			gid, err2 := strconv.ParseUint(g, 10, 32)
			if !ok || err1 != nil || err2 != nil {
				fmt.Fprintf(os.Stderr, "%s: bad %q: want as=UID:GID\n", Name, rest[0])
				return 2
			}
			cred = &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid), Groups: []uint32{}}
		} else {
			return usage()
		}
	}
	if len(rest) < 2 {
		return usage()
	}
	if wait {
		// In a pids cgroup that the command may fill (a fork bomb), the Go
		// runtime must not need a new thread later: a failed clone of its
		// own is fatal. Idle threads are kept, so make them now.
		warmThreads(spareThreads)
		// The host moves us into the exec's cgroups, then sends one byte;
		// the rest of stdin is the command's. EOF: the host gave up.
		var b [1]byte
		if n, _ := unix.Read(0, b[:]); n != 1 {
			t := Trailer{Exit: 125, Flags: FlagNoStart | FlagCancelled}
			_, _ = os.Stderr.Write(t.Encode())
			return t.Exit
		}
	}
	if nofile > 0 {
		// The command inherits it; the supervisor needs only a few files.
		if err := unix.Setrlimit(unix.RLIMIT_NOFILE, &unix.Rlimit{Cur: nofile, Max: nofile}); err != nil {
			fmt.Fprintf(os.Stderr, "%s: set the open files limit: %v\n", Name, err)
			t := Trailer{Exit: 126, Flags: FlagNoStart}
			_, _ = os.Stderr.Write(t.Encode())
			return t.Exit
		}
	}
	if cred != nil && ids == nil {
		fmt.Fprintf(os.Stderr, "%s: as= needs userns=\n", Name)
		return 2
	}
	t := supervise(rest[1:], time.Duration(timeout), ids, cred)
	if _, err := os.Stderr.Write(t.Encode()); err != nil {
		return 125
	}
	return t.Exit
}

// spareThreads is how many OS threads the supervisor makes before it
// starts a command under a pids limit; the host's limit has headroom for
// them (and the runtime's own).
const spareThreads = 6

// warmThreads makes the runtime start n OS threads and keep them idle.
func warmThreads(n int) {
	var started sync.WaitGroup
	release := make(chan struct{})
	var done sync.WaitGroup
	for range n {
		started.Add(1)
		done.Add(1)
		go func() {
			defer done.Done()
			runtime.LockOSThread() // a thread of its own, until unlocked
			started.Done()
			<-release
			runtime.UnlockOSThread() // back to the idle pool, not exited
		}()
	}
	started.Wait()
	close(release)
	done.Wait()
}

// idle is the container's PID 1: it reaps orphans and exits on SIGTERM.
func idle() int {
	sig := make(chan os.Signal, 8)
	signal.Notify(sig, unix.SIGTERM, unix.SIGINT, unix.SIGHUP, unix.SIGCHLD)
	for s := range sig {
		if s != unix.SIGCHLD {
			return 0
		}
		for {
			var ws unix.WaitStatus
			pid, err := unix.Wait4(-1, &ws, unix.WNOHANG, nil)
			if pid <= 0 || err != nil {
				break
			}
		}
	}
	return 0
}

// supervise runs argv and returns its trailer once the command and every
// process it started are gone.
func supervise(argv []string, timeout time.Duration, ids *userns.Range, cred *syscall.Credential) Trailer {
	if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
		fmt.Fprintf(os.Stderr, "%s: cannot become a subreaper: %v\n", Name, err)
		return Trailer{Exit: 126, Flags: FlagNoStart}
	}
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, unix.SIGTERM, unix.SIGINT, unix.SIGHUP)

	path, err := exec.LookPath(argv[0])
	if err != nil {
		fmt.Fprintf(os.Stderr, "%s: %v\n", Name, err)
		return Trailer{Exit: noStartCode(err), Flags: FlagNoStart}
	}
	attr := &syscall.ProcAttr{
		Env:   os.Environ(),
		Files: []uintptr{0, 1, 2},
		Sys:   &syscall.SysProcAttr{Setpgid: true},
	}
	if ids != nil {
		// The command is started by this binary again ("enter"), already
		// in its user namespace, which loads the filter and execs it.
		argv = append([]string{Name, "enter", "--", path}, argv...)
		path = "/proc/self/exe"
		attr.Sys.Cloneflags = syscall.CLONE_NEWUSER
		attr.Sys.UidMappings, attr.Sys.GidMappings = ids.Mapping(), ids.Mapping()
		attr.Sys.GidMappingsEnableSetgroups = true
		attr.Sys.Credential = cred // the ids inside the namespace
	} else {
		attr.Env = withoutFilter(attr.Env)
	}
	start := time.Now()
	pid, err := syscall.ForkExec(path, argv, attr)
	if err != nil {
		fmt.Fprintf(os.Stderr, "%s: exec %s: %v\n", Name, argv[0], err)
		return Trailer{Exit: noStartCode(err), Flags: FlagNoStart}
	}

	// The deadline and the host's signals kill the tree from a goroutine;
	// the main goroutine keeps reaping, so it sees the command end either way.
	stop := make(chan struct{})
	flags := make(chan int, 1)
	go func() {
		timer := time.NewTimer(timeout)
		defer timer.Stop()
		select {
		case <-timer.C:
			flags <- FlagTimedOut
		case <-sigs:
			flags <- FlagCancelled
		case <-stop:
			return
		}
		KillDescendants(os.Getpid())
	}()

	var t Trailer
	for {
		var ws unix.WaitStatus
		wpid, err := unix.Wait4(-1, &ws, 0, nil)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil { // ECHILD: nothing is left
			break
		}
		if wpid != pid {
			continue // an orphan the subreaper inherited
		}
		t.Command = time.Since(start)
		switch {
		case ws.Exited():
			t.Exit = ws.ExitStatus()
		case ws.Signaled():
			t.Signal = int(ws.Signal())
			t.Exit = 128 + t.Signal
		}
		// The command is done; whatever it left behind goes with it.
		KillDescendants(os.Getpid())
	}
	close(stop)
	select {
	case f := <-flags:
		t.Flags |= f
	default:
	}
	return t
}

func noStartCode(err error) int {
	if errors.Is(err, exec.ErrNotFound) || errors.Is(err, os.ErrNotExist) {
		return 127
	}
	return 126
}

// KillDescendants SIGKILLs every live descendant of root until none is
// left. In the supervisor (a subreaper, root itself), every process the
// command started is one.
func KillDescendants(root int) {
	for range 1000 {
		ds := Descendants(root)
		if len(ds) == 0 {
			return
		}
		for _, p := range ds {
			_ = unix.Kill(p, unix.SIGKILL) // it may have just exited
		}
		time.Sleep(time.Millisecond)
	}
}

// Descendants lists the live (non-zombie) descendants of root from /proc.
func Descendants(root int) []int {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	children := map[int][]int{}
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		ppid, state, ok := ProcStat(pid)
		if !ok || state == 'Z' || state == 'X' {
			continue
		}
		children[ppid] = append(children[ppid], pid)
	}
	var out []int
	queue := []int{root}
	for len(queue) > 0 {
		p := queue[0]
		queue = queue[1:]
		for _, c := range children[p] {
			out = append(out, c)
			queue = append(queue, c)
		}
	}
	return out
}

// ProcStat reads the parent pid and state of pid from /proc/PID/stat.
func ProcStat(pid int) (ppid int, state byte, ok bool) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, 0, false
	}
	// The command name is in parentheses and may contain anything.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 || i+2 >= len(b) {
		return 0, 0, false
	}
	f := strings.Fields(string(b[i+2:]))
	if len(f) < 2 {
		return 0, 0, false
	}
	ppid, err = strconv.Atoi(f[1])
	if err != nil {
		return 0, 0, false
	}
	return ppid, f[0][0], true
}

// FilterEnv is the environment variable in which the host sends an exec in
// a user namespace its seccomp filter (bpfload.Encode of the programs,
// with clone into a new user namespace refused). The command never sees
// it.
const FilterEnv = "LAYERFS_SUPERVISE_SECCOMP"

// enter is the command's first moment in its user namespace: the
// supervisor forked it there (which the container's seccomp profile
// allows) and re-executed itself as "enter -- PATH ARGV...". It loads the
// sandbox's filter, which refuses every further namespace, and becomes the
// command. no_new_privs, which seccomp(2) requires of a process without
// CAP_SYS_ADMIN, is set already in a container (no-new-privileges); enter
// sets it again so as not to depend on that.
func enter(args []string) int {
	if len(args) < 3 || args[0] != "--" {
		fmt.Fprintf(os.Stderr, "usage: %s enter -- PATH ARGV...\n", Name)
		return 126
	}
	progs, err := bpfload.Decode(os.Getenv(FilterEnv))
	if err != nil {
		fmt.Fprintf(os.Stderr, "%s: %v\n", Name, err)
		return 126
	}
	env := withoutFilter(os.Environ())
	// The filter is this thread's (no TSYNC), and exec replaces the
	// process from this thread.
	runtime.LockOSThread()
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		fmt.Fprintf(os.Stderr, "%s: set no_new_privs: %v\n", Name, err)
		return 126
	}
	for _, p := range progs {
		if err := bpfload.Load(p); err != nil {
			fmt.Fprintf(os.Stderr, "%s: %v\n", Name, err)
			return 126
		}
	}
	err = syscall.Exec(args[1], args[2:], env)
	fmt.Fprintf(os.Stderr, "%s: exec %s: %v\n", Name, args[2], err)
	return noStartCode(err)
}

// withoutFilter is env without FilterEnv.
func withoutFilter(env []string) []string {
	return slices.DeleteFunc(env, func(kv string) bool { return strings.HasPrefix(kv, FilterEnv+"=") })
}
