package engine

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"sync"
	"syscall"
	"time"

	"layerfs.dev/layerfs/internal/platforms"
	"layerfs.dev/layerfs/wire"
	"layerfs.dev/layerfs/wire/errclass"
)

// Services are commands kept running in a workspace's sandbox
// (platforms.ServiceHost) after the call that started them, each with a
// bounded log of its output and a restart policy. The engine supervises
// them: a service with restart on-failure is started again after a
// non-zero exit or a signal, with a backoff that doubles from
// serviceBackoff to serviceMaxBackoff (reset once a run lasted
// serviceSteady). Ending or unserving the workspace stops them all
// (SIGTERM, then SIGKILL after the grace) before its sandbox closes.
//
// A daemon's crash takes its services with it: their sandboxes' inits die
// with the daemon (their parent-death signal), and the PID namespaces
// with them, so no service outlives its daemon or writes into a detached
// mount. Their records (services.json in the workspace's directory) stay:
// the daemon that recovers the workspace lists them as ended with reason
// daemon_restart, and does not start them again.

const (
	serviceBackoff    = 500 * time.Millisecond
	serviceMaxBackoff = 30 * time.Second
	serviceSteady     = 10 * time.Second
	serviceLogBytes   = 1 << 20
	servicesFile      = "services.json"
)

var serviceName = regexp.MustCompile(`^[a-z0-9][a-z0-9._-]{0,62}$`)

// services is a workspace's services, by name, and the event streams
// that follow them.
type services struct {
	mu     sync.Mutex
	byName map[string]*service
	subs   map[chan wire.Service]bool
}

// subscribe returns a channel of the workspace's service events (each a
// service as it is after a start or an end) and the function that ends it.
// A reader that falls more than its buffer behind misses events.
func (set *services) subscribe() (<-chan wire.Service, func()) {
	ch := make(chan wire.Service, 64)
	set.mu.Lock()
	if set.subs == nil {
		set.subs = map[chan wire.Service]bool{}
	}
	set.subs[ch] = true
	set.mu.Unlock()
	return ch, func() {
		set.mu.Lock()
		delete(set.subs, ch)
		set.mu.Unlock()
	}
}

// notify sends sv's state to every subscriber, never waiting.
func (set *services) notify(sv *service) {
	sv.mu.Lock()
	info := sv.snapshot()
	sv.mu.Unlock()
	set.mu.Lock()
	defer set.mu.Unlock()
	for ch := range set.subs {
		select {
		case ch <- info:
		default:
		}
	}
}

// service is one named service: its current run and its history.
type service struct {
	name    string
	spec    platforms.ExecSpec
	host    platforms.ServiceHost
	restart string
	log     *serviceLog

	mu       sync.Mutex
	info     wire.Service
	cur      platforms.Service // the current run; nil while restarting
	stopping bool
	wake     chan struct{} // closed by a stop: ends a backoff wait
	done     chan struct{} // closed once it has ended for good
}

func (w *workspace) serviceSet() *services {
	w.svcOnce.Do(func() { w.svcs = &services{byName: map[string]*service{}} })
	return w.svcs
}

// StartService starts a service in a workspace's sandbox. Its name must
// be free (an ended service's name is free: it is replaced); a command
// that cannot start answers with the reason.
func (e *Engine) StartService(ctx context.Context, id string, req wire.ServiceRequest) (wire.Service, error) {
	spec, name, err := e.serviceSpec(req)
	if err != nil {
		return wire.Service{}, err
	}
	w, err := e.get(ctx, id)
	if err != nil {
		return wire.Service{}, err
	}
	w.mu.RLock()
	defer w.mu.RUnlock()
	if w.sb == nil {
		return wire.Service{}, fmt.Errorf("%w: workspace %s ended", errclass.NotFound, id)
	}
	host, ok := w.sb.(platforms.ServiceHost)
	if !ok {
		return wire.Service{}, fmt.Errorf("%w: the %s platform keeps no process running past its call; use the local platform for services", platforms.ErrNoServices, w.opts.Platform)
	}
	if w.opts.Image != nil {
		if spec, err = imageSpec(w.opts.Image, execRequestOf(req)); err != nil {
			return wire.Service{}, err
		}
	}
	set := w.serviceSet()
	set.mu.Lock()
	if old := set.byName[name]; old != nil && !old.ended() {
		set.mu.Unlock()
		return wire.Service{}, fmt.Errorf("%w: service %q runs in workspace %s (stop it first, or pick another name)", errclass.Exists, name, id)
	}
	restart := req.Restart
	if restart == "" {
		restart = wire.RestartNo
	}
	sv := &service{name: name, spec: spec, host: host, restart: restart, log: newServiceLog(serviceLogBytes),
		wake: make(chan struct{}), done: make(chan struct{})}
	sv.info = wire.Service{Name: name, Argv: spec.Argv, Restart: restart, State: wire.ServiceRunning}
	set.byName[name] = sv // held: a second start of the name waits for this one
	run, err := host.StartService(ctx, spec, sv.log, sv.log)
	if err != nil {
		delete(set.byName, name)
		set.mu.Unlock()
		return wire.Service{}, fmt.Errorf("start service %q in %s: %w", name, id, err)
	}
	sv.mu.Lock()
	sv.cur = run
	sv.info.Pid, sv.info.Started = run.Pid(), run.Started()
	out := sv.snapshot()
	sv.mu.Unlock()
	set.mu.Unlock()
	e.saveServices(w)
	set.notify(sv)
	e.log.Info("service started", "id", id, "service", name, "pid", out.Pid)
	go e.supervise(w, sv, run)
	return out, nil
}

