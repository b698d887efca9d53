package main

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// The supervisor keeps a daemon's crash from costing anything but a moment.
// `layerfsd serve --supervise` runs as a small parent process that starts
// the daemon proper (the same command without --supervise) as its child
// and is a child subreaper, so that:
//
//   - whatever the daemon leaves when it dies (sandbox inits killed by
//     their parent-death signal, and their PID namespaces with them) is
//     reparented to the supervisor and reaped, never left a zombie of an
//     init that does not reap;
//   - a daemon that dies of a signal (kill -9, the OOM killer) or a panic
//     is started again at once, and recovers the Store's workspaces before
//     it answers, so the next call works without anyone stepping in.
//
// A daemon that exits on its own (SIGTERM, an API stop, idle exit, or an
// error it reported, such as a Store another daemon serves) ends the
// supervisor with the same status. SIGTERM and SIGINT are passed on. The
// daemon gets SIGTERM if the supervisor itself dies.

// supervisorEnv tells the daemon its supervisor's pid (for daemon status).
const supervisorEnv = "LAYERFSD_SUPERVISOR"

// readyEnv names the descriptor on which the daemon tells its supervisor
// that it serves; it writes one byte there and closes it.
const readyEnv = "LAYERFSD_READY_FD"

// Restart policy: a daemon that dies after it served is started again at
// once, however often; one that keeps dying before it serves (a broken
// Store, a bad flag) is given up after maxEarlyDeaths in a row.
const (
	maxEarlyDeaths = 5
	restartDelay   = 50 * time.Millisecond
)

// SupervisorLockName is the file whose flock marks a Store's supervisor, held
// for its life: a command that finds no daemon answering but this lock held
// waits for the supervisor's restart rather than starting a daemon itself.
const SupervisorLockName = "layerfsd.supervisor.lock"

// supervise runs the daemon of the Store in dir with args (serve's own,
// without --supervise) until it ends by itself, and returns its exit code.
func supervise(dir string, args []string, stderr io.Writer) int {
	log := slog.New(slog.NewJSONHandler(stderr, nil)).With("supervisor", os.Getpid())
	if err := os.MkdirAll(dir, 0o700); err != nil {
		log.Error("store directory", "err", err)
		return 1
	}
	lock, err := os.OpenFile(filepath.Join(dir, SupervisorLockName), os.O_RDWR|os.O_CREATE, 0o600)
	if err == nil {
		err = syscall.Flock(int(lock.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
	}
	if err != nil {
		fmt.Fprintf(stderr, "layerfsd: another layerfsd already serves the store %s (its supervisor holds %s: %v)\n", dir, SupervisorLockName, err)
		return 1
	}
	defer lock.Close()
	if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
		log.Error("become a child subreaper", "err", err)
		return 1
	}
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT)
	exits := make(chan exit, 16)
	go reapAll(exits)

	early := 0         // deaths in a row before serving
	restarted := false // the daemon running is a restart after a crash
	stopping := false
	for {
		pid, ready, err := startSupervised(args)
		if err != nil {
			log.Error("start the daemon", "err", err)
			return 1
		}
		log.Info("daemon started", "pid", pid)
		var ws unix.WaitStatus
		tick := time.NewTicker(100 * time.Millisecond)
	wait:
		for {
			select {
			case <-tick.C:
				// Killed while waiting on its own mount, it cannot finish
				// dying until its FUSE connections are aborted.
				if dying(pid) {
					unstick(pid, dir, log)
				}
			case s := <-sigs:
				stopping = true
				_ = unix.Kill(pid, s.(syscall.Signal))
			case e := <-exits:
				if e.pid == pid {
					ws = e.status
					break wait
				}
				// An orphan of a dead daemon, reaped.
			}
		}
		tick.Stop()
		crashed := ws.Signaled() || ws.ExitStatus() == 2 // a signal, or a Go panic
		didServe := served(ready)
		// A daemon that ends by itself ends the supervisor, unless it is a
		// restart that failed before serving (what its predecessor left
		// may still be going away): that is retried like a crash.
		if stopping || (!crashed && (didServe || !restarted)) {
			lock.Close() // a new daemon may start now
			log.Info("daemon ended", "pid", pid, "status", describe(ws))
			drainOrphans(exits)
			return ws.ExitStatus()
		}
		restarted = true
		if didServe {
			early = 0
		} else if early++; early >= maxEarlyDeaths {
			log.Error("daemon keeps dying before it serves; giving up", "pid", pid, "status", describe(ws), "attempts", early)
			drainOrphans(exits)
			return 1
		}
		log.Warn("daemon died; starting it again", "pid", pid, "status", describe(ws))
		time.Sleep(restartDelay << min(early, 4)) // backing off while it dies early
	}
}

type exit struct {
	pid    int
	status unix.WaitStatus
}

// reapAll waits for every child, the daemon and the orphans it left, and
// reports each.
func reapAll(exits chan<- exit) {
	for {
		var ws unix.WaitStatus
		pid, err := unix.Wait4(-1, &ws, 0, nil)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil { // ECHILD: none now; a new daemon may come
			time.Sleep(50 * time.Millisecond)
			continue
		}
		exits <- exit{pid, ws}
	}
}

// drainOrphans reaps, for a moment, what the daemon's end left behind.
func drainOrphans(exits <-chan exit) {
	t := time.NewTimer(500 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-exits:
		case <-t.C:
			return
		}
	}
}

// startSupervised starts this binary as the daemon, in this process's
// session, killed with SIGTERM (a clean shutdown) if the supervisor dies.
// ready is the read end of the pipe on which it tells that it serves.
func startSupervised(args []string) (pid int, ready *os.File, err error) {
	exe, err := os.Executable()
	if err != nil {
		return 0, nil, err
	}
	r, w, err := os.Pipe()
	if err != nil {
		return 0, nil, err
	}
	defer w.Close()
	env := append(os.Environ(), supervisorEnv+"="+strconv.Itoa(os.Getpid()), readyEnv+"=3")
	p, err := os.StartProcess(exe, append([]string{exe}, args...), &os.ProcAttr{
		Dir:   "/",
		Env:   env,
		Files: []*os.File{os.Stdin, os.Stdout, os.Stderr, w},
		Sys:   &syscall.SysProcAttr{Pdeathsig: syscall.SIGTERM},
	})
	if err != nil {
		r.Close()
		return 0, nil, err
	}
	pid = p.Pid
	_ = p.Release() // reapAll waits for it
	return pid, r, nil
}

// served reports whether the daemon behind ready said it served, and
// closes ready. The daemon is dead by now, so the read does not block.
func served(ready *os.File) bool {
	defer ready.Close()
	var b [1]byte
	n, _ := ready.Read(b[:])
	return n == 1
}

// tellSupervisor tells a supervisor, if there is one, that this daemon
// serves.
func tellSupervisor() {
	fd, err := strconv.Atoi(os.Getenv(readyEnv))
	if err != nil || fd < 3 {
		return
	}
	f := os.NewFile(uintptr(fd), "ready")
	_, _ = f.Write([]byte{1})
	f.Close()
}

func describe(ws unix.WaitStatus) string {
	if ws.Signaled() {
		return "killed by " + unix.SignalName(ws.Signal())
	}
	return fmt.Sprintf("exit %d", ws.ExitStatus())
}
