package sandbox

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"layerfs.dev/layerfs/internal/outputcap"
	"layerfs.dev/layerfs/internal/platforms"
	"layerfs.dev/layerfs/wire"
)

// execution is one exec from Run's call to its result: what was asked,
// the init it runs on, the launcher's ends of its pipes and what became of
// it. Its steps are its methods: start (the workspace's clone, an init,
// the exec sent to it), await (the init's report and the end of the
// output, then release: the init kept for the workspace's next exec, or
// reaped in the background) and result.
type execution struct {
	l       *Launcher
	session *Session // keeps the init for the next exec; nil: none does
	cfg     Config
	ic      initConfigX
	kind    sandboxKind
	t0      time.Time
	marks   marks

	outW, errW *outputcap.Writer
	stdin      *os.File // the spec's stdin when it is a file the command reads itself
	ws         int      // the workspace's clone; -1 once closed
	ends       *execEnds
	ip         *initProc
	sendErr    error         // the exec could not be sent to its init
	net0       wire.NetUsage // the init's link's usage when the exec was sent

	killed   atomic.Bool
	stopCtx  func() bool
	backstop *time.Timer
	outDone  []<-chan struct{}

	rep        initReport
	reported   bool
	gotReport  chan struct{} // closed once await has the report (or gave up on it)
	unregister func()        // from the Session's reaping
	// Known once the init is reaped (not for a kept init).
	status  unix.WaitStatus
	initCPU time.Duration
	waitErr error
}

// newExecution checks cfg and resolves what the init is sent.
func (l *Launcher) newExecution(ctx context.Context, s *Session, cfg Config, stdout, stderr io.Writer) (*execution, error) {
	t0 := time.Now()
	cfg, err := cfg.normalized()
	if err != nil {
		return nil, err
	}
	x := &execution{l: l, session: s, cfg: cfg, t0: t0, ws: -1, gotReport: make(chan struct{})}
	x.marks.add("run")
	l.init()
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("sandbox exec: %w", err)
	}
	if _, err := l.UserNS(); err != nil && !errors.Is(err, errNotConfigured) {
		return nil, err
	}
	ic, err := l.initConfig(cfg)
	if err != nil {
		return nil, err
	}
	spec := cfg.Spec
	if !l.cg.hasMemory() && spec.MemoryBytes > 0 {
		ic.RlimitAS = uint64(spec.MemoryBytes)
	}
	if spec.MilliCPUs > 0 && !l.cg.hasCPU() {
		return nil, fmt.Errorf("%w: a CPU limit needs a cpu cgroup, which this host does not give the launcher", platforms.ErrBadSpec)
	}
	ic.RlimitNofile = uint64(spec.OpenFiles)
	// RLIMIT_NPROC counts every process of the uid on the host, so it is
	// only a stand-in for the pids cgroup when the command is not root.
	if !l.cg.hasPids() && ic.UID != 0 {
		ic.RlimitNproc = uint64(ic.pids)
	}
	ic.Last = s == nil
	x.ic = ic
	x.kind = sandboxKind{network: cfg.Network, image: ic.RootDir, writable: cfg.RootWritable && ic.RootDir != "", inNS: l.userNS != nil}
	if cfg.Egress != nil && !cfg.Network {
		x.kind.egress = cfg.Egress.Key()
	}

	x.outW, x.errW = outputcap.Pair(stdout, stderr, spec.OutputLimit)
	if spec.Terminal == nil {
		x.stdin, _ = spec.Stdin.(*os.File)
	}
	return x, nil
}

