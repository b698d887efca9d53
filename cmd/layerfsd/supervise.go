package main

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"slices"
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

// Restart policy: a daemon that keeps dying is not restarted forever.
const (
	maxRestarts   = 5
	restartWindow = time.Minute
	restartDelay  = 100 * time.Millisecond
)

// supervise runs the daemon with args (serve's own, without --supervise)
// until it ends by itself, and returns its exit code.
func supervise(args []string, stderr io.Writer) int {
	log := slog.New(slog.NewJSONHandler(stderr, nil)).With("supervisor", os.Getpid())
	if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
		log.Error("become a child subreaper", "err", err)
		return 1
	}
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT)
	exits := make(chan exit, 16)
	go reapAll(exits)

	var restarts []time.Time
	stopping := false
	for {
		pid, err := startSupervised(args)
		if err != nil {
			log.Error("start the daemon", "err", err)
			return 1
		}
		log.Info("daemon started", "pid", pid)
		var ws unix.WaitStatus
	wait:
		for {
			select {
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
		crashed := ws.Signaled() || ws.ExitStatus() == 2 // a signal, or a Go panic
		if stopping || !crashed {
			log.Info("daemon ended", "pid", pid, "status", describe(ws))
			drainOrphans(exits)
			return ws.ExitStatus()
		}
		now := time.Now()
		restarts = append(slices.DeleteFunc(restarts, func(t time.Time) bool { return now.Sub(t) > restartWindow }), now)
		if len(restarts) > maxRestarts {
			log.Error("daemon keeps dying; giving up", "pid", pid, "status", describe(ws), "restarts", len(restarts)-1)
			drainOrphans(exits)
			return 1
		}
		log.Warn("daemon died; starting it again", "pid", pid, "status", describe(ws))
		time.Sleep(restartDelay)
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
	t := time.NewTimer(2 * time.Second)
	defer t.Stop()
	for {
		select {
		case <-exits:
		case <-t.C:
			return
		}
	}
}

// startSupervised starts this binary as the daemon, in this process's session,
// killed with SIGTERM (a clean shutdown) if the supervisor dies.
func startSupervised(args []string) (int, error) {
	exe, err := os.Executable()
	if err != nil {
		return 0, err
	}
	env := append(os.Environ(), supervisorEnv+"="+strconv.Itoa(os.Getpid()))
	p, err := os.StartProcess(exe, append([]string{exe}, args...), &os.ProcAttr{
		Dir:   "/",
		Env:   env,
		Files: []*os.File{os.Stdin, os.Stdout, os.Stderr},
		Sys:   &syscall.SysProcAttr{Pdeathsig: syscall.SIGTERM},
	})
	if err != nil {
		return 0, err
	}
	pid := p.Pid
	_ = p.Release() // reapAll waits for it
	return pid, nil
}

func describe(ws unix.WaitStatus) string {
	if ws.Signaled() {
		return "killed by " + unix.SignalName(ws.Signal())
	}
	return fmt.Sprintf("exit %d", ws.ExitStatus())
}
