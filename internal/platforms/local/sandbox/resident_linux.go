package sandbox

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime/debug"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"layerfs.dev/layerfs/internal/cloexec"
)

// A resident init keeps its sandbox for processes that outlive the call
// that started them (services) and runs every later command of its
// workspace beside them, side by side: the init's side of it is here, the
// launcher's in service_linux.go.
//
// An init becomes resident at its first job (initConfig.Job), which is
// always a service: the workspace is mounted once, for good, and the init
// never resets its sandbox again, since the services hold what a reset
// would take away (their files in /tmp and /dev/shm, their System V IPC
// objects and message queues, the workspace they run in). Each job is
// forked from the init's main thread in a process group of its own, as a
// plain exec's command is; a goroutine reaps every child of the init (the
// jobs and whatever they leave to it) and reports each job's end on the
// control socket, named by its job. When an exec's command ends, its
// process group is killed, as is a service's when it ends or is stopped;
// a process that left its group (setsid, setpgid) lives on beside the
// services until the sandbox ends, as a process left by a `docker exec`
// does in its container. The launcher signals a job's group with a control
// message (residentSignal); closing the control socket ends the init and
// with it the PID namespace, so every process in it.
//
// A job with a terminal gets a pseudo-terminal as a plain exec does; its
// master goes to the launcher in a message naming the job ("pty:ID").
//
// What a resident init does not do for an exec: reset /tmp, /dev/shm and
// IPC (see above); unmount the workspace; retire after a command that
// changed its nice value, scheduling policy, CPU affinity or I/O priority
// (later commands inherit them: they are the workspace's own commands in
// its one sandbox). Rlimits are refused for its jobs by the launcher,
// since the init sets them on itself around a fork and, in a user
// namespace, cannot raise them back.

// residentSignal is a control message from the launcher to a resident
// init: signal a job's process group. It carries no descriptors.
type residentSignal struct {
	Job    uint64 `json:"job"`
	Signal int    `json:"signal"`
	// Renew asks for a new control socket instead (renewControl).
	Renew bool `json:"renew,omitempty"`
}

// resident is a resident init's jobs.
type resident struct {
	in *sandboxInit

	// mu is held across a fork and the job's registration, so that the
	// reaper, which takes it for each child it reaps, never sees a job's
	// end before the job.
	mu     sync.Mutex
	byPid  map[int]*job
	byID   map[uint64]*job
	forked chan struct{} // a child was forked (wakes a reaper with none)

	sendMu sync.Mutex // one report at a time on the control socket
}

// job is one command of a resident init.
type job struct {
	id       uint64
	pid      int // also its process group
	service  bool
	start    time.Time
	timedOut atomic.Bool
	timer    *time.Timer
}

// becomeResident makes the init resident and starts its first job: cfg,
// whose workspace is mounted and is the working directory.
func (in *sandboxInit) becomeResident(cfg *initConfig, x *execFDs) {
	// A resident init lives long and allocates with every job.
	debug.SetGCPercent(100)
	in.res = &resident{in: in, byPid: map[int]*job{}, byID: map[uint64]*job{}, forked: make(chan struct{}, 1)}
	in.holdNothingOfTheHost()
	go in.res.reap()
	in.res.startJob(cfg, x)
}

// holdNothingOfTheHost lets go of what the init still holds of the
// host's (its standard descriptors, the host's /dev/null; the mqueue mount
// a reset would use, which a resident init never does), so that its
// sandbox can be checkpointed: everything it holds then is the sandbox's
// own, but for the control socket.
func (in *sandboxInit) holdNothingOfTheHost() {
	if in.mqueue >= 0 {
		unix.Close(in.mqueue)
		in.mqueue = -1
	}
	null, err := unix.Open("/dev/null", unix.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		return
	}
	for fd := range 3 {
		_ = unix.Dup3(null, fd, 0)
	}
	unix.Close(null)
}

// loop serves the resident init's jobs and signals until the launcher
// closes the control socket; then it kills everything in the namespace.
func (r *resident) loop() int {
	for {
		x, sig, err := receiveResident()
		if errors.Is(err, io.EOF) {
			_ = unix.Kill(-1, unix.SIGKILL)
			return 0
		}
		if err != nil {
			_ = unix.Kill(-1, unix.SIGKILL)
			return 1
		}
		if sig != nil && sig.Renew {
			r.renewControl()
			continue
		}
		if sig != nil {
			r.signal(*sig)
			continue
		}
		r.serve(x)
	}
}

