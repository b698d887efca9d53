package supervise

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
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
			return Trailer{}, fmt.Errorf("%w: %v", ErrNoTrailer, err)
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
	if len(args) >= 1 && args[0] == "idle" {
		return idle()
	}
	usage := func() int {
		fmt.Fprintf(os.Stderr, "usage: %s idle | exec TIMEOUT_NS [wait] [nofile=N] -- ARGV...\n", Name)
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
	rest := args[2:]
	for ; len(rest) > 0 && rest[0] != "--"; rest = rest[1:] {
		if rest[0] == "wait" {
			wait = true
		} else if v, ok := strings.CutPrefix(rest[0], "nofile="); ok {
			if nofile, err = strconv.ParseUint(v, 10, 64); err != nil || nofile == 0 {
				fmt.Fprintf(os.Stderr, "%s: bad %q\n", Name, rest[0])
				return 2
			}
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
	t := supervise(rest[1:], time.Duration(timeout))
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
func supervise(argv []string, timeout time.Duration) Trailer {
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
	start := time.Now()
	pid, err := syscall.ForkExec(path, argv, &syscall.ProcAttr{
		Env:   os.Environ(),
		Files: []uintptr{0, 1, 2},
		Sys:   &syscall.SysProcAttr{Setpgid: true},
	})
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
