package kerneloverlay

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"

	"golang.org/x/sys/unix"

	"layerfs.dev/layerfs/internal/account"
	"layerfs.dev/layerfs/internal/fusefs"
	"layerfs.dev/layerfs/internal/overlay"
	"layerfs.dev/layerfs/internal/store"
)

// Options is what the overlay mount is made with.
const Options = "redirect_dir=on,metacopy=on"

// Config says what to mount.
type Config struct {
	Lower overlay.Lower
	// Root is the committed tree the workspace lies over; Base the root
	// tree of its last commit (ZeroID: Root).
	Root, Base store.ID
	// Dir is the workspace's own directory; it holds upper/, work/ (the
	// kernel's), lower/ (the FUSE view's mountpoint) and view/.
	Dir string
	// Target is where the workspace is mounted.
	Target string
	// Committed is the upper as the last commit saw it: EmptyUpper for a
	// new workspace, nil when unknown (a remount after a crash).
	Committed *overlay.UpperState
	Logger    *slog.Logger
	// Source names the FUSE view in mountinfo (fusefs.Options.Source).
	Source string
	// IDMap, when set, mounts the overlay over id-mapped layers (see
	// IDMap); nil mounts it over the layers as they are.
	IDMap *IDMap
	// MetaCache is the Store's cache directory (store.DB.CacheDir): the
	// metadata images are kept there, built once per commit (see
	// MetaImage), and the overlay reads the contents Lower trusts there
	// directly (see content.go). "" keeps the image in Dir, and reads
	// every content through the view.
	MetaCache string
	// NoMeta serves the commit's metadata from the FUSE view too (the
	// view is then the overlay's whole lower), for comparison.
	NoMeta bool
	// Volatile mounts the overlay with overlayfs's volatile option: no
	// sync of the upper, at copy-up or on request (see volatile.go).
	Volatile bool
	// Account is the FUSE view's fusefs.Options.Account: the account a
	// request of the view is counted in, by the process that made it
	// (kernel overlayfs reads the view on behalf of the process that reads
	// the workspace, so that process's pid comes with the request).
	Account func(pid uint32) *account.Account
}

// IDMap is the user namespace whose mapping a workspace's layers take.
// The overlay is then mounted over an id-mapped clone of the FUSE view and
// one of the workspace's directory (its upper and work directories), so
// that a file owned by id N on disk belongs, through the workspace mount,
// to the host id that N maps to. A sandbox whose user namespace has that
// mapping sees the ids on disk as they are, and what its processes create
// is owned on disk by their ids inside (its root's files by 0): the
// kernel cannot id-map an overlay mount itself, only its layers.
//
// The mount then serves every process with the mapped ids: on the host,
// files show the range's host ids, and only a process whose file system
// uid and gid are in the range can create files there (any other gets
// EOVERFLOW); the daemon writes as Root (package fsids), and the host's
// users through a view of their own (package hostview).
type IDMap struct {
	UserNS *os.File // an open /proc/PID/ns/user with the mapping
	Root   uint32   // the host id that id 0 maps to
	Size   uint32   // how many ids it maps
}

// Mount is one workspace served on the overlay data path.
type Mount struct {
	cfg  Config
	view *fusefs.Server
	// shared: view is a SharedLower's, which Unmount leaves mounted.
	shared bool

	mu        sync.Mutex // serializes Changes and MarkCommitted
	base      store.ID
	committed *overlay.UpperState
	idmap     *IDMap // the layers' mapping; nil: none
	whyNoMeta string // why the view is the whole lower; "": a metadata layer serves
	cached    bool   // the Store's cache is a data layer (with the metadata layer)
	// hostStopped: the host stopped while the workspace was mounted
	// volatile, so changes since its last commit may be incomplete.
	hostStopped bool

	unmountOnce sync.Once
	unmountErr  error
}

// Dirs of a workspace directory.
func upperDir(dir string) string { return filepath.Join(dir, "upper") }
func workDir(dir string) string  { return filepath.Join(dir, "work") }
func lowerDir(dir string) string { return filepath.Join(dir, "lower") }
func viewDir(dir string) string  { return filepath.Join(dir, "view") }

