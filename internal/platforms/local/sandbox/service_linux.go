package sandbox

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"layerfs.dev/layerfs/internal/outputcap"
	"layerfs.dev/layerfs/internal/platforms"
	"layerfs.dev/layerfs/wire/errclass"
)

// The launcher's side of a resident init (resident_linux.go has the
// init's): a Session's sandbox kept for its services, and the execs run
// beside them.

// ErrResidentJob: an exec beside running services asked for what a job of
// the resident sandbox cannot have.
var ErrResidentJob = errclass.New(errclass.Unavailable, "not beside running services")

// residentInit is a Session's resident init: its services and the execs
// that run beside them. It ends once neither is left (or the Session
// closes); the next exec then starts a sandbox of its own again.
type residentInit struct {
	l    *Launcher
	s    *Session
	ip   *initProc
	cfg  Config // the first service's: the sandbox every job must match
	seq  atomic.Uint64
	done chan struct{} // closed once the init is discarded

	mu       sync.Mutex
	active   int // services running and execs in flight
	closed   bool
	services map[*Service]bool
}

// Service is a command kept running in a Session's resident sandbox
// (platforms.Service).
type Service struct {
	r       *residentInit
	job     uint64
	pid     int
	started time.Time
	oom0    int64
	outIno  uint64 // the output pipes' inodes (a checkpoint names them)
	errIno  uint64 // the cgroup's OOM kills when it started
	stdout  io.Writer
	stderr  io.Writer
	done    chan struct{}
	exit    platforms.ServiceExit
}

var _ platforms.Service = (*Service)(nil)

func (sv *Service) Pid() int                        { return sv.pid }
func (sv *Service) Started() time.Time              { return sv.started }
func (sv *Service) Done() <-chan struct{}           { return sv.done }
func (sv *Service) Exit() platforms.ServiceExit     { <-sv.done; return sv.exit }
func (sv *Service) Signal(sig syscall.Signal) error { return sv.r.signal(sv.job, sig) }

// Start starts cfg's command as a service in the Session's resident
// sandbox, made now if there is none (and then with cfg.Spec's limits,
// which hold for every service and exec of the sandbox from then on). It
// returns once the command runs; its output goes to stdout and stderr,
// which must not block.
func (s *Session) Start(ctx context.Context, cfg Config, stdout, stderr io.Writer) (*Service, error) {
	cfg, ic, err := s.l.jobConfig(cfg)
	if err != nil {
		return nil, err
	}
	if cfg.Spec.Stdin != nil {
		return nil, fmt.Errorf("%w: a service reads no input", platforms.ErrBadSpec)
	}
	ic.Service, ic.Timeout = true, 0
	s.startMu.Lock()
	defer s.startMu.Unlock()
	r, first := s.resident(cfg), false
	if r == nil {
		if s.residentOther(cfg) {
			return nil, fmt.Errorf("%w: the workspace's services run in a sandbox with another network or root", ErrResidentJob)
		}
		if r, err = s.newResident(ctx, cfg); err != nil {
			return nil, err
		}
		first = true
	}
	sv, err := r.start(ctx, ic, first, stdout, stderr)
	r.release()
	return sv, err
}

// resident is the Session's resident init, taken for one more job, if it
// has one of cfg's sandbox (its network and root).
func (s *Session) resident(cfg Config) *residentInit {
	s.mu.Lock()
	r := s.res
	s.mu.Unlock()
	if r == nil || !r.acquire() {
		return nil
	}
	if cfg.Network != r.cfg.Network || cfg.RootDir != r.cfg.RootDir {
		r.release()
		return nil
	}
	return r
}

