package kerneloverlay

import (
	"context"
	"errors"
	"fmt"
	"os"

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
	srv, err := mountView(ctx, cfg, true)
	if err != nil {
		return nil, err
	}
	return &SharedLower{cfg: cfg, view: srv, metaPath: path}, nil
}

// Over mounts an overlay at target whose upper and work directories are
// in dir (as a Mount's: dir/upper, dir/work), over the shared lower, with
// committed, idmap and volatile as in Config. Unmounting it leaves the
// lower mounted.
func (l *SharedLower) Over(ctx context.Context, dir, target string, committed *overlay.UpperState, idmap *IDMap, volatile bool) (*Mount, error) {
	if err := Detach(target, dir); err != nil {
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
	meta, err := mountMeta(l.metaPath)
	if err != nil {
		return nil, err
	}
	defer unix.Close(meta)
	if err := mountOverlay(lowerDir(l.cfg.Dir), dir, target, meta, l.cfg.MetaCache, idmap, volatile); err != nil {
		return nil, err
	}
	cfg := l.cfg
	cfg.Dir, cfg.Target, cfg.Committed, cfg.IDMap, cfg.Volatile = dir, target, committed, idmap, volatile
	return &Mount{cfg: cfg, view: l.view, shared: true, base: cfg.Root, committed: committed, idmap: idmap,
		cached: true, hostStopped: hostStopped}, nil
}

// Close unmounts the lower's view; the overlays over it must be gone.
func (l *SharedLower) Close(ctx context.Context) error { return l.view.Unmount(ctx) }