// start clones the workspace, finds the exec an init (the one its Session
// keeps, a warm one, else one started now) and sends it the exec; it
// returns an error only when no init could be had. An init found dead, or
// one that takes no exec, is replaced by a new one.
func (x *execution) start(ctx context.Context) error {
	ws, inNS, err := x.l.cloneWorkspace(x.cfg, x.ic)
	if err != nil {
		return err
	}
	x.ws, x.kind.inNS = ws, inNS
	for _, from := range []func(context.Context) *initProc{x.fromSession, x.fromPool} {
		ip := from(ctx)
		if ip == nil {
			continue
		}
		if err := x.send(ip); err != nil {
			x.l.logger().Warn("sandbox init unusable, starting another", "kept", ip.kept, "err", err)
			x.l.discardLater(ip)
			continue
		}
		x.ip = ip
		break
	}
	if x.ip == nil {
		ip, err := x.fresh()
		if err != nil {
			return err
		}
		x.ip, x.sendErr = ip, x.send(ip)
	}
	switch {
	case x.ip.kept:
		x.marks.add("kept")
	case x.ip.pooled:
		x.marks.add("warm")
	}
	x.marks.add("sent")
	if x.ip.link != nil {
		x.net0 = x.ip.link.Usage()
	}
	x.l.track(x.ip.pid, true)
	if x.session != nil && x.sendErr == nil {
		x.session.runs(x.ip, true)
	}
	x.stopCtx = context.AfterFunc(ctx, x.kill)
	x.backstop = time.AfterFunc(x.ic.Timeout+killGrace, x.kill)
	x.copyOutput()
	return nil
}

// fromSession is the init the exec's Session keeps, once it is ready, or
// nil.
func (x *execution) fromSession(ctx context.Context) *initProc {
	if x.session == nil {
		return nil
	}
	ip := x.session.take(x.kind)
	if ip == nil {
		return nil
	}
	if err := ip.awaitReady(ctx); err != nil {
		if ctx.Err() != nil {
			x.session.put(ip) // it is fine; the exec is not
		} else {
			x.l.discardLater(ip)
		}
		return nil
	}
	return ip
}

// fromPool is a warm init for an exec of the default sandbox, or nil.
func (x *execution) fromPool(context.Context) *initProc {
	if x.kind != x.l.defaultKind() {
		return nil
	}
	return x.l.take()
}

// fresh starts an init for the exec, in a cgroup of its own.
func (x *execution) fresh() (*initProc, error) {
	spec := x.cfg.Spec
	var cg *execCgroup
	if x.l.cg.hasMemory() || x.l.cg.hasPids() || spec.MilliCPUs > 0 {
		var err error
		cg, err = x.l.cg.create(x.l.cgroupName(), spec.MemoryBytes > 0 || x.session != nil, spec.MilliCPUs > 0)
		if err != nil {
			return nil, fmt.Errorf("%w: %w", ErrSetup, err)
		}
	}
	ip, err := x.l.spawn(x.kind, cg)
	if err != nil {
		if cg != nil {
			_ = cg.remove()
		}
		return nil, err
	}
	if x.kind.egress != "" {
		// Fails closed: without its link the init is discarded, and its
		// namespace, which has only lo, with it.
		if ip.link, err = x.cfg.Egress.Attach(ip.pid); err != nil {
			ip.discard()
			return nil, fmt.Errorf("sandbox network: %w", err)
		}
		x.marks.add("link")
	}
	ip.listen(nil)
	return ip, nil
}

// send makes the exec's pipes and sends the exec to ip.
func (x *execution) send(ip *initProc) error {
	ends, err := ip.takeEnds(x.stdin)
	if err != nil {
		return err
	}
	spec := x.cfg.Spec
	if err := ip.send(spec.MemoryBytes, spec.MilliCPUs, x.ic, x.ws, ends, x.stdin); err != nil {
		ends.closeOurs()
		return err
	}
	x.ends = ends
	return nil
}

// kill ends the exec's init (the context ended, or the backstop fired).
func (x *execution) kill() {
	x.killed.Store(true)
	_ = x.ip.proc.kill()
}

// copyOutput copies the exec's output to its writers and its stdin, when
// it is not a file the command reads itself, from the spec's.
func (x *execution) copyOutput() {
	e := x.ends
	if e == nil { // nothing was sent
		return
	}
	x.outDone = []<-chan struct{}{drain(e.outR, x.outW), drain(e.errR, x.errW)}
	if x.cfg.Spec.Terminal != nil {
		e.inW.Close() // the command reads its terminal
		x.outDone = append(x.outDone, x.relayTerminal())
		return
	}
	if e.inW == nil {
		return
	}
	if in := x.cfg.Spec.Stdin; in == nil {
		e.inW.Close() // the command reads EOF at once, as from /dev/null
	} else {
		go func() {
			_, _ = io.Copy(e.inW, in) // ends with EPIPE once the sandbox is gone
			e.inW.Close()
		}()
	}
}