// residentOther reports whether the Session's resident init, running,
// is of another sandbox than cfg's.
func (s *Session) residentOther(cfg Config) bool {
	s.mu.Lock()
	r := s.res
	s.mu.Unlock()
	if r == nil {
		return false
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	return !r.closed && (cfg.Network != r.cfg.Network || cfg.RootDir != r.cfg.RootDir)
}

// newResident starts the Session's resident init for cfg's sandbox, with
// cfg's limits, taken for one job; the first job it is sent must bring the
// workspace.
func (s *Session) newResident(ctx context.Context, cfg Config) (*residentInit, error) {
	l, spec := s.l, cfg.Spec
	kind := sandboxKind{network: cfg.Network, image: cfg.RootDir, writable: cfg.RootWritable && cfg.RootDir != "", inNS: l.userNS != nil}
	if kind.image != "" {
		var err error
		if kind.image, err = realDir(kind.image); err != nil {
			return nil, fmt.Errorf("%w: root dir: %w", platforms.ErrBadSpec, err)
		}
	}
	var cg *execCgroup
	if l.cg.hasMemory() || l.cg.hasPids() || spec.MilliCPUs > 0 {
		var err error
		if cg, err = l.cg.create(l.cgroupName(), true, spec.MilliCPUs > 0); err != nil {
			return nil, fmt.Errorf("%w: %w", ErrSetup, err)
		}
	}
	ip, err := l.spawn(kind, cg)
	if err != nil {
		if cg != nil {
			_ = cg.remove()
		}
		return nil, err
	}
	ip.listen(nil)
	l.track(ip.pid, true)
	r := &residentInit{l: l, s: s, ip: ip, cfg: cfg, done: make(chan struct{}), active: 1, services: map[*Service]bool{}}
	fail := func(err error) (*residentInit, error) {
		r.discard()
		return nil, err
	}
	if err := ip.awaitReady(ctx); err != nil {
		return fail(fmt.Errorf("%w: the service's sandbox: %w", ErrSetup, err))
	}
	if cg != nil {
		if spec.MilliCPUs > 0 {
			if err := cg.addCPU(ip.pid); err != nil {
				return fail(fmt.Errorf("%w: %w", ErrSetup, err))
			}
		}
		if err := cg.limit(spec.MemoryBytes, spec.Pids, spec.MilliCPUs); err != nil {
			return fail(fmt.Errorf("%w: %w", ErrSetup, err))
		}
	}
	// The init holds the sandbox for its services: the OOM killer of the
	// sandbox's memory limit takes a service or an exec, never the init.
	_ = os.WriteFile("/proc/"+strconv.Itoa(ip.pid)+"/oom_score_adj", []byte("-1000"), 0)
	s.mu.Lock()
	s.res = r
	s.mu.Unlock()
	return r, nil
}

// jobConfig checks cfg for a job of a resident init and resolves what the
// init is sent: a job takes no rlimits (the init would set them on itself)
// and no terminal.
func (l *Launcher) jobConfig(cfg Config) (Config, initConfigX, error) {
	l.init()
	cfg, err := cfg.normalized()
	if err != nil {
		return cfg, initConfigX{}, err
	}
	if _, err := l.UserNS(); err != nil && !errors.Is(err, errNotConfigured) {
		return cfg, initConfigX{}, err
	}
	ic, err := l.initConfig(cfg)
	if err != nil {
		return cfg, ic, err
	}
	spec := cfg.Spec
	switch {
	case spec.OpenFiles > 0:
		return cfg, ic, fmt.Errorf("%w: an open files limit (an rlimit of the sandbox's init) cannot be set beside running services", ErrResidentJob)
	case spec.MemoryBytes > 0 && !l.cg.hasMemory():
		return cfg, ic, fmt.Errorf("%w: a memory limit without a memory cgroup (an rlimit) cannot be set beside running services", ErrResidentJob)
	case spec.MilliCPUs > 0 && !l.cg.hasCPU():
		return cfg, ic, fmt.Errorf("%w: a CPU limit needs a cpu cgroup, which this host does not give the launcher", platforms.ErrBadSpec)
	}
	return cfg, ic, nil
}

// acquire takes r for one more job; false once it has ended.
func (r *residentInit) acquire() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return false
	}
	r.active++
	return true
}

// release gives a job back; the last one ends the resident init.
func (r *residentInit) release() {
	r.mu.Lock()
	r.active--
	last := r.active == 0 && !r.closed
	if last {
		r.closed = true
	}
	r.mu.Unlock()
	if last {
		r.end()
	}
}