// serviceSpec checks a request and makes its spec and name.
func (e *Engine) serviceSpec(req wire.ServiceRequest) (platforms.ExecSpec, string, error) {
	var errs []error
	switch req.Restart {
	case "", wire.RestartNo, wire.RestartOnFailure:
	default:
		errs = append(errs, fmt.Errorf("restart %q: want %q or %q", req.Restart, wire.RestartNo, wire.RestartOnFailure))
	}
	spec, err := platforms.FromRequest(execRequestOf(req), e.uid, e.gid)
	if err != nil {
		errs = append(errs, err)
	}
	name := req.Name
	if name == "" && len(spec.Argv) > 0 {
		name = path.Base(spec.Argv[0])
		if req.Body != "" {
			name = "sh"
		}
	}
	if !serviceName.MatchString(name) {
		errs = append(errs, fmt.Errorf("name %q: want [a-z0-9][a-z0-9._-]*, at most 63 bytes", name))
	}
	if err := errors.Join(errs...); err != nil {
		if !errors.Is(err, errclass.Invalid) {
			err = fmt.Errorf("%w: %w", errclass.Invalid, err)
		}
		return spec, name, err
	}
	return spec, name, nil
}

// execRequestOf is a service's request as the exec request it runs.
func execRequestOf(req wire.ServiceRequest) wire.ExecRequest {
	return wire.ExecRequest{Argv: req.Argv, Body: req.Body, Env: req.Env, Dir: req.Dir,
		MemoryBytes: req.MemoryBytes, Pids: req.Pids, MilliCPUs: req.MilliCPUs}
}

// supervise waits for each run of sv to end, records it and, under
// on-failure, starts it again after its backoff.
func (e *Engine) supervise(w *workspace, sv *service, run platforms.Service) {
	backoff := serviceBackoff
	for {
		<-run.Done()
		ex := run.Exit()
		sv.mu.Lock()
		sv.record(ex)
		again := sv.restart == wire.RestartOnFailure && !sv.stopping && ex.Reason != platforms.ReasonSandboxEnded &&
			(ex.ExitCode != 0 || ex.Signal != "")
		if again {
			sv.info.State = wire.ServiceRestarting
		}
		sv.cur = nil
		wake := sv.wake
		sv.mu.Unlock()
		e.log.Info("service ended", "id", w.rec.ID, "service", sv.name, "exit", ex.ExitCode, "signal", ex.Signal, "reason", ex.Reason, "restart", again)
		if !again {
			break
		}
		w.serviceSet().notify(sv)
		if ex.Ended.Sub(run.Started()) >= serviceSteady {
			backoff = serviceBackoff
		}
		select {
		case <-time.After(backoff):
		case <-wake:
		}
		backoff = min(2*backoff, serviceMaxBackoff)
		sv.mu.Lock()
		if sv.stopping { // stopped while it waited: not started again
			sv.info.Reason = wire.ServiceStopped
			sv.mu.Unlock()
			break
		}
		sv.mu.Unlock()
		next, err := sv.host.StartService(context.Background(), sv.spec, sv.log, sv.log)
		sv.mu.Lock()
		if err != nil || sv.stopping {
			if err == nil {
				sv.mu.Unlock()
				_ = next.Signal(syscall.SIGKILL)
				<-next.Done()
				sv.mu.Lock()
			} else {
				sv.info.Reason = wire.ServiceStartFailed
				fmt.Fprintf(sv.log, "layerfs: restart of service %q failed: %v\n", sv.name, err)
			}
			if sv.stopping {
				sv.info.Reason = wire.ServiceStopped
			}
			sv.mu.Unlock()
			break
		}
		sv.cur = next
		sv.info.State, sv.info.Pid, sv.info.Started = wire.ServiceRunning, next.Pid(), next.Started()
		sv.info.Restarts++
		sv.info.Ended, sv.info.ExitCode, sv.info.Signal, sv.info.Reason = nil, nil, "", ""
		sv.mu.Unlock()
		e.saveServices(w)
		w.serviceSet().notify(sv)
		run = next
	}
	sv.mu.Lock()
	sv.info.State, sv.info.Pid = wire.ServiceEnded, 0
	sv.mu.Unlock()
	sv.log.Close()
	e.saveServices(w)
	w.serviceSet().notify(sv)
	close(sv.done) // after the end is recorded
}