// loads reports whether the kernel can make a file system of type fstype
// that /proc/filesystems does not list yet: a module not loaded (a
// distribution kernel's overlay, as in a VM's guest), which opening a
// file system context of that type loads.
func loads(fstype string) bool {
	fd, err := unix.Fsopen(fstype, unix.FSOPEN_CLOEXEC)
	if err != nil {
		return false
	}
	unix.Close(fd)
	return true
}

// UpperDir is the upper directory of the workspace directory dir.
func UpperDir(dir string) string { return upperDir(dir) }

// Check reports why this host cannot serve the overlay data path with an
// upper under dir, or nil: overlayfs must be in the kernel, and the upper's
// file system must take trusted.* xattrs (overlayfs keeps opaque
// directories, redirects and metacopies in them) and have fine-grained
// timestamps (overlay.FineTimestamps).
func Check(dir string) error {
	b, err := os.ReadFile("/proc/filesystems")
	if err != nil {
		return fmt.Errorf("overlay: %w", err)
	}
	if !strings.Contains(string(b), "\toverlay\n") && !loads("overlay") {
		return errors.New("the kernel has no overlayfs")
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	f, err := os.CreateTemp(dir, "xattr-probe")
	if err != nil {
		return err
	}
	defer os.Remove(f.Name())
	defer f.Close()
	if err := unix.Fsetxattr(int(f.Fd()), "trusted.layerfs.probe", []byte("y"), 0); err != nil {
		return fmt.Errorf("no trusted xattrs on the file system of %s: %w", dir, err)
	}
	if fine, err := overlay.FineTimestamps(dir); err != nil {
		return err
	} else if !fine {
		return fmt.Errorf("the file system of %s has coarse timestamps (a commit could miss a change)", dir)
	}
	if strings.ContainsAny(dir, ",:\\") {
		return fmt.Errorf("workspace directory %q holds a character overlayfs options cannot carry", dir)
	}
	return nil
}

// New mounts the FUSE view of cfg.Root and the overlay over it at
// cfg.Target (an existing directory).
func New(ctx context.Context, cfg Config) (*Mount, error) {
	if err := Detach(cfg.Target, cfg.Dir); err != nil {
		return nil, err
	}
	for _, d := range []string{upperDir(cfg.Dir), workDir(cfg.Dir), lowerDir(cfg.Dir)} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return nil, fmt.Errorf("overlay mount: %w", err)
		}
	}
	hostStopped, err := clearVolatile(cfg.Dir, cfg.Volatile)
	if err != nil {
		return nil, fmt.Errorf("overlay mount: %w", err)
	}
	if hostStopped && cfg.Logger != nil {
		cfg.Logger.Warn("the host stopped while this workspace was mounted with durability commit: its changes since the last commit may be incomplete", "dir", cfg.Dir)
	}
	meta, whyNoMeta := -1, ""
	if cfg.NoMeta {
		whyNoMeta = "disabled by option"
	} else if meta, err = openMeta(ctx, cfg); err != nil {
		// The overlay still works with the view as its whole lower.
		whyNoMeta = err.Error()
		if cfg.Logger != nil {
			cfg.Logger.Warn("overlay without a metadata layer", "dir", cfg.Dir, "err", err)
		}
	}
	if meta >= 0 {
		defer unix.Close(meta)
	}
	srv, err := mountView(ctx, cfg, meta >= 0)
	if err != nil {
		return nil, err
	}
	cache := dataLayer(cfg)
	verity := false
	if meta >= 0 {
		if verity, err = readyVerity(ctx, cfg); err != nil && cfg.Logger != nil {
			// The seals and the trusted layer still guard the data.
			cfg.Logger.Warn("overlay without verity=on", "dir", cfg.Dir, "err", err)
		}
	}
	err = mountOverlay(lowerDir(cfg.Dir), cfg.Dir, cfg.Target, meta, cache, cfg.IDMap, cfg.Volatile, verity)
	if err != nil && meta >= 0 && cache != "" {
		// The cache on a stacked file system can be a level too deep:
		// the view serves every content then.
		if cfg.Logger != nil {
			cfg.Logger.Warn("overlay refused the Store's cache as a data layer", "dir", cfg.Dir, "err", err)
		}
		cache = ""
		err = mountOverlay(lowerDir(cfg.Dir), cfg.Dir, cfg.Target, meta, cache, cfg.IDMap, cfg.Volatile, false)
	}
	if err != nil && meta >= 0 {
		// (An image on a stacked file system can be one level too deep
		// for overlayfs, where the view is not.)
		whyNoMeta = err.Error()
		if cfg.Logger != nil {
			cfg.Logger.Warn("overlay refused the metadata layer", "dir", cfg.Dir, "err", err)
		}
		// The view of the contents makes way for the view of the tree.
		if uerr := srv.Unmount(ctx); uerr != nil {
			err = errors.Join(err, uerr)
		} else {
			if srv, err = mountView(ctx, cfg, false); err != nil {
				return nil, err
			}
			err = mountOverlay(lowerDir(cfg.Dir), cfg.Dir, cfg.Target, -1, "", cfg.IDMap, cfg.Volatile, false)
		}
	}
	if err != nil {
		srv.Unmount(context.WithoutCancel(ctx))
		return nil, err
	}
	base := cfg.Base
	if base.IsZero() {
		base = cfg.Root
	}
	return &Mount{cfg: cfg, view: srv, base: base, committed: cfg.Committed, idmap: cfg.IDMap, whyNoMeta: whyNoMeta,
		cached: whyNoMeta == "" && cache != "", hostStopped: hostStopped}, nil
}