// drain copies r into w until EOF and closes the returned channel.
func drain(r *os.File, w io.Writer) <-chan struct{} {
	done := make(chan struct{})
	go func() {
		defer close(done)
		_, _ = io.Copy(w, r)
	}()
	return done
}

// await waits for the init's report, releases the init (kept, or reaped:
// in the background once it has reported, since by then the command and
// every process of its namespace are gone) and waits for the end of the
// output.
func (x *execution) await(ctx context.Context) {
	if x.sendErr == nil {
		x.rep, x.reported = x.ip.report()
	} else {
		x.kill()
	}
	if x.session != nil {
		x.session.runs(x.ip, false)
	}
	close(x.gotReport)
	x.marks.add("got")
	// The hooks that kill the init stop before the init may be kept: the
	// caller's context ends once Run returns.
	if x.keep(ctx) && x.stopHooks() {
		x.waitOutput()
		// Kept before Run returns, so that the workspace's next exec,
		// which may come as soon as the answer is out, finds it.
		x.l.track(x.ip.pid, false)
		x.session.put(x.ip)
		go x.releaseKept()
		return
	}
	settled, reaped := make(chan struct{}), make(chan struct{})
	x.l.mu.Lock()
	x.l.reaping[settled] = true
	x.l.mu.Unlock()
	if x.session != nil {
		x.unregister = x.session.reaped(settled)
	}
	if x.reported && x.rep.Error == "" && ctx.Err() == nil {
		go func() { x.reap(); close(reaped) }()
	} else {
		x.reap()
		close(reaped)
	}
	x.waitOutput()
	// The pipes close once the output is in (release closes them).
	go func() {
		<-reaped
		x.release(settled)
	}()
}

// keep reports whether the exec's init serves its Session's next exec:
// it reported, without an error, and will not retire, and the exec was
// neither canceled nor killed.
func (x *execution) keep(ctx context.Context) bool {
	return x.session != nil && x.reported && x.rep.Error == "" && !x.rep.Retire &&
		ctx.Err() == nil && !x.killed.Load()
}

// waitOutput waits for the end of both output streams (bounded by
// outputGrace) and marks it.
func (x *execution) waitOutput() {
	if len(x.outDone) > 0 {
		t := time.NewTimer(outputGrace)
		defer t.Stop()
		for _, d := range x.outDone {
			select {
			case <-d:
			case <-t.C:
				x.ends.outR.Close()
				x.ends.errR.Close()
				<-d
			}
		}
	}
	x.marks.add("output")
}

// reap waits for the init to end (killing it first unless it retires by
// itself after its report) and removes what the exec left on the host.
func (x *execution) reap() {
	if !x.reported || !x.rep.Retire {
		_ = x.ip.proc.kill()
	}
	x.status, x.initCPU, x.waitErr = x.ip.proc.wait()
	x.ip.dropSpare()
	x.stopHooks()
	x.ip.p.closeParent()
	if x.ip.link != nil {
		x.ip.link.Close()
	}
	if x.ip.cg != nil {
		if err := x.ip.cg.remove(); err != nil {
			x.l.logger().Warn("sandbox cgroup left behind", "err", err)
		}
	}
	x.l.track(x.ip.pid, false)
}

// stopHooks stops the context's and the backstop's kill of the init; it
// reports whether neither has fired.
func (x *execution) stopHooks() bool {
	ctxStopped := x.stopCtx()
	backstopStopped := x.backstop.Stop()
	return ctxStopped && backstopStopped && !x.killed.Load()
}

// releaseKept closes the ends of an exec whose init its Session keeps,
// off the exec's path.
func (x *execution) releaseKept() {
	x.closeEnds()
	x.ip.makeSpare()
	x.trace(x.rep.CPU)
}

// release closes what the exec holds once its init is reaped, tops the
// warm pool up and closes settled.
func (x *execution) release(settled chan struct{}) {
	x.closeEnds()
	cpu := x.initCPU // the init's whole life
	if x.reported && x.rep.CPU > 0 {
		cpu = x.rep.CPU
	}
	x.trace(cpu)
	x.l.mu.Lock()
	delete(x.l.reaping, settled)
	x.l.mu.Unlock()
	if x.unregister != nil {
		x.unregister()
	}
	close(settled)
}