// record notes how a run ended. sv.mu is held.
func (sv *service) record(ex platforms.ServiceExit) {
	end, code := ex.Ended, ex.ExitCode
	sv.info.Ended, sv.info.ExitCode, sv.info.Signal, sv.info.Pid = &end, &code, ex.Signal, 0
	sv.info.Reason = ex.Reason
	if sv.stopping && ex.Reason != platforms.ReasonOOM {
		sv.info.Reason = wire.ServiceStopped
	}
}

func (sv *service) snapshot() wire.Service {
	out := sv.info
	out.Argv = slices.Clone(out.Argv)
	return out
}

func (sv *service) ended() bool {
	select {
	case <-sv.done:
		return true
	default:
		return false
	}
}

// Services lists a workspace's services, running or ended, by name.
func (e *Engine) Services(ctx context.Context, id string) ([]wire.Service, error) {
	w, err := e.get(ctx, id)
	if err != nil {
		return nil, err
	}
	set := w.serviceSet()
	set.mu.Lock()
	defer set.mu.Unlock()
	out := make([]wire.Service, 0, len(set.byName))
	for _, sv := range set.byName {
		sv.mu.Lock()
		out = append(out, sv.snapshot())
		sv.mu.Unlock()
	}
	slices.SortFunc(out, func(a, b wire.Service) int { return cmpString(a.Name, b.Name) })
	return out, nil
}

func cmpString(a, b string) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// service finds a workspace's service by name.
func (e *Engine) service(ctx context.Context, id, name string) (*workspace, *service, error) {
	w, err := e.get(ctx, id)
	if err != nil {
		return nil, nil, err
	}
	set := w.serviceSet()
	set.mu.Lock()
	sv := set.byName[name]
	set.mu.Unlock()
	if sv == nil {
		return nil, nil, fmt.Errorf("service %q in workspace %s: %w", name, id, errclass.NotFound)
	}
	return w, sv, nil
}

// ServiceLogs writes a service's log to out: what it holds (the last
// bytes of its output, stdout and stderr as they came), and, with follow,
// what comes until the service ends for good or ctx ends. flush, when not
// nil, is called after each write.
func (e *Engine) ServiceLogs(ctx context.Context, id, name string, follow bool, out io.Writer, flush func()) error {
	_, sv, err := e.service(ctx, id, name)
	if err != nil {
		return err
	}
	var off int64
	for {
		b, next, closed, changed := sv.log.ReadFrom(off)
		if len(b) > 0 {
			if _, err := out.Write(b); err != nil {
				return err
			}
			if flush != nil {
				flush()
			}
		}
		off = next
		if !follow || closed {
			return nil
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return nil
		}
	}
}

// StopService stops a service for good: SIGTERM to its process group,
// then SIGKILL once grace has passed (0: wire.DefaultStopGrace). A
// service that has ended already is answered as it is.
func (e *Engine) StopService(ctx context.Context, id, name string, grace time.Duration) (wire.Service, error) {
	if grace < 0 {
		return wire.Service{}, fmt.Errorf("%w: grace %s is negative", errclass.Invalid, grace)
	}
	_, sv, err := e.service(ctx, id, name)
	if err != nil {
		return wire.Service{}, err
	}
	if err := sv.stop(ctx, grace); err != nil {
		return wire.Service{}, err
	}
	sv.mu.Lock()
	defer sv.mu.Unlock()
	return sv.snapshot(), nil
}

