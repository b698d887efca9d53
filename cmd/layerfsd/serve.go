package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"layerfs.dev/layerfs/internal/api"
	"layerfs.dev/layerfs/internal/engine"
	"layerfs.dev/layerfs/internal/fusefs"
	"layerfs.dev/layerfs/internal/platforms/host"
	"layerfs.dev/layerfs/internal/store"
	"layerfs.dev/layerfs/internal/tokenfile"
	"layerfs.dev/layerfs/wire"
)

// SocketName is the daemon's socket inside the Store directory.
const SocketName = "layerfsd.sock"

// lockName is the file whose flock marks the Store's daemon.
const lockName = "layerfsd.lock"

type serveFlags struct {
	store      string
	storeURL   string // --store-url-file
	socket     string
	tcp        string
	advertise  string
	tokenFile  string
	idleExit   time.Duration
	grace      time.Duration
	platforms  []string
	dataPath   string
	durability string
	cacheBytes int64 // --cache-bytes
	noUserNS   bool
	upstream   string
	logLevel   string
	maxUpload  int64
	supervise  bool
}

func serveCmd() *cobra.Command {
	var f serveFlags
	cmd := &cobra.Command{
		Use:   "serve",
		Short: "Serve a Store's workspaces and the API",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if f.supervise {
				dir, err := storeDir(f.store)
				if err != nil {
					return err
				}
				if code := supervise(dir, withoutSupervise(os.Args[1:]), cmd.ErrOrStderr()); code != 0 {
					return exitStatus(code)
				}
				return nil
			}
			return serve(cmd.Context(), f, cmd.ErrOrStderr())
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&f.store, "store", "", "store directory (default $LAYERFS_HOME or ~/.local/share/layerfs); created when missing")
	fl.StringVar(&f.storeURL, "store-url-file", "", "file holding a shared Store's URL (postgres://...?bucket=s3://...): the store directory joins that Store at first start and must belong to it after (a Kubernetes DaemonSet mounts it from a Secret)")
	fl.StringVar(&f.socket, "socket", "", "unix socket path (default <store>/"+SocketName+")")
	fl.StringVar(&f.tcp, "tcp", "", "also listen on this TCP address (needs --token-file)")
	fl.StringVar(&f.advertise, "advertise", "", "on a shared Store, the address other hosts' clients reach this daemon's TCP listener at (tcp://HOST:PORT); requests for this host's workspaces sent to other daemons are answered with it")
	fl.StringVar(&f.tokenFile, "token-file", "", "file holding the bearer token TCP clients must send")
	fl.DurationVar(&f.idleExit, "idle-exit", 0, "exit after this long without requests and without workspaces (0: never)")
	fl.DurationVar(&f.grace, "grace", 30*time.Second, "on SIGTERM, how long running execs may take before they are killed")
	fl.StringSliceVar(&f.platforms, "platform", []string{"local"}, "sandbox platforms to bring up; the first is the default")
	fl.StringVar(&f.upstream, "egress-upstream", "", "the resolver (HOST:PORT) that answers the names egress workspaces may reach (default: the host's, from /etc/resolv.conf)")
	fl.BoolVar(&f.noUserNS, "no-user-namespace", false, "run local sandboxes in the host's user namespace (uid 0 without capabilities) instead of one of their own; host processes can then create files in local overlay workspaces' mounts under their own ids")
	fl.StringVar(&f.durability, "durability", "commit", "durability of workspaces that name none: commit (writes reach the disk with commits; a daemon crash loses nothing, a host crash what is uncommitted; fsync returns at once) or fsync (fsync and the overlay's copy-ups reach the disk)")
	fl.StringVar(&f.dataPath, "data-path", "overlay", "data path of workspaces that name none: overlay (kernel overlayfs over a FUSE view of the commit; fuse, saying why, where the host cannot or the base has hard links), or fuse")
	fl.Int64Var(&f.cacheBytes, "cache-bytes", 0, "bound of the Store's cache of contents in bytes, beyond which the least recently read are evicted (0: a quarter of its file system, -1: no bound)")
	fl.StringVar(&f.logLevel, "log-level", "info", "debug, info, warn or error")
	fl.Int64Var(&f.maxUpload, "max-upload", api.DefaultMaxUpload, "largest accepted upload in bytes")
	fl.BoolVar(&f.supervise, "supervise", false, "run under a supervisor that reaps what the daemon leaves and starts it again if it crashes")
	return cmd
}

