package sandbox

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"sync"
	"time"

	"layerfs.dev/layerfs/internal/platforms"
)

// DefaultKeepIdle is how long a Session keeps an idle init unless
// Launcher.KeepIdle says otherwise.
const DefaultKeepIdle = 30 * time.Second

// Session runs the execs of one workspace. It keeps the init of an exec
// that ended cleanly, its sandbox made ready again (see the package
// comment's "Kept inits"), and runs the workspace's next exec on it, which
// then costs what its command costs: no process, namespace, cgroup or root
// is made for it. It keeps one init, for Launcher.KeepIdle after its last
// exec; concurrent execs of the workspace take inits of their own. A
// Session is safe for concurrent use; Close ends the init it keeps.
type Session struct {
	l *Launcher

	mu     sync.Mutex
	kept   *initProc
	timer  *time.Timer // ends kept once it has waited KeepIdle
	closed bool
	// reaping holds, for each of the Session's execs that returned, a
	// channel closed once its init is reaped (see Launcher.reaping).
	reaping map[chan struct{}]bool
	// res is the init kept for the Session's services, while any runs
	// (service_linux.go); startMu makes one service's start at a time.
	res     *residentInit
	startMu sync.Mutex
	// running are the inits that run the Session's execs now, oldest
	// first: an init is in it from the exec's start until its report,
	// never once it may be reaped.
	running []*initProc
}

// NewSession returns a Session of the launcher.
func (l *Launcher) NewSession() *Session {
	l.init()
	s := &Session{l: l, reaping: map[chan struct{}]bool{}}
	l.mu.Lock()
	l.sessions[s] = true
	l.mu.Unlock()
	return s
}

// Run is Launcher.Run on an init the Session keeps, when it keeps one for
// cfg's sandbox (its network, its root); the exec's init is kept for the
// next one if it ends cleanly. While the Session runs services of cfg's
// sandbox, the exec runs beside them, in their sandbox.
func (s *Session) Run(ctx context.Context, cfg Config, stdout, stderr io.Writer) (platforms.ExecResult, error) {
	if r := s.resident(cfg); r != nil {
		defer r.release()
		return r.run(ctx, cfg, stdout, stderr)
	}
	return s.l.run(ctx, s, cfg, stdout, stderr)
}

// Close ends the init the Session keeps and waits until the inits of its
// past execs are reaped: then no sandbox holds the workspace any more.
// Later execs run as Launcher.Run's. It can be called more than once.
func (s *Session) Close(ctx context.Context) error {
	s.mu.Lock()
	s.closed = true
	s.mu.Unlock()
	done := make(chan struct{})
	go func() {
		s.drop()
		close(done)
	}()
	select {
	case <-done:
	case <-ctx.Done():
		return fmt.Errorf("sandbox session close: %w", ctx.Err())
	}
	s.mu.Lock()
	chans := make([]chan struct{}, 0, len(s.reaping))
	for c := range s.reaping {
		chans = append(chans, c)
	}
	s.mu.Unlock()
	for _, c := range chans {
		select {
		case <-c:
		case <-ctx.Done():
			return fmt.Errorf("sandbox session close: %w", ctx.Err())
		}
	}
	s.l.mu.Lock()
	delete(s.l.sessions, s)
	s.l.mu.Unlock()
	return nil
}

// runs registers ip as running one of the Session's execs (on), or as done
// with it, before it is kept or reaped.
func (s *Session) runs(ip *initProc, on bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for i, r := range s.running {
		if r == ip {
			s.running = append(s.running[:i], s.running[i+1:]...)
			break
		}
	}
	if on {
		s.running = append(s.running, ip)
	}
}

