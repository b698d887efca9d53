package engine

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"sync"
	"time"

	"layerfs.dev/layerfs/internal/commit"
	"layerfs.dev/layerfs/internal/kerneloverlay"
	"layerfs.dev/layerfs/internal/overlay"
	"layerfs.dev/layerfs/internal/platforms"
	"layerfs.dev/layerfs/internal/serial"
	"layerfs.dev/layerfs/internal/store"
	"layerfs.dev/layerfs/wire"
	"layerfs.dev/layerfs/wire/errclass"
)

// Config is what an Engine is made of. The commands in cmd/ wire it.
type Config struct {
	Store *store.DB
	// Platforms are the host-side platforms (Features.HostMounts) sandboxes
	// can run on; the first is the default. They must be Up.
	Platforms []platforms.Platform
	Logger    *slog.Logger
	// Author signs commits whose request names none.
	Author string
	// Now is the clock; nil is time.Now.
	Now func() time.Time
	// UID and GID run execs that name none (default 0:0, with no capabilities).
	UID, GID int
	// DataPath is the data path of workspaces that name none:
	// wire.DataPathOverlay (the default; fuse, saying why, where the host
	// cannot or the base has hard links) or wire.DataPathFUSE.
	DataPath string
	// Durability is the durability of workspaces that name none:
	// wire.DurabilityCommit (the default) or wire.DurabilityFsync.
	Durability string
	// NoPrefetch leaves the contents a new workspace's commit lacks in the
	// Store's cache to be materialized by its first reads, instead of
	// fetched in the background ahead of them (ready.go).
	NoPrefetch bool
	// NoImageAhead leaves the metadata image of an import or of a commit
	// of a directory to be built by the first workspace opened on it.
	NoImageAhead bool
}

// Engine owns one Store's workspaces: their mounts, their sandboxes and
// their commits. It is safe for concurrent use; one exec never waits for
// another, while commit, end and remount of one workspace wait for that
// workspace's running execs.
type Engine struct {
	db       *store.DB
	source   string // of every FUSE mount: MountSource of the Store
	log      *slog.Logger
	author   string
	now      func() time.Time
	uid, gid int

	plats       map[string]platforms.Platform
	defaultPlat string
	dataPath    string
	durability  string
	overlayOnce sync.Once
	overlayErr  error // why the overlay data path is unavailable (overlayCheck)
	links       commit.LinkCounter
	trackers    *overlay.UpperTrackers // nil: receipts scan the upper

	mu      sync.Mutex
	live    map[string]*workspace
	closing bool
	execs   sync.WaitGroup // running execs, for a graceful stop
	// background is work started ahead of need (metadata images of new
	// commits); Shutdown waits for it.
	background sync.WaitGroup
	ahead      *serial.Queue[store.ID] // roots whose metadata images to build (buildMetaAhead)

	// rootLowers are the shared lowers of image roots (imageroot.go).
	rootsMu    sync.Mutex
	rootLowers map[store.ID]*rootLower
	// roots are image roots made ahead (rootpool.go).
	roots rootPool
	// rootImages are images' roots as imageRoot read them, by the
	// image's commit and digest (which fix all of it), under rootsMu.
	rootImages map[imageKey]rootImage

	noPrefetch   bool
	noImageAhead bool
	prefetcher   prefetcher

	metrics metrics
}

// MountSource is the source every FUSE mount of the Store in dir carries
// in /proc/self/mountinfo: "layerfs:" and a hash of the Store's absolute
// path. A daemon that takes over from one stuck dying aborts them by it.
func MountSource(dir string) string {
	sum := sha256.Sum256([]byte(filepath.Clean(dir)))
	return "layerfs:" + hex.EncodeToString(sum[:6])
}

// New makes an engine over an open Store. Call Recover next to bring back
// the workspaces a previous process left.
func New(ctx context.Context, cfg Config) (*Engine, error) {
	if cfg.Store == nil {
		return nil, errors.New("engine: no store")
	}
	e := &Engine{
		db:     cfg.Store,
		source: MountSource(cfg.Store.Dir()),
		log:    cfg.Logger,
		author: cfg.Author,
		now:    cfg.Now,
		uid:    cfg.UID,
		gid:    cfg.GID,
		plats:  map[string]platforms.Platform{},
		live:   map[string]*workspace{},

		noPrefetch:   cfg.NoPrefetch,
		noImageAhead: cfg.NoImageAhead,
	}
	if e.log == nil {
		e.log = slog.New(slog.DiscardHandler)
	}
	e.startBackground()
	if e.now == nil {
		e.now = time.Now
	}
	if e.author == "" {
		e.author = defaultAuthor()
	}
	var err error
	if e.dataPath, err = setting("data path", cfg.DataPath, wire.DataPathOverlay, wire.DataPathOverlay, wire.DataPathFUSE); err != nil {
		return nil, fmt.Errorf("engine: %w", err)
	}
	if e.durability, err = setting("durability", cfg.Durability, wire.DurabilityCommit, durabilities...); err != nil {
		return nil, fmt.Errorf("engine: %w", err)
	}
	for _, p := range cfg.Platforms {
		if _, ok := p.(platforms.SandboxHost); !ok {
			return nil, fmt.Errorf("engine: platform %s does not serve host directories; drive its guest daemon instead", p.Name())
		}
		if _, dup := e.plats[p.Name()]; dup {
			return nil, fmt.Errorf("engine: platform %s given twice", p.Name())
		}
		e.plats[p.Name()] = p
		if e.defaultPlat == "" {
			e.defaultPlat = p.Name()
		}
	}
	if err := e.cleanRootPool(); err != nil {
		return nil, fmt.Errorf("engine: %w", err)
	}
	if e.trackers, err = overlay.NewUpperTrackers(); err != nil {
		e.log.Warn("upper layers not tracked: each exec's receipt scans its workspace's upper", "err", err)
	}
	return e, nil
}