// storeDir is the absolute Store directory of --store (default: the
// default Store).
func storeDir(flag string) (string, error) {
	if flag == "" {
		flag = store.DefaultDir()
	}
	return filepath.Abs(flag)
}

// withoutSupervise is the daemon's own command line: the supervisor's
// without --supervise.
func withoutSupervise(args []string) []string {
	return slices.DeleteFunc(slices.Clone(args), func(a string) bool {
		return a == "--supervise" || a == "--supervise=true"
	})
}

func version() string {
	if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
		return bi.Main.Version
	}
	return "devel"
}

func newLogger(w io.Writer, level string) (*slog.Logger, error) {
	var l slog.Level
	if err := l.UnmarshalText([]byte(level)); err != nil {
		return nil, usageError{fmt.Errorf("--log-level %q: want debug, info, warn or error", level)}
	}
	return slog.New(slog.NewJSONHandler(w, &slog.HandlerOptions{Level: l})), nil
}

func serve(ctx context.Context, f serveFlags, stderr io.Writer) (err error) {
	log, err := newLogger(stderr, f.logLevel)
	if err != nil {
		return err
	}
	token, err := f.resolve(log)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(f.store, 0o700); err != nil {
		return err
	}

	// One daemon per Store: the lock is held for the process's life and
	// released by the kernel however it ends.
	lock, err := lockStore(f.store, log)
	if err != nil {
		return err
	}
	defer lock.Close()
	if err := claimSocket(ctx, f.socket, log); err != nil {
		return err
	}

	db, err := openStore(ctx, f.store, f.storeURL, store.Options{Logger: log, CacheBytes: f.cacheBytes})
	if err != nil {
		return err
	}
	defer func() {
		if cerr := db.Close(); cerr != nil && err == nil {
			err = fmt.Errorf("close store: %w", cerr)
		}
	}()

	eng, down, err := newEngine(ctx, db, f.platforms, engineDefaults{dataPath: f.dataPath, durability: f.durability}, host.Options{Logger: log, NoUserNamespace: f.noUserNS,
		EgressTag: egressTag(f.store), EgressUpstream: f.upstream})
	defer func() {
		// Platforms go down last, after every workspace is unmounted.
		dctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if derr := down(dctx); derr != nil {
			log.Warn("platforms down", "err", derr)
		}
	}()
	if err != nil {
		return err
	}
	if f.advertise != "" && !db.Shared() {
		return usageError{fmt.Errorf("--advertise: the store %s is not shared (layerfs init --store postgres://...)", f.store)}
	}
	if err := eng.Recover(ctx); err != nil {
		return fmt.Errorf("recover workspaces: %w", err)
	}

	status, err := f.status(ctx, db, eng, log)
	if err != nil {
		return err
	}
	stopReq := make(chan struct{}, 1)
	srv := api.NewServer(eng, api.Options{
		Logger:    log,
		MaxUpload: f.maxUpload,
		Daemon:    status,
		Stop: func() {
			select {
			case stopReq <- struct{}{}:
			default:
			}
		},
	})

	listeners, err := f.listen()
	if err != nil {
		return err
	}
	defer os.Remove(f.socket)
	servers := []*http.Server{newHTTPServer(srv.Handler(api.ListenerOptions{}), log)}
	if len(listeners) > 1 {
		servers = append(servers, newHTTPServer(srv.Handler(api.ListenerOptions{Token: token}), log))
	}
	serveErr := make(chan error, len(servers))
	for i, hs := range servers {
		go func() {
			if err := hs.Serve(listeners[i]); !errors.Is(err, http.ErrServerClosed) {
				serveErr <- err
			}
		}()
	}
	if db.Shared() {
		// Other hosts' daemons learn where this one answers once it does.
		defer heartbeat(db, f.advertise, log)()
	}
	tellSupervisor()
	log.Info("serving", "store", f.store, "socket", f.socket, "tcp", f.tcp, "node", db.Node(), "advertise", f.advertise, "platforms", eng.Platforms(),
		"idle_exit", f.idleExit.String(), "pid", os.Getpid(), "version", version())

	reason := wait(ctx, srv, eng, f.idleExit, stopReq, serveErr)
	log.Info("shutting down", "reason", reason, "grace", f.grace.String())
	return shutdown(srv, eng, servers, f.grace, log)
}

