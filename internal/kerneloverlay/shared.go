package kerneloverlay

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"

	"golang.org/x/sys/unix"

	"layerfs.dev/layerfs/internal/fusefs"
	"layerfs.dev/layerfs/internal/overlay"
)

// SharedLower is the read-only lower of one committed tree, mounted once
// and shared by any number of overlays over it (the roots of workspaces
// on one image): the FUSE view of the tree's contents and its metadata
// image. An overlay over it (Over) costs its own mount alone: no FUSE
// mount, no image build. Its Config names the tree (Lower, Root), the
// directory that holds the view (Dir), Source, MetaCache and Logger; the
// rest is each overlay's.
type SharedLower struct {
	cfg      Config
	view     *fusefs.Server
	metaPath string
	cache    string // the data layer of materialized contents (dataLayer)
	verity   bool   // the overlays check the contents' digests (readyVerity)

	mu sync.Mutex
	// opened are the lower layers opened for the overlays, per mapping
	// (the host id of its root; -1 for none): the metadata image's mount
	// and the clones of the cache and the view, made for the first
	// overlay of the mapping and kept for the others.
	opened map[int64]*openedLowers
}

type openedLowers struct {
	meta int
	l    lowers
}

// NewSharedLower mounts the view of cfg.Root's contents in cfg.Dir and
// builds (or finds) its metadata image. It needs cfg.MetaCache: the
// overlays read materialized contents from the Store's cache there.
func NewSharedLower(ctx context.Context, cfg Config) (*SharedLower, error) {
	if cfg.MetaCache == "" {
		return nil, errors.New("shared lower: no metadata cache")
	}
	if err := fusefs.CleanStale(lowerDir(cfg.Dir)); err != nil {
		return nil, fmt.Errorf("shared lower: %w", err)
	}
	if err := os.MkdirAll(lowerDir(cfg.Dir), 0o755); err != nil {
		return nil, fmt.Errorf("shared lower: %w", err)
	}
	path, err := MetaImage(ctx, cfg.Lower, cfg.MetaCache, cfg.Root)
	if err != nil {
		return nil, fmt.Errorf("shared lower: %w", err)
	}
	verity, err := readyVerity(ctx, cfg)
	if err != nil && cfg.Logger != nil {
		// The seals and the trusted layer still guard the data.
		cfg.Logger.Warn("shared lower without verity=on", "dir", cfg.Dir, "err", err)
	}
	srv, err := mountView(ctx, cfg, true)
	if err != nil {
		return nil, err
	}
	return &SharedLower{cfg: cfg, view: srv, metaPath: path, cache: dataLayer(cfg), verity: verity}, nil
}

// Over mounts an overlay at target whose upper and work directories are
// in dir (as a Mount's: dir/upper, dir/work), over the shared lower, with
// committed, idmap and volatile as in Config. Unmounting it leaves the
// lower mounted.
func (l *SharedLower) Over(ctx context.Context, dir, target string, committed *overlay.UpperState, idmap *IDMap, volatile bool) (*Mount, error) {
	// A stale view is possible only where one was mounted: a directory
	// served before by a Mount of its own (New).
	_, err := os.Lstat(lowerDir(dir))
	if errors.Is(err, os.ErrNotExist) {
		err = fusefs.CleanStale(target)
	} else {
		err = Detach(target, dir)
	}
	if err != nil {
		return nil, err
	}
	for _, d := range []string{upperDir(dir), workDir(dir)} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return nil, fmt.Errorf("overlay mount: %w", err)
		}
	}
	hostStopped, err := clearVolatile(dir, volatile)
	if err != nil {
		return nil, fmt.Errorf("overlay mount: %w", err)
	}
	lf, err := l.lowers(idmap)
	if err != nil {
		return nil, fmt.Errorf("mount overlay at %s: %w", target, err)
	}
	if err := createOverlay(target, lf, dir, idmap, volatile, l.verity); err != nil {
		return nil, err
	}
	cfg := l.cfg
	cfg.Dir, cfg.Target, cfg.Committed, cfg.IDMap, cfg.Volatile = dir, target, committed, idmap, volatile
	return &Mount{cfg: cfg, view: l.view, shared: true, base: cfg.Root, committed: committed, idmap: idmap,
		cached: true, hostStopped: hostStopped}, nil
}

// MountDir is where an overlay whose directory is dir is mounted when it
// is to be moved with it (Move): inside it, beside upper/ and work/.
func MountDir(dir string) string { return filepath.Join(dir, "mnt") }

// Move renames the directory of an overlay made by Over at MountDir of
// it to dir (which must not exist, on the same file system): the overlay
// moves with it, mounted at MountDir(dir). The kernel holds the upper and
// work directories themselves, not their paths.
func (m *Mount) Move(dir string) error {
	if m.cfg.Target != MountDir(m.cfg.Dir) {
		return fmt.Errorf("move overlay %s: not mounted in its directory", m.cfg.Target)
	}
	if err := os.Rename(m.cfg.Dir, dir); err != nil {
		return fmt.Errorf("move overlay: %w", err)
	}
	m.cfg.Dir, m.cfg.Target = dir, MountDir(dir)
	return nil
}

// Dir is the overlay's directory (its upper and work directories').
func (m *Mount) Dir() string { return m.cfg.Dir }

// lowers returns the lower layers for overlays of the mapping m,
// opening them for its first.
func (l *SharedLower) lowers(m *IDMap) (lowers, error) {
	key := int64(-1)
	if m != nil {
		key = int64(m.Root)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if o := l.opened[key]; o != nil {
		return o.l, nil
	}
	meta, err := mountMeta(l.metaPath)
	if err != nil {
		return lowers{}, err
	}
	lf, err := openLowers(lowerDir(l.cfg.Dir), meta, l.cache, m)
	if err != nil {
		unix.Close(meta)
		return lowers{}, err
	}
	if l.opened == nil {
		l.opened = map[int64]*openedLowers{}
	}
	l.opened[key] = &openedLowers{meta: meta, l: lf}
	return lf, nil
}

// Close unmounts the lower's view and closes its layers; the overlays
// over it must be gone.
func (l *SharedLower) Close(ctx context.Context) error {
	l.mu.Lock()
	for k, o := range l.opened {
		o.l.close()
		unix.Close(o.meta)
		delete(l.opened, k)
	}
	l.mu.Unlock()
	return l.view.Unmount(ctx)
}