// releaseUnstarted closes what an exec that got no init holds.
func (x *execution) releaseUnstarted() { x.closeEnds() }

// closeEnds closes the workspace's clone and the launcher's ends of the
// exec's pipes and tops the warm pool up. Replacements for the warm pool
// start only now: started when the exec took its init, a replacement's
// start (its spawn and runtime, before warmOne renices it) competes with
// the exec's init and command for the CPUs.
func (x *execution) closeEnds() {
	if x.ws >= 0 {
		unix.Close(x.ws)
		x.ws = -1
	}
	if x.ends != nil {
		x.ends.closeOurs()
	}
	x.l.topUp()
}

// trace hands the exec's phase marks to the launcher's trace and debug
// log, with cpu, the CPU time its init and command used.
func (x *execution) trace(cpu time.Duration) {
	if x.l.trace != nil || x.l.logger().Enabled(context.Background(), slog.LevelDebug) {
		x.l.tracePhases(x.marks, x.rep.Marks, cpu)
	}
}

// linkSettle bounds the wait at an exec's end for its connections' last
// bytes to be counted (longer only when a service keeps one open).
const linkSettle = 50 * time.Millisecond

// usageSince is what a link did between two readings of its usage.
func usageSince(now, then wire.NetUsage) *wire.NetUsage {
	return &wire.NetUsage{Mode: now.Mode,
		ConnectionsAllowed: now.ConnectionsAllowed - then.ConnectionsAllowed, ConnectionsDenied: now.ConnectionsDenied - then.ConnectionsDenied,
		NamesAllowed: now.NamesAllowed - then.NamesAllowed, NamesDenied: now.NamesDenied - then.NamesDenied,
		BytesOut: now.BytesOut - then.BytesOut, BytesIn: now.BytesIn - then.BytesIn}
}

// result is what Run returns once the exec is done.
func (x *execution) result(ctx context.Context) (platforms.ExecResult, error) {
	var res platforms.ExecResult
	switch {
	case x.sendErr != nil:
		return res, x.sendErr
	case ctx.Err() != nil:
		return res, fmt.Errorf("sandbox exec: %w", ctx.Err())
	case x.reported && x.rep.Error != "":
		x.l.logger().Warn("sandbox setup failed", "workspace", x.cfg.Workspace, "err", x.rep.Error)
		return res, fmt.Errorf("%w: %s", ErrSetup, x.rep.Error)
	case x.reported:
		r := x.rep
		res.ExitCode, res.Signal, res.TimedOut, res.Command = r.ExitCode, r.Signal, r.TimedOut, r.Command
		res.UserNamespace = "none: not configured"
		if x.kind.inNS {
			res.UserNamespace = x.l.UserNamespace.String()
		}
		if x.ip.link != nil {
			res.Network = usageSince(x.ip.link.Settled(linkSettle), x.net0)
		}
	default:
		// The init died without a report: killed by the backstop, or by
		// the OOM killer of the exec's memory cgroup.
		res.TimedOut = x.killed.Load()
		res.ExitCode, res.Signal = 128+int(syscall.SIGKILL), unix.SignalName(syscall.SIGKILL)
		if x.waitErr == nil && x.status.Signaled() {
			res.ExitCode, res.Signal = 128+int(x.status.Signal()), unix.SignalName(x.status.Signal())
		}
		x.l.logger().Warn("sandbox init ended without a report", "workspace", x.cfg.Workspace, "status", x.status, "wait", x.waitErr)
	}
	res.OutputTruncated = x.outW.Truncated() || x.errW.Truncated()
	res.Wall = time.Since(x.t0)
	x.marks.add("done")

	res.Command = min(res.Command, res.Wall) // 0 when the command never ran
	res.Launch = res.Wall - res.Command
	if err := errors.Join(x.outW.Err(), x.errW.Err()); err != nil {
		return res, fmt.Errorf("sandbox output: %w", err)
	}
	return res, nil
}