// serve reads a job's config and starts it.
func (r *resident) serve(x *execFDs) {
	defer x.close()
	var cfg initConfig
	f := os.NewFile(uintptr(x.take(msgConfig)), "config")
	err := json.NewDecoder(f).Decode(&cfg)
	f.Close()
	switch {
	case err != nil:
		r.send(initReport{Error: "read config: " + err.Error(), Ended: true})
		return
	case cfg.Job == 0:
		r.send(initReport{Error: "a resident init got an exec that is no job", Ended: true})
		return
	case cfg.RootDir != r.in.image || cfg.Network != r.in.network || cfg.Seccomp != r.in.filtered:
		r.send(initReport{Job: cfg.Job, Error: "a job of another sandbox (network, root or filter)", Ended: true})
		return
	}
	if err := unix.Chdir(cfg.Dir); err != nil {
		r.send(initReport{Job: cfg.Job, Error: fmt.Sprintf("chdir %s: %v", cfg.Dir, err), Ended: true})
		return
	}
	r.startJob(&cfg, x)
}

// startJob forks cfg's command in a process group of its own and
// registers it; a service's start is reported at once. The working
// directory is the job's; it is "/" again when startJob returns.
func (r *resident) startJob(cfg *initConfig, x *execFDs) {
	defer func() { _ = unix.Chdir("/") }()
	fail := func(rep initReport) {
		rep.Job, rep.Ended = cfg.Job, true
		r.send(rep)
	}
	if cfg.RlimitAS != 0 || cfg.RlimitNproc != 0 || cfg.RlimitNofile != 0 {
		fail(initReport{Error: "a job of a resident init takes no rlimits"})
		return
	}
	bin, err := lookPath(cfg.Argv[0], cfg.Env)
	if err != nil {
		fail(notStartedJob(x.fd[msgStderr], cfg.Argv[0], err))
		return
	}
	if err := cloexec.All(); err != nil {
		fail(initReport{Error: err.Error()})
		return
	}
	unix.Umask(0o022)
	attr := &syscall.ProcAttr{
		Env:   cfg.Env,
		Files: []uintptr{uintptr(x.fd[msgStdin]), uintptr(x.fd[msgStdout]), uintptr(x.fd[msgStderr])},
		Sys: &syscall.SysProcAttr{
			Credential: &syscall.Credential{Uid: uint32(cfg.UID), Gid: uint32(cfg.GID), Groups: []uint32{}},
			Setpgid:    true,
		},
	}
	var term *terminal
	if cfg.TTY != nil {
		if term, err = openTerminal(cfg); err != nil {
			fail(initReport{Error: err.Error()})
			return
		}
		defer term.close()
		// A session of its own with the terminal as its controlling one.
		attr.Files = []uintptr{uintptr(term.slave), uintptr(term.slave), uintptr(term.slave)}
		attr.Sys.Setpgid, attr.Sys.Setsid, attr.Sys.Setctty, attr.Sys.Ctty = false, true, true, 0
	}
	r.mu.Lock()
	start := time.Now()
	pid, err := syscall.ForkExec(bin, cfg.Argv, attr)
	if err != nil {
		r.mu.Unlock()
		fail(notStartedJob(x.fd[msgStderr], cfg.Argv[0], err))
		return
	}
	if term != nil {
		// Before the reaper can report the job's end. Only the launcher
		// holds the master from here on: closing it hangs the terminal up.
		r.sendMu.Lock()
		if err := unix.Sendmsg(ctlFD, []byte(ptyMessage+":"+strconv.FormatUint(cfg.Job, 10)), unix.UnixRights(term.master), nil, 0); err != nil {
			_ = unix.Kill(-pid, unix.SIGKILL)
		}
		r.sendMu.Unlock()
		term.close()
	}
	j := &job{id: cfg.Job, pid: pid, service: cfg.Service, start: start}
	r.byPid[pid], r.byID[j.id] = j, j
	if !j.service && cfg.Timeout > 0 {
		j.timer = time.AfterFunc(cfg.Timeout, func() {
			j.timedOut.Store(true)
			_ = unix.Kill(-pid, unix.SIGKILL)
		})
	}
	if j.service {
		// Before the reaper can report its end: it waits for r.mu.
		r.send(initReport{Job: j.id, Pid: pid, Started: true})
	}
	r.mu.Unlock()
	for _, i := range []int{msgStdin, msgStdout, msgStderr} {
		unix.Close(x.take(i))
	}
	_ = keepAfterFork(r.in.userNS)
	select {
	case r.forked <- struct{}{}:
	default:
	}
}

