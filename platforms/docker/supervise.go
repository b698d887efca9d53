package docker

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// The supervisor is this same executable, bind-mounted read-only into every
// container at supervisorPath and recognised by its argv[0]. It is the
// container's idle PID 1 ("idle") and the parent of every exec ("exec"):
//
//	layerfs-supervise exec TIMEOUT_NS [wait] -- ARGV...
//
// runs ARGV in a new process group as a child subreaper, so that every
// process the command starts, even one that double-forks or calls setsid,
// stays its descendant; when the command ends, times out or the supervisor
// gets SIGTERM/SIGINT/SIGHUP, it SIGKILLs all descendants, reaps them, and
// writes a fixed-size trailer (exit status, signal, flags, command time on
// the container's clock) as the very last bytes of its stderr. With "wait"
// it first reads one byte from stdin: the host's word that it has moved the
// supervisor into the exec's cgroups (see cgroup.go).
const (
	supervisorName = "layerfs-supervise"
	supervisorDir  = "/.layerfs"
	supervisorPath = supervisorDir + "/" + supervisorName
)

// init turns the process into the supervisor when it runs under that name,
// before main or a test binary's flag parsing. This is the re-exec pattern:
// the binary that drives Docker is also the program it runs inside.
func init() {
	if filepath.Base(os.Args[0]) == supervisorName {
		os.Exit(superviseMain(os.Args[1:]))
	}
}

// trailer flags.
const (
	flagTimedOut  = 1 << 0 // the supervisor's own deadline passed
	flagCancelled = 1 << 1 // the host asked it to stop (SIGTERM/SIGINT/SIGHUP)
	flagNoStart   = 1 << 2 // the command could not be started
)

// trailerMagic starts the trailer; a NUL keeps it out of ordinary text.
const trailerMagic = "\x00layerfs-exec\x00"

// trailerLen is the fixed length of an encoded trailer.
var trailerLen = len(encodeTrailer(trailer{}))

// trailer is what the supervisor reports about one exec.
type trailer struct {
	Exit    int           // exit status 0-255, or 128+signal
	Signal  int           // signal that ended the command, or 0
	Flags   int           // flag* bits
	Command time.Duration // from just before fork to just after the command was reaped
}

func encodeTrailer(t trailer) []byte {
	return fmt.Appendf(nil, "%s%03d %03d %03d %020d\n", trailerMagic, t.Exit, t.Signal, t.Flags, int64(t.Command))
}

var errNoTrailer = errors.New("supervisor trailer missing")

func decodeTrailer(b []byte) (trailer, error) {
	if len(b) != trailerLen || !bytes.HasPrefix(b, []byte(trailerMagic)) || b[len(b)-1] != '\n' {
		return trailer{}, errNoTrailer
	}
	f := strings.Fields(string(b[len(trailerMagic) : len(b)-1]))
	if len(f) != 4 {
		return trailer{}, fmt.Errorf("%w: %d fields", errNoTrailer, len(f))
	}
	var n [4]int64
	for i, s := range f {
		v, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			return trailer{}, fmt.Errorf("%w: %v", errNoTrailer, err)
		}
		n[i] = v
	}
	return trailer{Exit: int(n[0]), Signal: int(n[1]), Flags: int(n[2]), Command: time.Duration(n[3])}, nil
}

func superviseMain(args []string) int {
	if len(args) >= 1 && args[0] == "idle" {
		return idle()
	}
	wait := len(args) > 2 && args[2] == "wait"
	if wait {
		args = append(args[:2:2], args[3:]...)
	}
	if len(args) < 4 || args[0] != "exec" || args[2] != "--" {
		fmt.Fprintf(os.Stderr, "usage: %s idle | exec TIMEOUT_NS [wait] -- ARGV...\n", supervisorName)
		return 2
	}
	timeout, err := strconv.ParseInt(args[1], 10, 64)
	if err != nil || timeout <= 0 {
		fmt.Fprintf(os.Stderr, "%s: bad timeout %q\n", supervisorName, args[1])
		return 2
	}
	if wait {
		// The host moves us into the exec's cgroups, then sends one byte;
		// the rest of stdin is the command's. EOF: the host gave up.
		var b [1]byte
		if n, _ := unix.Read(0, b[:]); n != 1 {
			t := trailer{Exit: 125, Flags: flagNoStart | flagCancelled}
			_, _ = os.Stderr.Write(encodeTrailer(t))
			return t.Exit
		}
	}
	t := supervise(args[3:], time.Duration(timeout))
	if _, err := os.Stderr.Write(encodeTrailer(t)); err != nil {
		return 125
	}
	return t.Exit
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
func supervise(argv []string, timeout time.Duration) trailer {
	if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
		fmt.Fprintf(os.Stderr, "%s: cannot become a subreaper: %v\n", supervisorName, err)
		return trailer{Exit: 126, Flags: flagNoStart}
	}
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, unix.SIGTERM, unix.SIGINT, unix.SIGHUP)

	path, err := exec.LookPath(argv[0])
	if err != nil {
		fmt.Fprintf(os.Stderr, "%s: %v\n", supervisorName, err)
		return trailer{Exit: noStartCode(err), Flags: flagNoStart}
	}
	start := time.Now()
	pid, err := syscall.ForkExec(path, argv, &syscall.ProcAttr{
		Env:   os.Environ(),
		Files: []uintptr{0, 1, 2},
		Sys:   &syscall.SysProcAttr{Setpgid: true},
	})
	if err != nil {
		fmt.Fprintf(os.Stderr, "%s: exec %s: %v\n", supervisorName, argv[0], err)
		return trailer{Exit: noStartCode(err), Flags: flagNoStart}
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
			flags <- flagTimedOut
		case <-sigs:
			flags <- flagCancelled
		case <-stop:
			return
		}
		killDescendants()
	}()

	var t trailer
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
		killDescendants()
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

// killDescendants SIGKILLs every live descendant of this process until none
// is left. Being a subreaper, every process the command started is one.
func killDescendants() {
	self := os.Getpid()
	for range 1000 {
		ds := descendants(self)
		if len(ds) == 0 {
			return
		}
		for _, p := range ds {
			_ = unix.Kill(p, unix.SIGKILL) // it may have just exited
		}
		time.Sleep(time.Millisecond)
	}
}

// descendants lists the live (non-zombie) descendants of root from /proc.
func descendants(root int) []int {
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
		ppid, state, ok := procStat(pid)
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

// procStat reads the parent pid and state of pid from /proc/PID/stat.
func procStat(pid int) (ppid int, state byte, ok bool) {
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