// end forgets r in its Session and discards its init in the background
// (Settle waits for it).
func (r *residentInit) end() {
	r.s.mu.Lock()
	if r.s.res == r {
		r.s.res = nil
	}
	r.s.mu.Unlock()
	settled := make(chan struct{})
	r.l.mu.Lock()
	r.l.reaping[settled] = true
	r.l.mu.Unlock()
	go func() {
		r.discard()
		r.l.mu.Lock()
		delete(r.l.reaping, settled)
		r.l.mu.Unlock()
		close(settled)
	}()
}

// close ends r with everything it runs and waits until its services have
// recorded their ends.
func (r *residentInit) close() {
	r.mu.Lock()
	r.closed = true
	svcs := make([]*Service, 0, len(r.services))
	for sv := range r.services {
		svcs = append(svcs, sv)
	}
	r.mu.Unlock()
	r.s.mu.Lock()
	if r.s.res == r {
		r.s.res = nil
	}
	r.s.mu.Unlock()
	r.discard()
	for _, sv := range svcs {
		<-sv.done
	}
}

// discard kills the init (its PID namespace, so every service and exec,
// goes with it), reaps it and removes its cgroup.
func (r *residentInit) discard() {
	r.ip.discard()
	r.l.track(r.ip.pid, false)
	select {
	case <-r.done:
	default:
		close(r.done)
	}
}

// signal sends a job's process group sig.
func (r *residentInit) signal(job uint64, sig syscall.Signal) error {
	b, err := json.Marshal(residentSignal{Job: job, Signal: int(sig)})
	if err != nil {
		return err
	}
	ctl, done := r.ip.p.sending()
	defer done()
	if err := sendSignal(ctl, b); err != nil {
		return fmt.Errorf("%w: signal a service: %w", platforms.ErrClosed, err)
	}
	return nil
}

// send sends a job: the workspace's clone for the first (the init mounts
// it for good), /dev/null in its place for the others.
func (r *residentInit) send(ic initConfigX, first bool, ends *execEnds, stdin *os.File) error {
	ws := int(r.l.devNull.Fd())
	if first {
		clone, _, err := r.l.cloneWorkspace(r.cfg, ic)
		if err != nil {
			ends.closeTheirs(stdin)
			return err
		}
		defer unix.Close(clone)
		ws = clone
	}
	fds := []int{ws}
	for _, f := range ends.theirs[msgConfig:] {
		fds = append(fds, int(f.Fd()))
	}
	ctl, done := r.ip.p.sending()
	err := sendExec(ctl, ic.Hostname, fds)
	done()
	ends.closeTheirs(stdin)
	if err == nil {
		err = json.NewEncoder(ends.cfgW).Encode(ic)
	}
	if cerr := ends.cfgW.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("%w: send a job: %w", ErrSetup, err)
	}
	return nil
}

// jobReport waits for the next report of a job: from its channel, or a
// setup error of the init's (reported as no job's), or none once the init
// has ended.
func (r *residentInit) jobReport(ctx context.Context, ch <-chan initReport) (initReport, error) {
	select {
	case rep := <-ch:
		return rep, nil
	case rep := <-r.ip.p.reports:
		return initReport{Error: rep.Error, Ended: true}, nil
	case <-r.ip.p.done:
		select {
		case rep := <-ch:
			return rep, nil
		default:
			return initReport{}, fmt.Errorf("%w: the sandbox ended", platforms.ErrClosed)
		}
	case <-ctx.Done():
		return initReport{}, ctx.Err()
	}
}

// start sends a service's job and waits for its start.
func (r *residentInit) start(ctx context.Context, ic initConfigX, first bool, stdout, stderr io.Writer) (*Service, error) {
	ic.Job = r.seq.Add(1)
	ends, err := newExecEnds(nil)
	if err != nil {
		return nil, err
	}
	ends.inW.Close() // a service reads EOF, as from /dev/null
	ends.inW = nil
	ch := r.ip.p.job(ic.Job)
	sv := &Service{r: r, job: ic.Job, done: make(chan struct{}), oom0: r.ip.cg.oomKills(), stdout: stdout, stderr: stderr,
		outIno: fileInode(ends.outR), errIno: fileInode(ends.errR)}
	if err := r.send(ic, first, ends, nil); err != nil {
		r.ip.p.dropJob(ic.Job)
		ends.closeOurs()
		return nil, err
	}
	rep, err := r.jobReport(ctx, ch)
	if err == nil && !rep.Ended && rep.Pid <= 0 {
		err = fmt.Errorf("%w: the sandbox reported no pid", ErrSetup)
	}
	if err != nil || rep.Ended {
		if err == nil {
			err = jobError(rep)
		}
		if ctx.Err() != nil {
			_ = r.signal(ic.Job, syscall.SIGKILL)
		}
		r.ip.p.dropJob(ic.Job)
		ends.closeOurs()
		return nil, err
	}
	sv.pid, sv.started = rep.Pid, time.Now()
	r.mu.Lock()
	r.services[sv] = true
	r.active++
	r.mu.Unlock()
	go sv.watch(ch, ends)
	return sv, nil
}