// resolve checks the flags and makes the store and socket paths absolute;
// it returns the TCP listener's token, read from --token-file.
func (f *serveFlags) resolve(log *slog.Logger) (token string, err error) {
	if f.store, err = storeDir(f.store); err != nil {
		return "", err
	}
	if f.socket == "" {
		f.socket = filepath.Join(f.store, SocketName)
	}
	if f.socket, err = filepath.Abs(f.socket); err != nil {
		return "", err
	}
	if f.idleExit < 0 || f.grace < 0 {
		return "", usageError{errors.New("--idle-exit and --grace must not be negative")}
	}
	if f.tcp != "" {
		if token, err = readToken(f.tokenFile, log); err != nil {
			return "", err
		}
	} else if f.tokenFile != "" {
		return "", usageError{errors.New("--token-file is only used with --tcp")}
	}
	return token, checkAdvertise(f.advertise, f.tcp)
}

// status is what GET /v1/daemon answers of this daemon; it logs each
// platform's sandbox isolation on the way.
func (f *serveFlags) status(ctx context.Context, db *store.DB, eng daemonEngine, log *slog.Logger) (wire.DaemonStatus, error) {
	isolation, err := eng.Isolation(ctx)
	if err != nil {
		return wire.DaemonStatus{}, err
	}
	for _, iso := range isolation {
		log.Info("sandbox isolation", "platform", iso.Platform, "user_namespace", iso.UserNamespace, "no_user_namespace", iso.NoUserNamespace,
			"seccomp", iso.Seccomp, "network", iso.Network)
	}
	status := wire.DaemonStatus{
		Isolation: isolation,
		Version:   wire.Version{Version: version(), Store: f.store},
		Platforms: eng.Platforms(),
		Socket:    f.socket,
		TCP:       f.tcp,
		Node:      db.Node(),
		Advertise: f.advertise,
	}
	if f.idleExit > 0 {
		status.IdleExit = f.idleExit.String()
	}
	status.Supervisor, _ = strconv.Atoi(os.Getenv(supervisorEnv))
	return status, nil
}

// listen opens the unix socket and, with --tcp, the TCP listener, which
// comes first and is second in the list: the unix socket's appearing is
// the sign that the daemon answers (the CLI and the tests wait for it), on
// every listener.
func (f *serveFlags) listen() ([]net.Listener, error) {
	var tcpL net.Listener
	if f.tcp != "" {
		var err error
		if tcpL, err = net.Listen("tcp", f.tcp); err != nil {
			return nil, fmt.Errorf("listen on %s: %w", f.tcp, err)
		}
	}
	unixL, err := listenUnix(f.socket)
	if err != nil {
		if tcpL != nil {
			tcpL.Close()
		}
		return nil, err
	}
	if tcpL != nil {
		return []net.Listener{unixL, tcpL}, nil
	}
	return []net.Listener{unixL}, nil
}

// wait blocks until a reason to stop and names it.
func wait(ctx context.Context, srv *api.Server, eng daemonEngine, idle time.Duration, stop <-chan struct{}, serveErr <-chan error) string {
	var tick <-chan time.Time
	if idle > 0 {
		t := time.NewTicker(min(idle/4, time.Second))
		defer t.Stop()
		tick = t.C
	}
	for {
		select {
		case <-ctx.Done():
			return "signal"
		case <-stop:
			return "stop requested through the API"
		case err := <-serveErr:
			return "listener failed: " + err.Error()
		case <-tick:
			if srv.Idle() >= idle && eng.LiveWorkspaces() == 0 {
				return "idle for " + idle.String()
			}
		}
	}
}

