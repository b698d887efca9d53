package api

import (
	"context"
	"crypto/subtle"
	"log/slog"
	"net/http"
	"os"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"layerfs.dev/layerfs/wire"
	"layerfs.dev/layerfs/wire/errclass"
)

// Limits of request bodies.
const (
	// MaxJSON caps every JSON request body.
	MaxJSON = 1 << 20
	// DefaultMaxUpload caps file and tar uploads unless Options.MaxUpload says otherwise.
	DefaultMaxUpload = 8 << 30
	// DefaultMaxExecOutput caps each stream of an exec collected whole.
	DefaultMaxExecOutput = 64 << 20
)

// Options configure a Server. The zero value is usable.
type Options struct {
	// Logger receives one record per request and every internal error; nil is silent.
	Logger *slog.Logger
	// MaxUpload caps the body of file and tar uploads (DefaultMaxUpload when 0).
	MaxUpload int64
	// MaxExecOutput caps each of stdout and stderr of an exec whose output is
	// collected whole (DefaultMaxExecOutput when 0); streamed output is not
	// buffered and only the engine's output limit applies.
	MaxExecOutput int64
	// Daemon is the static part of GET /v1/daemon and GET /v1/version; the
	// server fills in its start time, the running execs and the workspaces.
	Daemon wire.DaemonStatus
	// Stop is called (once, in its own goroutine) by POST /v1/daemon/stop;
	// when nil that route answers 503.
	Stop func()
	// Now is the clock (time.Now when nil).
	Now func() time.Time
}

// ListenerOptions configure the handler of one listener.
type ListenerOptions struct {
	// Token, when set, is required as "Authorization: Bearer <token>" on
	// every request (TCP listeners); requests without it get 401.
	Token string
}

// Server serves the API for one engine. It is safe for concurrent use.
type Server struct {
	// The engine's services, each used by one group of handlers.
	projects      ProjectManager
	branches      BranchManager
	history       History
	workspaces    WorkspaceManager
	executor      Executor
	services      Services
	ports         Ports
	files         Files
	watcher       Watcher
	images        ImageManager
	maintenance   Maintenance
	engineMetrics MetricsWriter

	opts    Options
	log     *slog.Logger
	mux     *http.ServeMux
	metrics *metrics
	started time.Time
	reqID   atomic.Uint64

	// portTransport carries previews' requests to workspaces' ports.
	portTransport *http.Transport

	abortCtx context.Context
	abort    context.CancelFunc
	// drainCtx ends on Drain: long streams (events) close then, so that
	// shutdown does not wait on them.
	drainCtx  context.Context
	drainStop context.CancelFunc
	stopOnce  sync.Once

	mu         sync.Mutex
	draining   bool
	work       int           // mutating requests running
	execs      int           // execs running
	inFlight   int           // all requests running
	lastActive time.Time     // end of the last request
	changed    chan struct{} // closed and replaced whenever work drops
}

// NewServer returns a server for eng, which serves every service.
func NewServer(eng Engine, opts Options) *Server {
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.MaxUpload <= 0 {
		opts.MaxUpload = DefaultMaxUpload
	}
	if opts.MaxExecOutput <= 0 {
		opts.MaxExecOutput = DefaultMaxExecOutput
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	v := &opts.Daemon.Version
	v.API = wire.APIVersion
	if v.GoVersion == "" {
		v.GoVersion = runtime.Version()
	}
	if v.PID == 0 {
		v.PID = os.Getpid()
	}
	if v.Version == "" {
		v.Version = "devel"
	}
	s := &Server{
		projects:      eng,
		branches:      eng,
		history:       eng,
		workspaces:    eng,
		executor:      eng,
		services:      eng,
		ports:         eng,
		files:         eng,
		watcher:       eng,
		images:        eng,
		maintenance:   eng,
		engineMetrics: eng,
		opts:          opts,
		log:           opts.Logger,
		mux:           http.NewServeMux(),
		metrics:       newMetrics(),
		started:       opts.Now(),
		changed:       make(chan struct{}),
	}
	s.lastActive = s.started
	s.portTransport = s.newPortTransport()
	s.abortCtx, s.abort = context.WithCancel(context.Background())
	s.drainCtx, s.drainStop = context.WithCancel(context.Background())
	s.routes()
	return s
}

// Handler returns the HTTP handler for one listener.
func (s *Server) Handler(lo ListenerOptions) http.Handler {
	var h http.Handler = http.HandlerFunc(s.serveAPI)
	if lo.Token != "" {
		h = s.requireToken(lo.Token, h)
	}
	return s.instrument(h)
}

// Drain makes the server refuse new work with 503 from now on. Requests
// already running continue; read-only requests are still served.
func (s *Server) Drain() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.draining = true
	s.drainStop()
}