// notStartedJob is notStarted for a job: the message also goes in the
// report, so that the call that started a service can answer with it.
func notStartedJob(stderr int, name string, err error) initReport {
	rep := notStarted(stderr, name, err)
	rep.NotStarted = fmt.Sprintf("%s: %v", name, err)
	return rep
}

// signal sends a job's process group the launcher's signal.
func (r *resident) signal(s residentSignal) {
	r.mu.Lock()
	j := r.byID[s.Job]
	r.mu.Unlock()
	if j != nil && s.Signal > 0 && s.Signal < 65 {
		_ = unix.Kill(-j.pid, unix.Signal(s.Signal))
	}
}

// reap reaps every child of the init, for good: a job's end is reported
// once its process group has been killed.
func (r *resident) reap() {
	for {
		var ws unix.WaitStatus
		pid, err := unix.Wait4(-1, &ws, 0, nil)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil { // ECHILD: none now
			<-r.forked
			continue
		}
		end := time.Now()
		r.mu.Lock()
		j := r.byPid[pid]
		if j != nil {
			delete(r.byPid, pid)
			delete(r.byID, j.id)
		}
		r.mu.Unlock()
		if j == nil {
			continue // a process a job left to the init
		}
		if j.timer != nil {
			j.timer.Stop()
		}
		rep := initReport{Job: j.id, Started: true, Ended: true, Command: end.Sub(j.start), TimedOut: j.timedOut.Load()}
		if ws.Signaled() {
			rep.ExitCode, rep.Signal = 128+int(ws.Signal()), unix.SignalName(ws.Signal())
		} else {
			rep.ExitCode = ws.ExitStatus()
		}
		// What the command left in its group goes with it, and is gone
		// (reaped by this goroutine) before the job's end is reported.
		if unix.Kill(-pid, unix.SIGKILL) == nil {
			go r.sendWhenGone(pid, rep)
			continue
		}
		r.send(rep)
	}
}

// sendWhenGone sends rep once process group pgid is empty (its zombies
// reaped), or after a bound: a process that survives SIGKILL there is in
// an uninterruptible sleep, and the job's end is no less true.
func (r *resident) sendWhenGone(pgid int, rep initReport) {
	for i := 0; i < 1000 && unix.Kill(-pgid, 0) == nil; i++ {
		time.Sleep(time.Millisecond)
	}
	r.send(rep)
}

// send writes a report on the control socket.
func (r *resident) send(rep initReport) {
	b, err := json.Marshal(rep)
	if err != nil {
		return
	}
	r.sendMu.Lock()
	defer r.sendMu.Unlock()
	_, _ = unix.Write(ctlFD, b)
}

// receiveResident waits for a job's message (x) or a signal (sig).
func receiveResident() (x *execFDs, sig *residentSignal, err error) {
	b := make([]byte, 256)
	oob := make([]byte, unix.CmsgSpace(msgFDs*4))
	for {
		n, oobn, _, _, err := unix.Recvmsg(ctlFD, b, oob, unix.MSG_CMSG_CLOEXEC)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return nil, nil, fmt.Errorf("receive a job: %w", err)
		}
		if n == 0 && oobn == 0 {
			return nil, nil, io.EOF
		}
		if oobn == 0 {
			var s residentSignal
			if err := json.Unmarshal(b[:n], &s); err != nil {
				return nil, nil, fmt.Errorf("receive a signal: %w", err)
			}
			return nil, &s, nil
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
			return nil, nil, fmt.Errorf("receive a job: %d descriptors came, want %d", len(fds), msgFDs)
		}
		x := &execFDs{hostname: string(b[:n])}
		copy(x.fd[:], fds)
		return x, nil, nil
	}
}