// shutdown drains the API, gives running execs the grace period, kills
// what is left, then stops the listeners and unmounts.
func shutdown(srv *api.Server, eng daemonEngine, servers []*http.Server, grace time.Duration, log *slog.Logger) error {
	srv.Drain()
	graceCtx, cancel := context.WithTimeout(context.Background(), grace)
	err := srv.WaitIdle(graceCtx)
	cancel()
	if err != nil {
		log.Warn("grace period over: killing running execs", "running", srv.RunningExecs())
		srv.Abort()
		late, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		if err := srv.WaitIdle(late); err != nil {
			log.Error("requests still running after abort", "err", err)
		}
		cancel()
	}
	stopCtx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := eng.Drain(stopCtx); err != nil {
		log.Warn("engine drain", "err", err)
	}
	var errs []error
	for _, hs := range servers {
		if err := hs.Shutdown(stopCtx); err != nil {
			errs = append(errs, fmt.Errorf("stop listener: %w", err))
			hs.Close()
		}
	}
	if err := eng.Shutdown(stopCtx); err != nil {
		errs = append(errs, fmt.Errorf("unmount workspaces: %w", err))
	}
	if err := errors.Join(errs...); err != nil {
		return err
	}
	log.Info("stopped")
	return nil
}

func newHTTPServer(h http.Handler, log *slog.Logger) *http.Server {
	return &http.Server{
		Handler: h,
		// No write timeout: exec streams and downloads last as long as they do.
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       2 * time.Minute,
		ConnContext:       api.PeerContext,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}
}

// readToken reads the bearer token for TCP (internal/tokenfile's rules),
// warning when other users can read it.
func readToken(path string, log *slog.Logger) (string, error) {
	if path == "" {
		return "", usageError{errors.New("--tcp needs --token-file: the TCP listener never runs without a token")}
	}
	tok, warning, err := tokenfile.Read(path)
	if warning != nil {
		log.Warn("token file is readable by other users", "path", path, "err", warning)
	}
	return tok, err
}

// lockStore takes the Store's daemon lock without waiting on a live
// daemon, and writes this process's pid into the lock file. A holder that is
// dying (killed while a thread of it waited on a request to its own FUSE
// mount, so it can never finish exiting by itself) has its FUSE connections
// aborted, after which it ends and the lock is taken: a bounded wait.
func lockStore(dir string, log *slog.Logger) (*os.File, error) {
	f, err := os.OpenFile(filepath.Join(dir, lockName), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("daemon lock: %w", err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if err == nil {
			break
		}
		if !errors.Is(err, syscall.EWOULDBLOCK) {
			f.Close()
			return nil, fmt.Errorf("daemon lock: %w", err)
		}
		holder := lockHolder(f)
		if holder <= 0 || !dying(holder) || time.Now().After(deadline) {
			f.Close()
			return nil, fmt.Errorf("another layerfsd already serves the store %s", dir)
		}
		unstick(holder, dir, log)
		time.Sleep(20 * time.Millisecond)
	}
	if err := f.Truncate(0); err == nil {
		_, _ = f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
	}
	return f, nil
}

// unstick aborts the FUSE connections of a daemon stuck dying: those its
// threads still hold, and every mount of the Store (its descriptors are
// gone once it closes its files at exit, which is where it may wait).
func unstick(pid int, dir string, log *slog.Logger) {
	held, err1 := fusefs.AbortHeldBy(pid)
	mounts, err2 := fusefs.AbortSource(engine.MountSource(dir))
	if held+mounts > 0 || err1 != nil || err2 != nil {
		log.Warn("a daemon is stuck dying; aborted its FUSE connections", "pid", pid, "held", held, "mounts", mounts, "err", errors.Join(err1, err2))
	}
}

// lockHolder reads the pid a daemon wrote into the lock file (0 if none).
func lockHolder(f *os.File) int {
	b := make([]byte, 32)
	n, _ := f.ReadAt(b, 0)
	pid, _ := strconv.Atoi(strings.TrimSpace(string(b[:n])))
	return pid
}

// dying reports whether process pid has been killed but has not ended:
// its thread group leader has exited (state Z) while threads remain, or a
// SIGKILL is pending, which a thread waiting uninterruptibly (on a FUSE
// request to the process's own mount) never takes.
func dying(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return false
	}
	const sigkill = 1 << (9 - 1)
	for _, line := range strings.Split(string(b), "\n") {
		k, v, _ := strings.Cut(line, ":")
		v = strings.TrimSpace(v)
		switch k {
		case "State":
			if strings.HasPrefix(v, "Z") || strings.HasPrefix(v, "X") {
				return true
			}
		case "SigPnd", "ShdPnd":
			if mask, err := strconv.ParseUint(v, 16, 64); err == nil && mask&sigkill != 0 {
				return true
			}
		}
	}
	return false
}