// Draining reports whether Drain was called.
func (s *Server) Draining() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.draining
}

// WaitIdle waits until no mutating request (exec, commit, upload, ...) is
// running, or ctx ends.
func (s *Server) WaitIdle(ctx context.Context) error {
	for {
		s.mu.Lock()
		n, ch := s.work, s.changed
		s.mu.Unlock()
		if n == 0 {
			return nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// Abort cancels the context of every running request (running execs are
// killed by the engine when their context ends).
func (s *Server) Abort() { s.abort() }

// Idle reports how long the server has been without any request running
// (0 while one runs).
func (s *Server) Idle() time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.inFlight > 0 {
		return 0
	}
	return s.opts.Now().Sub(s.lastActive)
}

// RunningExecs reports the number of execs running.
func (s *Server) RunningExecs() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.execs
}

// beginWork admits a mutating request unless the server drains. The
// returned context also ends on Abort.
func (s *Server) beginWork(ctx context.Context, exec bool) (context.Context, func(), bool) {
	s.mu.Lock()
	if s.draining {
		s.mu.Unlock()
		return nil, nil, false
	}
	s.work++
	if exec {
		s.execs++
	}
	s.mu.Unlock()
	ctx, cancel := context.WithCancel(ctx)
	stop := context.AfterFunc(s.abortCtx, cancel)
	return ctx, func() {
		stop()
		cancel()
		s.mu.Lock()
		s.work--
		if exec {
			s.execs--
		}
		close(s.changed)
		s.changed = make(chan struct{})
		s.mu.Unlock()
	}, true
}

func (s *Server) requireToken(token string, next http.Handler) http.Handler {
	want := []byte("Bearer " + token)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasPrefix(r.URL.Path, wire.SharePrefix) {
			// A share's own token is its authority (ports.go).
			next.ServeHTTP(w, r)
			return
		}
		got := []byte(r.Header.Get("Authorization"))
		if subtle.ConstantTimeCompare(got, want) != 1 {
			w.Header().Set("WWW-Authenticate", `Bearer realm="layerfsd"`)
			writeError(w, errclass.Unauthorized, "missing or wrong bearer token")
			return
		}
		next.ServeHTTP(w, r)
	})
}

// serveAPI rejects request paths that the mux would otherwise redirect
// (".", ".." or empty segments) with a clear 400, then routes.
func (s *Server) serveAPI(w http.ResponseWriter, r *http.Request) {
	if msg := badURLPath(r.URL.Path); msg != "" {
		writeError(w, errclass.Invalid, msg)
		return
	}
	if _, pattern := s.mux.Handler(r); pattern == "" {
		s.noRoute(w, r)
		return
	}
	s.mux.ServeHTTP(w, r)
}

// noRoute answers a request no route matches with a JSON 404, or 405 with
// the mux's Allow header when the path exists for other methods.
func (s *Server) noRoute(w http.ResponseWriter, r *http.Request) {
	h, _ := s.mux.Handler(r)
	probe := &headerProbe{header: http.Header{}}
	h.ServeHTTP(probe, r)
	if probe.status == http.StatusMethodNotAllowed {
		w.Header().Set("Allow", probe.header.Get("Allow"))
		writeError(w, errclass.MethodNotAllowed,
			"method "+r.Method+" is not allowed on "+r.URL.Path+" (allowed: "+probe.header.Get("Allow")+")")
		return
	}
	writeError(w, errclass.NotFound, "no such route: "+r.Method+" "+r.URL.Path)
}

// headerProbe records what the mux's own not-found or not-allowed handler
// would answer, without sending it.
type headerProbe struct {
	header http.Header
	status int
}

func (p *headerProbe) Header() http.Header         { return p.header }
func (p *headerProbe) Write(b []byte) (int, error) { return len(b), nil }
func (p *headerProbe) WriteHeader(code int)        { p.status = code }

func badURLPath(p string) string {
	if strings.ContainsRune(p, 0) {
		return "request path contains a NUL byte"
	}
	if !strings.HasPrefix(p, "/") {
		return "request path must be absolute"
	}
	segs := strings.Split(p[1:], "/")
	for i, seg := range segs {
		switch {
		case seg == "." || seg == "..":
			return "request path must not contain \".\" or \"..\" elements"
		case seg == "" && i != len(segs)-1:
			return "request path must not contain empty elements"
		}
	}
	return ""
}