// stop ends sv for good and waits until its end is recorded.
func (sv *service) stop(ctx context.Context, grace time.Duration) error {
	if grace == 0 {
		grace = wire.DefaultStopGrace
	}
	sv.mu.Lock()
	if !sv.stopping {
		sv.stopping = true
		close(sv.wake)
	}
	cur := sv.cur
	sv.mu.Unlock()
	if cur != nil {
		_ = cur.Signal(syscall.SIGTERM)
		t := time.NewTimer(grace)
		defer t.Stop()
		select {
		case <-sv.done:
			return nil
		case <-t.C:
			_ = cur.Signal(syscall.SIGKILL)
		case <-ctx.Done():
			return fmt.Errorf("stop service %q: %w", sv.name, ctx.Err())
		}
	}
	select {
	case <-sv.done:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("stop service %q: %w", sv.name, ctx.Err())
	}
}

// WaitService waits until a service has ended for good (no restart to
// come) and answers how.
func (e *Engine) WaitService(ctx context.Context, id, name string) (wire.Service, error) {
	_, sv, err := e.service(ctx, id, name)
	if err != nil {
		return wire.Service{}, err
	}
	select {
	case <-sv.done:
	case <-ctx.Done():
		return wire.Service{}, fmt.Errorf("wait for service %q: %w", name, ctx.Err())
	}
	sv.mu.Lock()
	defer sv.mu.Unlock()
	return sv.snapshot(), nil
}

// stopServices stops every service of w (concurrently, each with the
// default grace, bounded by ctx), before its sandbox closes.
func (e *Engine) stopServices(ctx context.Context, w *workspace) {
	set := w.serviceSet()
	set.mu.Lock()
	all := make([]*service, 0, len(set.byName))
	for _, sv := range set.byName {
		all = append(all, sv)
	}
	set.mu.Unlock()
	var wg sync.WaitGroup
	for _, sv := range all {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := sv.stop(ctx, 0); err != nil {
				e.log.Warn("stop service", "id", w.rec.ID, "service", sv.name, "err", err)
			}
		}()
	}
	wg.Wait()
}

// saveServices records w's services in its directory, for the daemon that
// recovers it after a crash (recoverServices).
func (e *Engine) saveServices(w *workspace) {
	set := w.serviceSet()
	set.mu.Lock()
	list := make([]wire.Service, 0, len(set.byName))
	for _, sv := range set.byName {
		sv.mu.Lock()
		list = append(list, sv.snapshot())
		sv.mu.Unlock()
	}
	set.mu.Unlock()
	b, err := json.Marshal(list)
	if err == nil {
		err = writeFileAtomic(filepath.Join(e.workspaceDir(w.rec.ID), servicesFile), b)
	}
	if err != nil {
		e.log.Warn("record services", "id", w.rec.ID, "err", err)
	}
}

// recoverServices lists the services a dead daemon ran in w as ended
// with reason daemon_restart: they died with their sandbox.
func (e *Engine) recoverServices(w *workspace) {
	b, err := os.ReadFile(filepath.Join(e.workspaceDir(w.rec.ID), servicesFile))
	if err != nil {
		return
	}
	var list []wire.Service
	if json.Unmarshal(b, &list) != nil {
		return
	}
	set := w.serviceSet()
	set.mu.Lock()
	now := time.Now()
	for _, info := range list {
		if info.State != wire.ServiceEnded {
			info.State, info.Pid, info.Reason, info.Ended = wire.ServiceEnded, 0, wire.ServiceDaemonRestart, &now
			e.log.Warn("service ended with the daemon that ran it", "id", w.rec.ID, "service", info.Name)
		}
		sv := &service{name: info.Name, restart: info.Restart, log: newServiceLog(0), info: info, wake: make(chan struct{}), done: make(chan struct{})}
		sv.log.Close()
		close(sv.done)
		set.byName[info.Name] = sv
	}
	set.mu.Unlock()
	e.saveServices(w)
}

// writeFileAtomic writes b to p through a temporary file and a rename.
func writeFileAtomic(p string, b []byte) error {
	tmp := p + ".tmp"
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, p)
}