// maxSocketPath is the longest path a unix socket may have (sun_path's 108
// bytes with the terminating NUL).
const maxSocketPath = 107

// claimSocket makes sure nothing answers at path and removes a stale
// socket a dead daemon left.
func claimSocket(ctx context.Context, path string, log *slog.Logger) error {
	if len(path) > maxSocketPath {
		return fmt.Errorf("socket path %s is %d bytes; unix sockets allow at most 107 (use --socket)", path, len(path))
	}
	fi, err := os.Lstat(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	if fi.Mode()&os.ModeSocket == 0 {
		return fmt.Errorf("%s exists and is not a socket; refusing to replace it", path)
	}
	d := net.Dialer{Timeout: time.Second}
	c, err := d.DialContext(ctx, "unix", path)
	if err == nil {
		c.Close()
		return fmt.Errorf("another daemon answers on %s", path)
	}
	log.Info("removing a stale socket", "path", path, "dial_err", err.Error())
	if err := os.Remove(path); err != nil {
		return fmt.Errorf("remove stale socket: %w", err)
	}
	return nil
}

// listenUnix listens at path with mode 0600 from the start (the umask
// covers the moment between bind and chmod). It binds a temporary name
// beside path and renames it into place once listening, so a client that
// sees the socket (the SDKs' tests wait for it to appear) can connect:
// between bind and listen a connect is refused.
func listenUnix(path string) (net.Listener, error) {
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	tmp := filepath.Join(dir, fmt.Sprintf(".l%d", os.Getpid()))
	if len(tmp) > maxSocketPath {
		tmp = path // the temporary name does not fit; bind in place
	}
	os.Remove(tmp)
	old := syscall.Umask(0o177)
	l, err := net.Listen("unix", tmp)
	syscall.Umask(old)
	if err != nil {
		return nil, fmt.Errorf("listen on %s: %w", path, err)
	}
	// The socket is removed by serve itself, after the listeners stop.
	l.(*net.UnixListener).SetUnlinkOnClose(false)
	if err := os.Chmod(tmp, 0o600); err != nil {
		l.Close()
		os.Remove(tmp)
		return nil, err
	}
	if err := os.Rename(tmp, path); err != nil {
		l.Close()
		os.Remove(tmp)
		return nil, fmt.Errorf("listen on %s: %w", path, err)
	}
	return l, nil
}

// openStore opens the Store in dir, creating an embedded one when there is
// none; with urlFile, dir joins the shared Store whose URL the file holds.
func openStore(ctx context.Context, dir, urlFile string, opts store.Options) (*store.DB, error) {
	if urlFile != "" {
		url, err := os.ReadFile(urlFile)
		if err != nil {
			return nil, fmt.Errorf("--store-url-file: %w", err)
		}
		opts.URL = strings.TrimSpace(string(url))
		return store.Join(ctx, dir, opts)
	}
	db, err := store.Open(ctx, dir, opts)
	if errors.Is(err, store.ErrNoStore) {
		opts.Logger.Info("creating a new store", "dir", dir)
		db, err = store.Init(ctx, dir, opts)
	}
	return db, err
}

// egressTag names the egress tables of the daemon of store: the same for
// a daemon started again on it, so that it removes what a crashed one
// left (5 hex digits of the store's path).
func egressTag(store string) string {
	h := sha256.Sum256([]byte(store))
	return hex.EncodeToString(h[:3])[:5]
}