// Isolation says what each platform's sandboxes get, in Platforms' order
// (platforms.Isolator; a platform that does not say is left out).
func (e *Engine) Isolation(ctx context.Context) ([]wire.Isolation, error) {
	var out []wire.Isolation
	for _, n := range e.Platforms() {
		if p, ok := e.plats[n].(platforms.Isolator); ok {
			iso, err := p.Isolation(ctx)
			if err != nil {
				return nil, fmt.Errorf("isolation of %s: %w", n, err)
			}
			out = append(out, iso)
		}
	}
	return out, nil
}

// heldToIsolation fails an exec's result that ran outside the user
// namespace its platform gives its sandboxes: what ran with less than the
// daemon promised is an error, never a note in a receipt.
func (e *Engine) heldToIsolation(ctx context.Context, platform string, r platforms.ExecResult) error {
	p, ok := e.plats[platform].(platforms.Isolator)
	if !ok {
		return nil
	}
	iso, err := p.Isolation(ctx)
	if err != nil {
		return fmt.Errorf("isolation of %s: %w", platform, err)
	}
	if iso.UserNamespace != "" && r.UserNamespace != iso.UserNamespace {
		return fmt.Errorf("%w: the exec ran in user namespace %q, not in %s's %q", errclass.Internal, r.UserNamespace, platform, iso.UserNamespace)
	}
	return nil
}

func defaultAuthor() string {
	h, _ := os.Hostname()
	u := os.Getenv("USER")
	if u == "" {
		u = "layerfs"
	}
	return u + "@" + h
}

// Platforms names the platforms sandboxes can run on, the default first.
func (e *Engine) Platforms() []string {
	out := []string{}
	for n := range e.plats {
		if n != e.defaultPlat {
			out = append(out, n)
		}
	}
	sort.Strings(out)
	if e.defaultPlat != "" {
		out = append([]string{e.defaultPlat}, out...)
	}
	return out
}

// Running is the number of execs in progress.
func (e *Engine) Running() int { return int(e.metrics.running.Load()) }

// LiveWorkspaces is the number of workspaces this engine serves.
func (e *Engine) LiveWorkspaces() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return len(e.live)
}

func (e *Engine) liveWorkspaces() []*workspace {
	e.mu.Lock()
	defer e.mu.Unlock()
	out := make([]*workspace, 0, len(e.live))
	for _, w := range e.live {
		out = append(out, w)
	}
	return out
}

// Drain refuses new execs and workspace changes and waits (up to ctx) for
// running execs to finish. Shutdown follows.
func (e *Engine) Drain(ctx context.Context) error {
	e.mu.Lock()
	e.closing = true
	e.mu.Unlock()
	done := make(chan struct{})
	go func() { e.execs.Wait(); close(done) }()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("drain: %d execs still running: %w", e.Running(), ctx.Err())
	}
}

// Shutdown unmounts every workspace, keeping their records and upper layers
// so that the next daemon remounts them, and detaches their sandboxes.
func (e *Engine) Shutdown(ctx context.Context) error {
	e.mu.Lock()
	e.closing = true
	e.stopPrefetch()
	ws := make([]*workspace, 0, len(e.live))
	for _, w := range e.live {
		ws = append(ws, w)
	}
	e.mu.Unlock()
	var errs []error
	for _, w := range ws {
		w.mu.Lock()
		errs = append(errs, e.unserve(ctx, w))
		if w.opts.volatile() && w.opts.DataPath == wire.DataPathOverlay {
			// Kept for the next daemon, maybe after a reboot.
			errs = append(errs, kerneloverlay.Settle(e.workspaceDir(w.rec.ID)))
		}
		if w.opts.volatile() && w.opts.Image != nil {
			errs = append(errs, kerneloverlay.Settle(e.rootDir(w.rec.ID)))
		}
		w.mu.Unlock()
		e.mu.Lock()
		delete(e.live, w.rec.ID)
		e.mu.Unlock()
	}
	e.closeRootPool()
	errs = append(errs, e.closeLowers(ctx))
	if e.trackers != nil {
		errs = append(errs, e.trackers.Close())
	}
	e.background.Wait()
	return errors.Join(errs...)
}

func (e *Engine) checkOpen() error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closing {
		return fmt.Errorf("the daemon is shutting down: %w", errclass.Unavailable)
	}
	return nil
}

// durabilities are a workspace's possible durabilities.
var durabilities = []string{wire.DurabilityCommit, wire.DurabilityFsync}

// setting is the value v of a setting called what (def where v is ""),
// which must be one of allowed.
func setting(what, v, def string, allowed ...string) (string, error) {
	if v == "" {
		return def, nil
	}
	if slices.Contains(allowed, v) {
		return v, nil
	}
	return "", fmt.Errorf("%s %q: want one of %q", what, v, allowed)
}