// dataLayer is the directory the overlay reads contents from with no
// daemon in the way: the Store's trusted layer (store.DB.CacheLayer), of
// the contents this process checked against their IDs; "" (every content
// through the view) without a Store's cache or when Lower has no such
// layer.
func dataLayer(cfg Config) string {
	l, ok := cfg.Lower.(interface{ CacheLayer() string })
	if cfg.MetaCache == "" || !ok {
		return ""
	}
	return l.CacheLayer()
}

// mountView mounts the daemon's read-only FUSE view at the workspace's
// lower/: of the commit's contents (content.go) when a metadata image is
// the overlay's lower, else of the commit's tree, the whole lower.
func mountView(ctx context.Context, cfg Config, contents bool) (*fusefs.Server, error) {
	// The view's own overlay never takes a change: its upper stays empty.
	// (Its work directory holds the empty file empty lower files open as.)
	view := viewDir(cfg.Dir)
	if err := os.RemoveAll(view); err != nil {
		return nil, fmt.Errorf("overlay mount: %w", err)
	}
	lower, root := cfg.Lower, cfg.Root
	if contents {
		c := newContentLower(cfg.Lower, cfg.Root, contentsPath(imageCache(cfg), cfg.Root))
		lower, root = c, c.Root()
	}
	ov, err := overlay.Open(ctx, overlay.Config{Lower: lower, Root: root,
		UpperDir: filepath.Join(view, "upper"), WorkDir: filepath.Join(view, "work"), Logger: cfg.Logger})
	if err != nil {
		return nil, fmt.Errorf("overlay mount: lower view: %w", err)
	}
	srv, err := fusefs.Mount(ctx, lowerDir(cfg.Dir), ov, fusefs.Options{Logger: cfg.Logger, Lower: true, Source: cfg.Source, Account: cfg.Account})
	if err != nil {
		return nil, fmt.Errorf("overlay mount: lower view: %w", err)
	}
	return srv, nil
}

// MountDirs mounts kernel overlayfs at target with the given lower, upper
// and work directories and Options, and volatile if asked. The bench's
// floor arm uses it with a plain-directory lower.
func MountDirs(lower, upper, work, target string, volatile bool) error {
	opts := Options
	if volatile {
		opts += ",volatile"
	}
	data := fmt.Sprintf("lowerdir=%s,upperdir=%s,workdir=%s,%s", lower, upper, work, opts)
	if err := unix.Mount("overlay", target, "overlay", 0, data); err != nil {
		return fmt.Errorf("mount overlay at %s (%s): %w", target, opts, err)
	}
	return nil
}

