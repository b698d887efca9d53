package bench

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"time"

	"layerfs.dev/layerfs/client"
	"layerfs.dev/layerfs/internal/api"
	"layerfs.dev/layerfs/internal/engine"
	"layerfs.dev/layerfs/internal/platforms"
	"layerfs.dev/layerfs/internal/store"
)

// Daemon is a daemon served from this process over a fresh Store: the
// engine and the HTTP API on a unix socket, driven through the SDK like
// any other. The bench makes one per sample so that every sample starts
// from a fresh Store, as the method requires.
type Daemon struct {
	Client *client.Client
	Store  *store.DB
	dir    string
	eng    *engine.Engine
	srv    *http.Server
	ln     net.Listener
	// remove removes the Store's scope (StartScopedFleetDaemon); nil else.
	remove  func(context.Context) error
	sock    string // the API's unix socket
	sockDir string // holds sock when dir is too deep for a socket; "" else
}

// maxSocketPath is the longest path a unix socket may have (sun_path's 108
// bytes with the terminating NUL).
const maxSocketPath = 107

// StartDaemon initialises a Store in dir (which must not hold one) and
// serves it with the given host platforms, which must be Up.
func StartDaemon(ctx context.Context, dir string, plats []platforms.Platform, log *slog.Logger) (*Daemon, error) {
	return startDaemon(ctx, dir, store.Options{Logger: log}, engine.Config{}, plats, log)
}

// DaemonMode says how a bench daemon readies committed contents for the
// workspaces that read them.
type DaemonMode string

// The modes of StartDaemonIn.
const (
	// Ready is the daemon's own way: contents in the Store's cache when
	// captured, metadata images built when commits are published,
	// missing contents prefetched when a workspace opens.
	Ready DaemonMode = "ready"
	// Lazy readies nothing ahead: a content is materialized by its first
	// read, an image built by its commit's first open.
	Lazy DaemonMode = "lazy"
)

// StartDaemonIn is StartDaemon with the given mode; url, unless "", makes
// it a host of that shared Store.
func StartDaemonIn(ctx context.Context, mode DaemonMode, dir, url string, plats []platforms.Platform, log *slog.Logger) (*Daemon, error) {
	opts, cfg := store.Options{Logger: log, URL: url}, engine.Config{}
	switch mode {
	case Ready:
	case Lazy:
		opts.NoCacheFill, opts.NoPrefetch, cfg.NoPrefetch, cfg.NoImageAhead = true, true, true, true
	default:
		return nil, fmt.Errorf("daemon mode %q: want %s or %s", mode, Ready, Lazy)
	}
	return startDaemon(ctx, dir, opts, cfg, plats, log)
}

// StartFleetDaemon is StartDaemon for a host of the shared Store at url:
// dir becomes the host's directory (its caches and workspaces).
func StartFleetDaemon(ctx context.Context, dir, url string, plats []platforms.Platform, log *slog.Logger) (*Daemon, error) {
	return startDaemon(ctx, dir, store.Options{Logger: log, URL: url}, engine.Config{}, plats, log)
}

// StartScopedFleetDaemon is StartFleetDaemon on an empty scope of its own
// in the shared Store at url (store.NewScope: a PostgreSQL schema and a key
// prefix): a fresh Store, as StartDaemon's is, which Close removes.
func StartScopedFleetDaemon(ctx context.Context, dir, url string, plats []platforms.Platform, log *slog.Logger) (*Daemon, error) {
	scoped, remove, err := store.NewScope(ctx, url, fmt.Sprintf("bench_%016x", rand.Uint64()))
	if err != nil {
		return nil, err
	}
	d, err := StartFleetDaemon(ctx, dir, scoped, plats, log)
	if err != nil {
		remove(context.WithoutCancel(ctx))
		return nil, err
	}
	d.remove = remove
	return d, nil
}

func startDaemon(ctx context.Context, dir string, opts store.Options, cfg engine.Config, plats []platforms.Platform, log *slog.Logger) (*Daemon, error) {
	open := store.Init
	if opts.URL == "" && store.Exists(dir) {
		open = store.Open // a daemon started again on its Store
	}
	db, err := open(ctx, dir, opts)
	if err != nil {
		return nil, err
	}
	cfg.Store, cfg.Platforms, cfg.Logger = db, plats, log
	eng, err := engine.New(ctx, cfg)
	if err != nil {
		db.Close()
		return nil, err
	}
	sock, sockDir := filepath.Join(dir, "bench.sock"), ""
	if len(sock) > maxSocketPath {
		// A deep output directory (run from one): the socket gets a
		// short directory of its own.
		if sockDir, err = os.MkdirTemp("", "layerfs-bench-"); err != nil {
			db.Close()
			return nil, err
		}
		sock = filepath.Join(sockDir, "bench.sock")
	}
	ln, err := net.Listen("unix", sock)
	if err != nil {
		db.Close()
		if sockDir != "" {
			os.RemoveAll(sockDir)
		}
		return nil, err
	}
	os.Chmod(sock, 0o600)
	s := api.NewServer(eng, api.Options{Logger: log})
	d := &Daemon{Store: db, dir: dir, eng: eng, ln: ln, sock: sock, sockDir: sockDir,
		srv: &http.Server{Handler: s.Handler(api.ListenerOptions{}), ReadHeaderTimeout: 10 * time.Second}}
	go d.srv.Serve(ln)
	d.Client, err = client.Dial(ctx, d.Endpoint())
	if err != nil {
		d.Close(context.WithoutCancel(ctx))
		return nil, fmt.Errorf("dial the bench daemon: %w", err)
	}
	return d, nil
}

// Endpoint is the address the daemon's API answers at.
func (d *Daemon) Endpoint() string { return "unix://" + d.sock }

// Close stops serving, unmounts what is left and closes the Store (and
// removes its scope, if it has one). The Store's directory stays for
// inspection; the caller removes it.
func (d *Daemon) Close(ctx context.Context) error {
	var errs []error
	if d.Client != nil {
		errs = append(errs, d.Client.Close())
	}
	errs = append(errs, d.srv.Shutdown(ctx))
	errs = append(errs, d.eng.Shutdown(ctx))
	errs = append(errs, d.Store.Close())
	if d.remove != nil {
		errs = append(errs, d.remove(ctx))
	}
	if d.sockDir != "" {
		errs = append(errs, os.RemoveAll(d.sockDir))
	}
	return errors.Join(errs...)
}