// NetNamespaces opens the network namespace of each sandbox that runs one
// of the Session's execs now, the newest exec's first: where what those
// execs started listens. The caller closes them. An init whose exec has
// ended is not among them (its processes are gone, and it may be reaped),
// nor is one of an exec with the host's network.
func (s *Session) NetNamespaces() ([]*os.File, error) {
	var out []*os.File
	var errs []error
	// The resident init first: it holds the Session's services.
	s.mu.Lock()
	r := s.res
	s.mu.Unlock()
	if r != nil && !r.cfg.Network && r.acquire() {
		f, err := os.Open("/proc/" + strconv.Itoa(r.ip.pid) + "/ns/net")
		r.release()
		if err != nil {
			errs = append(errs, err)
		} else {
			out = append(out, f)
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for i := len(s.running) - 1; i >= 0; i-- {
		ip := s.running[i]
		if ip.kind.network {
			continue
		}
		// The init is not reaped while it is in running, so its pid is
		// still its own.
		f, err := os.Open("/proc/" + strconv.Itoa(ip.pid) + "/ns/net")
		if err != nil {
			errs = append(errs, err) // it died: its namespace went with it
			continue
		}
		out = append(out, f)
	}
	if len(out) == 0 && len(errs) > 0 {
		return nil, fmt.Errorf("sandbox network namespace: %w", errors.Join(errs...))
	}
	return out, nil
}

// reaped registers settled, closed once an exec's init is reaped, and
// returns the function that unregisters it.
func (s *Session) reaped(settled chan struct{}) func() {
	s.mu.Lock()
	s.reaping[settled] = true
	s.mu.Unlock()
	return func() {
		s.mu.Lock()
		delete(s.reaping, settled)
		s.mu.Unlock()
	}
}

// take returns the kept init if it serves execs of kind, or nil.
func (s *Session) take(kind sandboxKind) *initProc {
	s.mu.Lock()
	defer s.mu.Unlock()
	ip := s.kept
	if ip == nil || ip.kind != kind {
		return nil
	}
	s.kept = nil
	s.timer.Stop()
	s.l.mu.Lock()
	delete(s.l.kept, ip.pid)
	s.l.mu.Unlock()
	ip.kept = true
	return ip
}

// put keeps ip, an init whose exec ended cleanly, for the next exec, or
// ends it: when the Session keeps another, is closed, or keeps none.
func (s *Session) put(ip *initProc) {
	idle := s.l.KeepIdle
	if idle == 0 {
		idle = DefaultKeepIdle
	}
	s.mu.Lock()
	s.l.mu.Lock()
	keep := !s.closed && !s.l.closed && s.kept == nil && idle > 0
	if keep {
		s.kept = ip
		s.l.kept[ip.pid] = true
	}
	s.l.mu.Unlock()
	if keep {
		s.timer = time.AfterFunc(idle, func() { s.expire(ip) })
	}
	s.mu.Unlock()
	if !keep {
		s.l.discardLater(ip)
	}
}

// expire ends ip if the Session still keeps it.
func (s *Session) expire(ip *initProc) {
	s.mu.Lock()
	if s.kept != ip {
		s.mu.Unlock()
		return
	}
	s.kept = nil
	s.mu.Unlock()
	s.l.forget(ip)
	s.l.discardLater(ip)
}

// drop ends the kept init, if any. One that is ready (its sandbox reset,
// the workspace unmounted) ends in the background (Launcher.Settle waits
// for it); one still resetting may hold the workspace, and drop waits for
// its end.
func (s *Session) drop() {
	s.mu.Lock()
	res := s.res
	s.mu.Unlock()
	if res != nil {
		res.close()
	}
	s.mu.Lock()
	ip := s.kept
	s.kept = nil
	if s.timer != nil {
		s.timer.Stop()
	}
	s.mu.Unlock()
	if ip == nil {
		return
	}
	s.l.forget(ip)
	if ip.p.readies.Load() > ip.sent {
		s.l.discardLater(ip)
		return
	}
	ip.discard()
}

// forget removes a kept init from the launcher's list of them.
func (l *Launcher) forget(ip *initProc) {
	l.mu.Lock()
	delete(l.kept, ip.pid)
	l.mu.Unlock()
}

// discardLater ends ip in the background; Settle waits for it.
func (l *Launcher) discardLater(ip *initProc) {
	settled := make(chan struct{})
	l.mu.Lock()
	l.reaping[settled] = true
	l.mu.Unlock()
	go func() {
		ip.discard()
		l.mu.Lock()
		delete(l.reaping, settled)
		l.mu.Unlock()
		close(settled)
	}()
}

// defaultKind is the sandbox of an exec without network or image: what
// warm inits prepare.
func (l *Launcher) defaultKind() sandboxKind { return sandboxKind{inNS: l.userNS != nil} }