// jobError is the error of a job that ended before it ran.
func jobError(rep initReport) error {
	if rep.NotStarted != "" {
		return fmt.Errorf("%w: %s", platforms.ErrNotStarted, rep.NotStarted)
	}
	return fmt.Errorf("%w: %s", ErrSetup, rep.Error)
}

// watch copies the service's output until it ends, then records how it
// ended, before Done is closed.
func (sv *Service) watch(ch <-chan initReport, ends *execEnds) {
	r := sv.r
	outDone := []<-chan struct{}{drain(ends.outR, sv.stdout), drain(ends.errR, sv.stderr)}
	rep, err := r.jobReport(context.Background(), ch)
	sv.exit.Ended = time.Now()
	switch {
	case err != nil: // the init ended under it
		sv.exit.Reason = platforms.ReasonSandboxEnded
		sv.exit.ExitCode, sv.exit.Signal = 128+int(unix.SIGKILL), unix.SignalName(unix.SIGKILL)
	case rep.Signal != "":
		sv.exit.ExitCode, sv.exit.Signal, sv.exit.Reason = rep.ExitCode, rep.Signal, platforms.ReasonSignaled
		if rep.Signal == unix.SignalName(unix.SIGKILL) && r.ip.cg.oomKills() > sv.oom0 {
			sv.exit.Reason = platforms.ReasonOOM
		}
	default:
		sv.exit.ExitCode, sv.exit.Reason = rep.ExitCode, platforms.ReasonExited
	}
	t := time.NewTimer(outputGrace)
	for _, d := range outDone {
		select {
		case <-d:
		case <-t.C:
			ends.outR.Close()
			ends.errR.Close()
			<-d
		}
	}
	t.Stop()
	ends.closeOurs()
	r.ip.p.dropJob(sv.job)
	r.mu.Lock()
	delete(r.services, sv)
	r.mu.Unlock()
	close(sv.done)
	r.release()
}