// HasMeta reports whether a metadata image is the overlay's lower (the
// view then serves only file data).
func (m *Mount) HasMeta() bool { return m.whyNoMeta == "" }

// IDMap is the mapping the layers were mounted with, or nil.
func (m *Mount) IDMap() *IDMap { return m.idmap }

// UpperDir returns the upper directory.
func (m *Mount) UpperDir() string { return upperDir(m.cfg.Dir) }

// Changes lists what differs between the workspace and its last commit.
func (m *Mount) Changes(ctx context.Context) (*overlay.ChangeSet, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	// A private overlay reads the upper, writing nothing (a full disk
	// must not stop a status or a commit).
	ov, err := overlay.Open(ctx, overlay.Config{Lower: m.cfg.Lower, Root: m.cfg.Root, Base: m.base,
		UpperDir: upperDir(m.cfg.Dir), WorkDir: viewDir(m.cfg.Dir), Logger: m.cfg.Logger, ReadOnly: true})
	if err != nil {
		return nil, fmt.Errorf("changes: %w", err)
	}
	defer ov.Close()
	return ov.ChangesSince(ctx, m.committed)
}

// MarkCommitted records that cs was committed as root newRoot.
func (m *Mount) MarkCommitted(newRoot store.ID, cs *overlay.ChangeSet) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.base, m.committed = newRoot, cs.Upper
}

// Upper scans the upper layer and summarizes what it holds.
func (m *Mount) Upper() (overlay.UpperSummary, error) {
	s, err := overlay.ScanUpper(upperDir(m.cfg.Dir))
	if err != nil {
		return overlay.UpperSummary{}, err
	}
	return s.UpperSummary, nil
}

// Stats returns the lower FUSE view's request telemetry.
func (m *Mount) Stats() fusefs.Stats { return m.view.Stats() }

// DataPath says how the workspace is served: "overlay: metadata erofs,
// data cached or lower passthrough", or with the view as the whole lower
// "overlay: lower passthrough (no metadata layer: why)".
func (m *Mount) DataPath() string {
	s := "overlay: lower " + m.view.DataPath() + " (no metadata layer: " + m.whyNoMeta + ")"
	switch {
	case m.whyNoMeta == "" && m.cached:
		s = "overlay: metadata erofs, data cached or lower " + m.view.DataPath()
	case m.whyNoMeta == "":
		s = "overlay: metadata erofs, data lower " + m.view.DataPath()
	}
	if m.hostStopped {
		s += " (the host stopped while it was mounted: changes since the last commit may be incomplete)"
	}
	return s
}

// Unmount takes the overlay down, then the FUSE view under it (unless
// the view is a SharedLower's).
func (m *Mount) Unmount(ctx context.Context) error {
	m.unmountOnce.Do(func() {
		err := unix.Unmount(m.cfg.Target, 0)
		if err != nil {
			// Busy: detach, so the mountpoint is usable at once.
			err = unix.Unmount(m.cfg.Target, unix.MNT_DETACH)
		}
		if !m.shared {
			err = errors.Join(err, m.view.Unmount(ctx))
		}
		m.unmountErr = err
	})
	return m.unmountErr
}

// Detach takes down what a dead daemon left of an overlay workspace whose
// directory is dir and mount is target: the overlay mounted at target
// first, then the FUSE view it stacks on (whose connection is aborted, so
// that whoever still waits on the overlay's lower fails at once). Both go
// through fusefs.CleanStale, which never sends a request to a mount.
func Detach(target, dir string) error {
	if err := fusefs.CleanStale(target); err != nil {
		return fmt.Errorf("detach overlay: %w", err)
	}
	if err := fusefs.CleanStale(lowerDir(dir)); err != nil {
		return fmt.Errorf("detach overlay lower: %w", err)
	}
	return nil
}