// run runs an exec beside the resident init's services.
func (r *residentInit) run(ctx context.Context, cfg Config, stdout, stderr io.Writer) (platforms.ExecResult, error) {
	t0 := time.Now()
	var res platforms.ExecResult
	cfg, ic, err := r.l.jobConfig(cfg)
	if err != nil {
		return res, err
	}
	ic.Job = r.seq.Add(1)
	spec := cfg.Spec
	outW, errW := outputcap.Pair(stdout, stderr, spec.OutputLimit)
	var stdin *os.File // a file the command reads itself
	if spec.Terminal == nil {
		stdin, _ = spec.Stdin.(*os.File)
	}
	ends, err := newExecEnds(stdin)
	if err != nil {
		return res, err
	}
	defer ends.closeOurs()
	ch := r.ip.p.job(ic.Job)
	var ptys <-chan *os.File
	if spec.Terminal != nil {
		ptys = r.ip.p.jobPty(ic.Job)
	}
	defer r.ip.p.dropJob(ic.Job)
	if err := r.send(ic, false, ends, stdin); err != nil {
		return res, err
	}
	outDone := []<-chan struct{}{drain(ends.outR, outW), drain(ends.errR, errW)}
	reported := make(chan struct{})
	if spec.Terminal != nil {
		ends.inW.Close() // the command reads its terminal
		ends.inW = nil
		outDone = append(outDone, r.relayTerminal(spec, ptys, reported, outW))
	}
	if ends.inW != nil {
		if spec.Stdin == nil {
			ends.inW.Close()
		} else {
			go func() {
				_, _ = io.Copy(ends.inW, spec.Stdin)
				ends.inW.Close()
			}()
		}
	}
	// The init enforces the timeout; the backstop and the context kill the
	// job's group from here.
	var killed atomic.Bool
	kill := func() { killed.Store(true); _ = r.signal(ic.Job, syscall.SIGKILL) }
	stop := context.AfterFunc(ctx, kill)
	defer stop()
	backstop := time.AfterFunc(spec.Timeout+killGrace, kill)
	defer backstop.Stop()
	rep, err := r.jobReport(context.Background(), ch)
	close(reported)
	t := time.NewTimer(outputGrace)
	for _, d := range outDone {
		select {
		case <-d:
		case <-t.C:
			ends.outR.Close()
			ends.errR.Close()
			<-d
		}
	}
	t.Stop()
	switch {
	case ctx.Err() != nil:
		return res, fmt.Errorf("sandbox exec: %w", ctx.Err())
	case err != nil:
		return res, err
	case rep.Error != "":
		return res, fmt.Errorf("%w: %s", ErrSetup, rep.Error)
	}
	res.ExitCode, res.Signal, res.TimedOut, res.Command = rep.ExitCode, rep.Signal, rep.TimedOut || killed.Load(), rep.Command
	res.UserNamespace = "none: not configured"
	if r.l.userNS != nil {
		res.UserNamespace = r.l.UserNamespace.String()
	}
	res.OutputTruncated = outW.Truncated() || errW.Truncated()
	res.Wall = time.Since(t0)
	res.Command = min(res.Command, res.Wall)
	res.Launch = res.Wall - res.Command
	if err := errors.Join(outW.Err(), errW.Err()); err != nil {
		return res, fmt.Errorf("sandbox output: %w", err)
	}
	return res, nil
}

// Services lists the services the Session runs.
func (s *Session) Services() []*Service {
	s.mu.Lock()
	r := s.res
	s.mu.Unlock()
	if r == nil {
		return nil
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]*Service, 0, len(r.services))
	for sv := range r.services {
		out = append(out, sv)
	}
	return out
}

// oomKills is how many processes the OOM killer of the cgroup's memory
// limit killed; 0 without a memory cgroup.
func (e *execCgroup) oomKills() int64 {
	if e == nil {
		return 0
	}
	var file string
	switch {
	case e.unified != "":
		file = filepath.Join(e.unified, "memory.events")
	case e.memory != "":
		file = filepath.Join(e.memory, "memory.oom_control")
	default:
		return 0
	}
	b, err := os.ReadFile(file)
	if err != nil {
		return 0
	}
	for line := range strings.Lines(string(b)) {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "oom_kill "); ok {
			n, _ := strconv.ParseInt(v, 10, 64)
			return n
		}
	}
	return 0
}

// sendSignal sends a residentSignal: a message without descriptors.
func sendSignal(f *os.File, msg []byte) error {
	rc, err := f.SyscallConn()
	if err != nil {
		return err
	}
	var serr error
	err = rc.Write(func(fd uintptr) bool {
		serr = unix.Sendmsg(int(fd), msg, nil, nil, 0)
		return !errors.Is(serr, unix.EAGAIN)
	})
	if err != nil {
		return err
	}
	return serr
}

// relayTerminal relays a job's terminal as execution.relayTerminal does
// an exec's, once its master has come (or not at all, when the job was
// reported without one).
func (r *residentInit) relayTerminal(spec platforms.ExecSpec, ptys <-chan *os.File, reported <-chan struct{}, out io.Writer) <-chan struct{} {
	done := make(chan struct{})
	go func() {
		defer close(done)
		var m *os.File
		select {
		case m = <-ptys:
		case <-reported:
		case <-r.ip.p.done:
		}
		if m == nil {
			select { // handed over just before the report or the end
			case m = <-ptys:
			default:
				return
			}
		}
		stop := make(chan struct{})
		defer close(stop)
		if t := spec.Terminal; t.Resize != nil {
			go resizeTerminal(m, t.Resize, stop)
		}
		if in := spec.Stdin; in != nil {
			go func() {
				_, _ = io.Copy(m, in)
				m.Close() // hang up
			}()
		}
		_, _ = io.Copy(out, m)
		m.Close()
	}()
	return done
}
