package engine

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"layerfs.dev/layerfs/internal/account"
	"layerfs.dev/layerfs/internal/commit"
	"layerfs.dev/layerfs/internal/dirfd"
	"layerfs.dev/layerfs/internal/diskusage"
	"layerfs.dev/layerfs/internal/fusefs"
	"layerfs.dev/layerfs/internal/hostview"
	"layerfs.dev/layerfs/internal/kerneloverlay"
	"layerfs.dev/layerfs/internal/mountinfo"
	"layerfs.dev/layerfs/internal/netpolicy"
	"layerfs.dev/layerfs/internal/overlay"
	"layerfs.dev/layerfs/internal/platforms"
	"layerfs.dev/layerfs/internal/store"
	"layerfs.dev/layerfs/internal/unixmode"
	"layerfs.dev/layerfs/wire"
	"layerfs.dev/layerfs/wire/errclass"
)

// wsOptions are the workspace settings kept in the Store record's Options.
type wsOptions struct {
	Platform string `json:"platform"`
	Network  string `json:"network"`
	// Egress are the rules of network egress.
	Egress []wire.NetworkRule `json:"egress,omitempty"`
	Native bool               `json:"native,omitempty"`
	// QuotaBytes and QuotaInodes size the workspace's own file system
	// (quota.go); 0 bytes: none.
	QuotaBytes  int64 `json:"quota_bytes,omitempty"`
	QuotaInodes int64 `json:"quota_inodes,omitempty"`
	// Root is the tree the upper layer lies over: the base commit's root,
	// kept so a remount never needs the commit.
	Root store.ID `json:"root"`
	// HeadRoot is the root tree of Head, what the next commit is relative to.
	HeadRoot store.ID `json:"head_root"`
	// DataPath is wire.DataPathFUSE or wire.DataPathOverlay ("" in records
	// older than the overlay path: fuse); Fallback says why a workspace
	// that would have been overlay is fuse.
	DataPath string `json:"data_path,omitempty"`
	Fallback string `json:"fallback,omitempty"`
	// Durability is wire.DurabilityCommit or wire.DurabilityFsync ("" in
	// records older than the choice: fsync, as they were mounted).
	Durability string `json:"durability,omitempty"`
	// Pending are changes of the tree the workspace shows that were
	// recorded before being made (see catchUp): a daemon that died while
	// making them makes them again when it remounts the workspace.
	Pending []catchUpStep `json:"pending,omitempty"`
	// Conflicts are those an update left in the workspace, not resolved
	// yet (see UpdateWorkspace).
	Conflicts []wire.Conflict `json:"conflicts,omitempty"`
	// Owner is the host user of the mount path's view (nil in records
	// older than it: root).
	Owner *wire.Owner `json:"owner,omitempty"`
	// Image is the image the workspace's root lies over (imageroot.go);
	// nil: the platform's runtime.
	Image *rootImage `json:"image,omitempty"`
}

// volatile reports whether w's writes reach the disk only with its commits.
func (o wsOptions) volatile() bool { return o.Durability == wire.DurabilityCommit }

// dataMount is a served workspace's mount on either data path: an
// *fusefs.Server (fuse) or a *kerneloverlay.Mount (overlay).
type dataMount interface {
	Changes(ctx context.Context) (*overlay.ChangeSet, error)
	MarkCommitted(root store.ID, cs *overlay.ChangeSet)
	Stats() fusefs.Stats // the FUSE requests (of the lower, on overlay)
	DataPath() string
	UpperDir() string
	Unmount(ctx context.Context) error
}

// workspace is one served workspace. mu serialises what changes its state
// (commit, end, remount) against execs, which hold it shared.
type workspace struct {
	mu   sync.RWMutex
	rec  store.Workspace
	opts wsOptions
	mnt  dataMount // nil for a native workspace
	// data is where mnt is mounted, what sandboxes and the daemon's own
	// file calls use: the mount path itself, or, where the mount path is
	// a view for the host's user (view), a directory of the workspace's.
	data string
	view *hostview.Server
	// root is the workspace's own root, over its image (nil: none);
	// rootShared says it lies on the image tree's shared lower.
	root       *kerneloverlay.Mount
	rootShared bool
	sb         platforms.Sandbox
	// net is its network now (network.go); opts has it as recorded.
	net netState
	// upper is what the upper layer held after the last exec or commit;
	// the next exec's receipt is the difference. Guarded by upperMu (execs
	// run concurrently under mu held shared).
	upperMu sync.Mutex
	upper   overlay.UpperSummary
	tracker *overlay.UpperTracker // nil: scan the upper for each receipt
	execs   atomic.Int32          // execs running or waiting to run in it
	// use tells whose work the requests of its mount are (attribution.go).
	use mountUse
	// svcs are its services (services.go), made at first use.
	svcOnce sync.Once
	svcs    *services
}

func (w *workspace) info() wire.Workspace {
	out := wire.Workspace{
		ID: w.rec.ID, Project: w.rec.Project, Branch: w.rec.Branch,
		Base: idString(w.rec.Base), Head: idString(w.rec.Head),
		MountPath: w.rec.MountPath, Platform: w.opts.Platform, Network: w.opts.Network, Egress: w.opts.Egress,
		Native: w.opts.Native, State: w.rec.State, Created: w.rec.Created,
		Node: w.rec.Node, Durability: w.opts.Durability, Image: w.opts.Image.ref(),
	}
	if mode, rules := w.net.now(); mode != "" {
		out.Network, out.Egress = mode, rules
	}
	if w.view != nil {
		o := w.opts.owner()
		out.Owner, out.HostView = &o, w.view.DataPath()
	}
	if w.mnt != nil {
		out.DataPath = w.mnt.DataPath()
		if _, ok := w.mnt.(*fusefs.Server); ok {
			out.DataPath = wire.DataPathFUSE + ": " + out.DataPath
		}
		if w.opts.Fallback != "" {
			out.DataPath += " (overlay unavailable: " + w.opts.Fallback + ")"
		}
	}
	return out
}

func newID() string {
	var b [6]byte
	rand.Read(b[:])
	return "ws-" + hex.EncodeToString(b[:])
}

// workspaceDirs are a workspace's directories under the Store.
func (e *Engine) workspaceDir(id string) string { return filepath.Join(e.db.WorkspacesDir(), id) }

// dataDir is where a workspace whose mount path is a host view has its
// data mount (see workspace.data).
func (e *Engine) dataDir(id string) string { return filepath.Join(e.workspaceDir(id), "data") }

// owner is the host user of the workspace's mount path.
func (o wsOptions) owner() wire.Owner {
	if o.Owner == nil {
		return wire.Owner{}
	}
	return *o.Owner
}

// CreateWorkspace mounts a new workspace on a branch head (or the ref At)
// and attaches it to its platform.
func (e *Engine) CreateWorkspace(ctx context.Context, spec wire.WorkspaceSpec) (wire.Workspace, error) {
	ctx, acct := account.Open(ctx) // the receipt: what this request did
	if err := e.checkOpen(); err != nil {
		return wire.Workspace{}, err
	}
	opts, err := e.workspaceOptions(spec)
	if err != nil {
		return wire.Workspace{}, err
	}
	if opts.Image, err = e.resolveImage(ctx, spec.Project, spec.Image); err != nil {
		return wire.Workspace{}, err
	}
	id := newID()
	dir := e.workspaceDir(id)
	rec := store.Workspace{ID: id, Project: spec.Project, Branch: spec.Branch, Created: e.now().UTC(), State: wire.StateMounted}
	if opts.Image != nil {
		rec.Image = opts.Image.Commit
	}
	if !opts.Native {
		b, err := e.db.Branch(ctx, spec.Project, spec.Branch)
		if err != nil {
			return wire.Workspace{}, classify(err)
		}
		rec.Base = b.Head
		if spec.At != "" {
			if rec.Base, err = e.db.ResolveRef(ctx, spec.Project, spec.At); err != nil {
				return wire.Workspace{}, classify(err)
			}
		}
		c, err := e.db.Commit(ctx, rec.Base)
		if err != nil {
			return wire.Workspace{}, err
		}
		rec.Head, opts.Root, opts.HeadRoot = rec.Base, c.Root, c.Root
		rec.UpperDir = filepath.Join(dir, "upper")
		if err := e.overlayKeepsLinks(ctx, &opts); err != nil {
			return wire.Workspace{}, err
		}
	} else if spec.Project != "" || spec.Branch != "" || spec.At != "" {
		return wire.Workspace{}, fmt.Errorf("%w: a native workspace has no project, branch or ref", errclass.Invalid)
	}
	rec.MountPath = filepath.Join(dir, "mnt")
	if opts.Native {
		rec.MountPath = filepath.Join(dir, "native")
	}
	if spec.MountPath != "" {
		if rec.MountPath, err = mountTarget(spec.MountPath); err != nil {
			return wire.Workspace{}, err
		}
	}
	if rec.Options, err = json.Marshal(opts); err != nil {
		return wire.Workspace{}, err
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return wire.Workspace{}, err
	}
	// Native workspaces have no history and nothing to recover: they live
	// in memory only.
	if !opts.Native {
		if rec, err = e.db.CreateWorkspace(ctx, rec); err != nil {
			os.RemoveAll(dir)
			return wire.Workspace{}, classify(err)
		}
	}
	w := &workspace{rec: rec, opts: opts}
	t0 := time.Now()
	if err := e.serve(ctx, w, true); err != nil {
		if !opts.Native {
			e.db.DeleteWorkspace(context.WithoutCancel(ctx), id)
		}
		err = errors.Join(err, e.dropQuota(id))
		os.RemoveAll(dir)
		return wire.Workspace{}, errors.Join(err, e.removeQuotaImage(id))
	}
	e.mu.Lock()
	e.live[id] = w
	e.mu.Unlock()
	e.metrics.workspacesCreated.Add(1)
	e.log.Info("workspace created", "id", id, "project", rec.Project, "branch", rec.Branch, "mount", rec.MountPath, "platform", opts.Platform)
	info := w.info()
	r := storeReceipt(acct, commit.Stats{})
	r.WallNs, r.Platform = time.Since(t0).Nanoseconds(), opts.Platform
	info.Receipt = &r
	return info, nil
}

func (e *Engine) workspaceOptions(spec wire.WorkspaceSpec) (wsOptions, error) {
	o := wsOptions{Platform: spec.Platform, Network: spec.Network, Egress: spec.Egress, Native: spec.Native,
		QuotaBytes: spec.QuotaBytes, QuotaInodes: spec.QuotaInodes}
	if o.QuotaBytes < 0 || o.QuotaInodes < 0 || (o.QuotaInodes > 0 && o.QuotaBytes == 0) {
		return o, fmt.Errorf("%w: quota: bytes and inodes must not be negative, and inodes need bytes", errclass.Invalid)
	}
	if o.Platform == "" {
		o.Platform = e.defaultPlat
	}
	if _, ok := e.plats[o.Platform]; !ok {
		return o, fmt.Errorf("%w: unknown platform %q (this daemon has %v)", errclass.Invalid, o.Platform, e.Platforms())
	}
	switch {
	case o.Native:
		if spec.DataPath != "" || spec.Durability != "" || spec.Owner != nil {
			return o, fmt.Errorf("%w: a native workspace has no data path, durability or owner of its own", errclass.Invalid)
		}
	case spec.DataPath == "":
		o.DataPath = e.dataPath
		if o.DataPath == wire.DataPathOverlay {
			if err := e.overlayCheck(); err != nil {
				o.DataPath, o.Fallback = wire.DataPathFUSE, err.Error()
			}
		}
	case spec.DataPath == wire.DataPathFUSE || spec.DataPath == wire.DataPathOverlay:
		o.DataPath = spec.DataPath
		if o.DataPath == wire.DataPathOverlay {
			if err := e.overlayCheck(); err != nil {
				return o, fmt.Errorf("%w: data path overlay: %w", errclass.Unavailable, err)
			}
		}
	default:
		return o, fmt.Errorf("%w: data path %q: want %q or %q", errclass.Invalid, spec.DataPath, wire.DataPathFUSE, wire.DataPathOverlay)
	}
	if !o.Native {
		var err error
		if o.Durability, err = setting("durability", spec.Durability, e.durability, durabilities...); err != nil {
			return o, fmt.Errorf("%w: %w", errclass.Invalid, err)
		}
		if o.Owner, err = e.owner(o.Platform, spec.Owner); err != nil {
			return o, err
		}
	}
	if o.Network == "" {
		o.Network = wire.NetworkNone
	}
	if err := e.checkNetwork(o.Platform, o.Network, o.Egress); err != nil {
		return o, err
	}
	if pol, _ := netpolicy.Parse(o.Egress); o.Network == wire.NetworkEgress {
		o.Egress = pol.Rules()
	}
	if !o.Native {
		if err := store.ValidName(spec.Project); err != nil {
			return o, fmt.Errorf("%w: project: %w", errclass.Invalid, err)
		}
		if err := store.ValidName(spec.Branch); err != nil {
			return o, fmt.Errorf("%w: branch: %w", errclass.Invalid, err)
		}
	}
	return o, nil
}

// owner is the host user of a new workspace's mount path: the one asked
// for, else the daemon's user; never one of the ids of its platform's
// sandboxes.
func (e *Engine) owner(platform string, asked *wire.Owner) (*wire.Owner, error) {
	o := wire.Owner{UID: uint32(os.Geteuid()), GID: uint32(os.Getegid())}
	if asked != nil {
		o = *asked
	}
	if m, ok := e.plats[platform].(platforms.IDMapper); ok {
		if _, root, size, err := m.IDMap(); err == nil {
			for _, id := range []struct {
				kind string
				v    uint32
			}{{"uid", o.UID}, {"gid", o.GID}} {
				if id.v >= root && id.v-root < size {
					return nil, fmt.Errorf("%w: owner: %s %d is one of the ids of %s's sandboxes (%d to %d)", errclass.Invalid, id.kind, id.v, platform, root, root+size-1)
				}
			}
		}
	}
	return &o, nil
}

// mountTarget checks a requested mount path: absolute, and an empty
// directory or absent (then created).
func mountTarget(p string) (string, error) {
	if !filepath.IsAbs(p) {
		return "", fmt.Errorf("%w: mount path %q must be absolute", errclass.Invalid, p)
	}
	p = filepath.Clean(p)
	ents, err := os.ReadDir(p)
	if errors.Is(err, fs.ErrNotExist) {
		return p, nil
	}
	if err != nil {
		return "", fmt.Errorf("%w: mount path %q: %w", errclass.Invalid, p, err)
	}
	if len(ents) > 0 {
		return "", fmt.Errorf("%w: mount path %q is not empty", errclass.Invalid, p)
	}
	return p, nil
}

// serve mounts w (or makes its native directory) and attaches it to its
// platform; fresh is set for a new workspace, whose upper is empty.
func (e *Engine) serve(ctx context.Context, w *workspace, fresh bool) error {
	if err := e.ensureQuota(ctx, w); err != nil {
		return err
	}
	if err := os.MkdirAll(w.rec.MountPath, 0o755); err != nil {
		return err
	}
	w.data = w.rec.MountPath
	if !w.opts.Native {
		idm := e.layerIDMap(w)
		if idm != nil {
			w.data = e.dataDir(w.rec.ID)
			if err := os.MkdirAll(w.data, 0o700); err != nil {
				return err
			}
		}
		m, err := e.mount(ctx, w, fresh, idm)
		if err != nil {
			return err
		}
		w.mnt = m
		if idm != nil {
			if err := e.serveView(ctx, w, idm); err != nil {
				e.unserve(context.WithoutCancel(ctx), w)
				return err
			}
		}
		e.trackUpper(ctx, w)
		e.prefetch(w.opts.Root)
	}
	if w.opts.Image != nil {
		if err := e.mountRoot(ctx, w, fresh); err != nil {
			e.unserve(context.WithoutCancel(ctx), w)
			return err
		}
	}
	host := e.plats[w.opts.Platform].(platforms.SandboxHost)
	w.net.mu.Lock()
	if w.net.mode == "" {
		w.net.mode, w.net.rules, w.net.saved = w.opts.Network, w.opts.Egress, true
	}
	mode, rules := w.net.mode, w.net.rules
	w.net.mu.Unlock()
	pw := platforms.Workspace{ID: w.rec.ID, HostPath: w.data,
		Network: mode == wire.NetworkHost, EgressOn: mode == wire.NetworkEgress, Egress: rules,
		NetEvents: e.netEvents(w), IDMapped: w.idmap() != nil}
	e.rootAttach(w, &pw)
	sb, err := host.Attach(ctx, pw)
	if err != nil {
		e.unserve(context.WithoutCancel(ctx), w)
		return fmt.Errorf("attach workspace %s to %s: %w", w.rec.ID, w.opts.Platform, err)
	}
	w.sb = sb
	return nil
}

// overlayKeepsLinks moves a workspace to the fuse data path, saying why,
// when its base has hard links: kernel overlayfs copies up one name of a
// hard-linked lower file alone, so a write through one name would not be
// seen through the others (keeping them together needs overlayfs's index,
// and that needs lower file handles that outlive a mount, which the FUSE
// view's do not).
func (e *Engine) overlayKeepsLinks(ctx context.Context, o *wsOptions) error {
	if o.DataPath != wire.DataPathOverlay {
		return nil
	}
	n, err := e.links.Count(ctx, e.db, o.Root)
	if err != nil {
		return fmt.Errorf("count the base's hard links: %w", err)
	}
	if n > 0 {
		o.DataPath = wire.DataPathFUSE
		o.Fallback = fmt.Sprintf("the base has %d hard-linked files, which overlayfs would split on a write", n)
	}
	return nil
}

// overlayCheck says, once per engine, why this host cannot serve the
// overlay data path, or nil.
func (e *Engine) overlayCheck() error {
	e.overlayOnce.Do(func() { e.overlayErr = kerneloverlay.Check(e.db.WorkspacesDir()) })
	return e.overlayErr
}

// serveView mounts the view of w's data mount for its owner at its mount
// path (package hostview): of the overlay, whose upper files back the
// view's passthrough opens, or of the FUSE mount id-mapped as sandboxes
// see it. m is the sandboxes' mapping.
func (e *Engine) serveView(ctx context.Context, w *workspace, m *kerneloverlay.IDMap) error {
	var root int
	var err error
	o := w.opts.owner()
	opts := hostview.Options{Owner: hostview.Owner{UID: o.UID, GID: o.GID},
		Range: hostview.Range{Base: m.Root, Size: m.Size}, Source: e.source, Logger: e.log}
	if ov, ok := w.mnt.(*kerneloverlay.Mount); ok {
		opts.Upper = ov.UpperDir()
		root, err = unix.Open(w.data, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	} else {
		root, err = kerneloverlay.IDMappedClone(w.data, m)
	}
	if err != nil {
		return fmt.Errorf("view of workspace %s: %w", w.rec.ID, err)
	}
	if w.view, err = hostview.Mount(ctx, w.rec.MountPath, root, opts); err != nil {
		return fmt.Errorf("mount workspace %s at %s: %w", w.rec.ID, w.rec.MountPath, err)
	}
	return nil
}

// mount mounts w on its data path at w.data, the overlay over layers
// id-mapped with idm when set. A new workspace that was to be overlay by
// default falls back to fuse when the overlay mount fails.
func (e *Engine) mount(ctx context.Context, w *workspace, fresh bool, idm *kerneloverlay.IDMap) (dataMount, error) {
	if w.opts.DataPath == "" {
		w.opts.DataPath = wire.DataPathFUSE // a record from before the overlay path
	}
	if w.opts.DataPath == wire.DataPathOverlay {
		var committed *overlay.UpperState
		if fresh {
			committed = overlay.EmptyUpper()
		}
		cfg := kerneloverlay.Config{
			Lower: accountedLower{e.db, &w.use}, Account: w.use.account, Root: w.opts.Root, Base: w.opts.HeadRoot,
			Dir: e.workspaceDir(w.rec.ID), Target: w.data, Committed: committed, Logger: e.log,
			Source: e.source, IDMap: idm, MetaCache: e.db.CacheDir(), Volatile: w.opts.volatile(),
		}
		m, err := kerneloverlay.New(ctx, cfg)
		if err != nil && cfg.IDMap != nil {
			// Never over plain layers instead: its sandboxes could not
			// have their user namespace (the fuse path below can).
			err = fmt.Errorf("overlay over layers id-mapped for %s's user namespace: %w", w.opts.Platform, err)
		}
		if err == nil || !fresh || e.dataPath != wire.DataPathOverlay {
			if err != nil {
				return nil, fmt.Errorf("mount workspace %s at %s: %w", w.rec.ID, w.data, err)
			}
			return m, nil
		}
		e.log.Warn("overlay data path refused; serving the workspace with fuse", "id", w.rec.ID, "err", err)
		w.opts.DataPath, w.opts.Fallback = wire.DataPathFUSE, err.Error()
		if w.rec.Options, err = json.Marshal(w.opts); err != nil {
			return nil, err
		}
		if w.rec, err = e.db.UpdateWorkspace(ctx, w.rec); err != nil {
			return nil, fmt.Errorf("record data path of %s: %w", w.rec.ID, err)
		}
	}
	ov, err := overlay.Open(ctx, overlay.Config{
		Lower:    accountedLower{e.db, &w.use},
		Root:     w.opts.Root,
		Base:     w.opts.HeadRoot,
		UpperDir: w.rec.UpperDir,
		Logger:   e.log,
	})
	if err != nil {
		return nil, fmt.Errorf("open workspace %s: %w", w.rec.ID, err)
	}
	m, err := fusefs.Mount(ctx, w.data, ov, fusefs.Options{Logger: e.log, Source: e.source, NoSync: w.opts.volatile(), Account: w.use.account})
	if err != nil {
		ov.Close()
		return nil, fmt.Errorf("mount workspace %s at %s: %w", w.rec.ID, w.data, err)
	}
	return m, nil
}

// layerIDMap is the mapping of w's platform's sandboxes, when they run in
// a user namespace of their own (platforms.IDMapper), else nil. A
// workspace's overlay layers take it, so that the one overlay mount
// serves the sandboxes and the daemon alike (see kerneloverlay.IDMap), and
// its mount path is then a view of its data mount for its owner.
func (e *Engine) layerIDMap(w *workspace) *kerneloverlay.IDMap { return e.platIDMap(w.opts.Platform) }

// platIDMap is the mapping of the layers of workspaces on platform.
func (e *Engine) platIDMap(platform string) *kerneloverlay.IDMap {
	m, ok := e.plats[platform].(platforms.IDMapper)
	if !ok {
		return nil
	}
	ns, root, size, err := m.IDMap()
	if err != nil {
		return nil
	}
	return &kerneloverlay.IDMap{UserNS: ns, Root: root, Size: size}
}

// buildMetaAhead builds, in the background, the metadata image of root, a
// commit w just made, when w is served with one: the next workspace of the
// commit then finds it cached (kerneloverlay.MetaImage). The commit itself
// stays O(changes). An image is O(tree), so one builder runs at a time and
// builds only the latest root asked for: of a burst of commits, the last.
func (e *Engine) buildMetaAhead(w *workspace, root store.ID) {
	if m, ok := w.mnt.(*kerneloverlay.Mount); ok && m.HasMeta() && !root.IsZero() {
		e.ahead.Add(root)
	}
}

// buildMeta is a job of buildMetaAhead.
func (e *Engine) buildMeta(ctx context.Context, root store.ID) {
	if err := e.readyOpen(ctx, root); err != nil {
		e.log.Warn("metadata image of a new commit", "root", root.Short(), "err", err)
	}
}

// idmap is the mapping w's mount shows its files with, or nil.
func (w *workspace) idmap() *kerneloverlay.IDMap {
	if m, ok := w.mnt.(*kerneloverlay.Mount); ok {
		return m.IDMap()
	}
	return nil
}

// cleanStale takes down whatever a dead daemon left mounted for rec: the
// mounts at its mount path (the host view, or the data mount), then those
// of its data directory (the FUSE mount, or the overlay), then, on the
// overlay path, the FUSE lower under the overlay.
func (e *Engine) cleanStale(rec store.Workspace) error {
	if err := fusefs.CleanStale(rec.MountPath); err != nil {
		return err
	}
	return errors.Join(kerneloverlay.Detach(e.dataDir(rec.ID), e.workspaceDir(rec.ID)),
		kerneloverlay.Detach(e.rootTarget(rec.ID), e.rootDir(rec.ID)))
}

// unserve detaches and unmounts w, keeping its upper layer and record:
// its sandboxes, then the host view, then the mount it is a view of.
func (e *Engine) unserve(ctx context.Context, w *workspace) error {
	var errs []error
	if w.sb != nil {
		// Its services end before their sandbox does.
		e.stopServices(ctx, w)
		errs = append(errs, w.sb.Close(ctx))
		w.sb = nil
	}
	if w.view != nil {
		errs = append(errs, w.view.Unmount(ctx))
		w.view = nil
	}
	if w.mnt != nil {
		errs = append(errs, w.mnt.Unmount(ctx))
		w.mnt = nil
	}
	errs = append(errs, e.unmountRoot(ctx, w))
	if w.tracker != nil {
		w.tracker.Close()
		w.tracker = nil
	}
	return errors.Join(errs...)
}

// get returns a live workspace.
func (e *Engine) get(ctx context.Context, id string) (*workspace, error) {
	e.mu.Lock()
	w := e.live[id]
	e.mu.Unlock()
	if w != nil {
		return w, nil
	}
	if _, err := e.db.Workspace(ctx, id); err == nil {
		return nil, fmt.Errorf("%w: workspace %s is not mounted (remount it)", errclass.Invalid, id)
	}
	return nil, e.notHere(ctx, id, fmt.Errorf("workspace %q: %w", id, errclass.NotFound))
}

// notHere is the answer for a workspace this host does not record:
// misdirected, naming the host that serves it, when another host of a
// shared Store records it; else notFound.
func (e *Engine) notHere(ctx context.Context, id string, notFound error) error {
	n, err := e.db.WorkspaceNode(ctx, id)
	switch {
	case errors.Is(err, store.ErrNotFound) || (err == nil && n.Name == e.db.Node()):
		return notFound
	case err != nil:
		return fmt.Errorf("find the host of workspace %s: %w", id, err)
	}
	where := &wire.Node{Name: n.Name, Address: n.Address, Seen: n.Seen, Live: n.Live}
	msg := fmt.Sprintf("workspace %s is served by host %s", id, n.Name)
	switch {
	case n.Address == "":
		msg += ", which advertises no address (its layerfsd runs without --advertise)"
	case !n.Live && n.Seen.IsZero():
		msg += " at " + n.Address + ", whose daemon has not run"
	case !n.Live:
		msg += fmt.Sprintf(" at %s, whose daemon was last heard from at %s: it is down", n.Address, n.Seen.UTC().Format(time.RFC3339))
	default:
		msg += " at " + n.Address + ", not by this daemon (host " + e.db.Node() + "): send the request there"
	}
	return &wire.Error{Code: wire.CodeMisdirected, Message: msg, Node: where}
}

// Workspaces lists every recorded workspace, served or not.
func (e *Engine) Workspaces(ctx context.Context) ([]wire.Workspace, error) {
	recs, err := e.db.Workspaces(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]wire.Workspace, 0, len(recs))
	for _, w := range e.liveWorkspaces() {
		if w.opts.Native {
			out = append(out, w.info())
		}
	}
	for _, r := range recs {
		e.mu.Lock()
		w := e.live[r.ID]
		e.mu.Unlock()
		if w != nil {
			w.mu.RLock()
			out = append(out, w.info())
			w.mu.RUnlock()
			continue
		}
		w = &workspace{rec: r}
		json.Unmarshal(r.Options, &w.opts)
		w.rec.State = wire.StateUnmounted
		out = append(out, w.info())
	}
	return out, nil
}

// FleetWorkspaces lists every host's workspaces on a shared Store, each
// with its host and the host's advertised address: this host's as
// Workspaces does, the others' as their hosts recorded them. On an
// embedded Store it is Workspaces.
func (e *Engine) FleetWorkspaces(ctx context.Context) ([]wire.Workspace, error) {
	out, err := e.Workspaces(ctx)
	if err != nil || !e.db.Shared() {
		return out, err
	}
	nodes, err := e.db.Nodes(ctx)
	if err != nil {
		return nil, err
	}
	recs, err := e.db.FleetWorkspaces(ctx)
	if err != nil {
		return nil, err
	}
	for _, r := range recs {
		if r.Node == e.db.Node() {
			continue
		}
		w := &workspace{rec: r}
		json.Unmarshal(r.Options, &w.opts)
		out = append(out, w.info())
	}
	addrs := map[string]string{}
	for _, n := range nodes {
		addrs[n.Name] = n.Address
	}
	for i := range out {
		out[i].NodeAddress = addrs[out[i].Node]
	}
	slices.SortStableFunc(out, func(a, b wire.Workspace) int {
		return cmp.Or(a.Created.Compare(b.Created), cmp.Compare(a.ID, b.ID))
	})
	return out, nil
}

// WorkspaceStatus tells what changed in a workspace since its last commit,
// what its upper layer holds and what its mount served.
func (e *Engine) WorkspaceStatus(ctx context.Context, id string) (wire.WorkspaceStatus, error) {
	w, err := e.get(ctx, id)
	if err != nil {
		return wire.WorkspaceStatus{}, err
	}
	w.mu.RLock()
	defer w.mu.RUnlock()
	st := wire.WorkspaceStatus{Workspace: w.info(), Changes: []wire.Change{}}
	if w.opts.Native {
		st.UpperBytes, _ = diskusage.Tree(w.rec.MountPath)
		return st, nil
	}
	st.Conflicts = e.unresolved(w)
	cs, err := w.mnt.Changes(ctx)
	if err != nil {
		return st, err
	}
	for _, c := range cs.Changes {
		st.Changes = append(st.Changes, e.describe(ctx, cs.Base, c))
	}
	var u overlay.UpperSummary
	u, st.UpperBytes = e.upperNow(ctx, w, cs.Upper)
	st.Upper = wire.UpperStats(u)
	st.FUSE = fuseStats(w.mnt.Stats())
	return st, nil
}

// describe turns an overlay change into a diff line against base.
func (e *Engine) describe(ctx context.Context, base store.ID, c commit.Change) wire.Change {
	old, _ := e.lookup(ctx, base, c.Path)
	out := wire.Change{Path: c.Path}
	if old != nil {
		out.OldType = old.Type.String()
	}
	switch {
	case c.Delete:
		out.Kind = wire.Removed
	case old == nil:
		out.Kind = wire.Added
	default:
		out.Kind = wire.Modified
	}
	if !c.Delete {
		var st unix.Stat_t
		if c.Entry != nil {
			out.NewType = c.Entry.Type.String()
		} else if dirfd.LstatBeneath(c.Root, c.Source, &st) == nil {
			out.NewType = entryTypeOf(unixmode.Type(st.Mode))
		}
		if old != nil && out.NewType != "" && out.NewType != out.OldType {
			out.Kind = wire.TypeChanged
		}
	}
	return out
}

// lookup finds the entry at rel in the tree root, or nil.
func (e *Engine) lookup(ctx context.Context, root store.ID, rel string) (*store.Entry, error) {
	if root.IsZero() {
		return nil, nil
	}
	id := root
	var ent *store.Entry
	for _, name := range splitPath(rel) {
		if ent != nil && ent.Type != store.TypeDir {
			return nil, nil
		}
		t, err := e.db.Tree(ctx, id)
		if err != nil {
			return nil, err
		}
		var ok bool
		if ent, ok = t.Find(name); !ok {
			return nil, nil
		}
		id = ent.Object
	}
	return ent, nil
}

func entryTypeOf(m fs.FileMode) string {
	switch {
	case m.IsDir():
		return store.TypeDir.String()
	case m&fs.ModeSymlink != 0:
		return store.TypeSymlink.String()
	case m.IsRegular():
		return store.TypeFile.String()
	case m&fs.ModeNamedPipe != 0:
		return store.TypeFIFO.String()
	case m&fs.ModeSocket != 0:
		return store.TypeSocket.String()
	case m&fs.ModeCharDevice != 0:
		return store.TypeChar.String()
	}
	return store.TypeBlock.String()
}

// CommitWorkspace captures what changed since the workspace's last commit
// and publishes it on its branch by compare-and-swap. The mount stays live.
// On head-moved the commit is stored (its id is returned), the workspace
// keeps its changes, and nothing is lost.
func (e *Engine) CommitWorkspace(ctx context.Context, id string, req wire.CommitRequest) (wire.CommitResult, error) {
	ctx, acct := account.Open(ctx) // the receipt: what this request did
	if err := e.checkOpen(); err != nil {
		return wire.CommitResult{}, err
	}
	w, err := e.get(ctx, id)
	if err != nil {
		return wire.CommitResult{}, err
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	return e.commitLocked(ctx, acct, w, id, req)
}

// commitLocked is CommitWorkspace's work, w.mu held (also by a checkpoint,
// which commits while the sandbox is frozen).
func (e *Engine) commitLocked(ctx context.Context, acct *account.Account, w *workspace, id string, req wire.CommitRequest) (wire.CommitResult, error) {
	if w.opts.Native {
		return wire.CommitResult{}, fmt.Errorf("%w: workspace %s is native: it has no history", errclass.Invalid, id)
	}
	if open := e.unresolved(w); len(open) > 0 {
		return wire.CommitResult{}, conflictError(fmt.Sprintf("commit of workspace %s refused: conflicts of its update are not resolved (remove the markers, or resolve them)", id), open)
	}
	t0 := time.Now()
	fuseBefore := w.mnt.Stats()
	cs, err := w.mnt.Changes(ctx)
	if err != nil {
		return wire.CommitResult{}, fmt.Errorf("list changes of %s: %w", id, err)
	}
	tCapture := time.Now()
	meta := e.meta(req.Message, req.Author)
	p, st, err := commit.FromChanges(ctx, e.db, w.rec.Project, w.rec.Branch, w.rec.Head, cs.Changes, meta, nil)
	if err != nil {
		return wire.CommitResult{}, classify(err)
	}
	captureNs := time.Since(tCapture).Nanoseconds()
	res := wire.CommitResult{Commit: p.Commit.String(), Result: publishResult(p.Result), Head: p.Head.String()}
	switch {
	case p.Result != store.PublishHeadMoved:
		w.mnt.MarkCommitted(p.Root, cs)
		e.buildMetaAhead(w, p.Root)
		w.rec.Head = p.Commit
		w.opts.HeadRoot = p.Root
		w.opts.Conflicts = nil
		if err := e.save(ctx, w); err != nil {
			return res, err
		}
	case req.Merge:
		if res, _, err = e.mergeCommitted(ctx, w, p.Commit, commit.Meta{Author: meta.Author, TimeNs: meta.TimeNs}); err != nil {
			return res, err
		}
	}
	r := storeReceipt(acct, st)
	r.WallNs = time.Since(t0).Nanoseconds()
	r.CaptureNs = captureNs
	r.FUSE = fuseStats(w.mnt.Stats().Sub(fuseBefore))
	var u overlay.UpperSummary
	u, r.UpperBytes = e.upperNow(ctx, w, cs.Upper)
	r.Upper = wire.UpperStats(u)
	res.Receipt = &r
	e.metrics.commits.Add(1)
	e.log.Info("workspace commit", "id", id, "result", res.Result, "commit", p.Commit.Short(), "changes", len(cs.Changes), "ms", float64(r.WallNs)/1e6)
	return res, nil
}

// EndWorkspace unmounts a workspace and removes its upper layer. It refuses
// when there are uncommitted changes, unless discard is set.
func (e *Engine) EndWorkspace(ctx context.Context, id string, discard bool) error {
	e.mu.Lock()
	w := e.live[id]
	e.mu.Unlock()
	if w == nil {
		rec, err := e.db.Workspace(ctx, id)
		if errors.Is(err, store.ErrNotFound) {
			return e.notHere(ctx, id, err)
		}
		if err != nil {
			return classify(err)
		}
		if !discard {
			return fmt.Errorf("workspace %s is not mounted, so its changes cannot be checked; remount it or end it with discard: %w", id, errclass.Uncommitted)
		}
		return e.remove(ctx, rec)
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if !discard && !w.opts.Native {
		cs, err := w.mnt.Changes(ctx)
		if err != nil {
			return err
		}
		if n := len(cs.Changes); n > 0 {
			return fmt.Errorf("workspace %s has %d uncommitted changes (commit them or end with discard): %w", id, n, errclass.Uncommitted)
		}
	}
	if err := e.unserve(ctx, w); err != nil {
		return fmt.Errorf("end workspace %s: %w", id, err)
	}
	e.mu.Lock()
	delete(e.live, id)
	e.mu.Unlock()
	e.log.Info("workspace ended", "id", id, "discard", discard)
	return e.remove(ctx, w.rec)
}

// remove deletes an unserved workspace's directories and record.
func (e *Engine) remove(ctx context.Context, rec store.Workspace) error {
	e.cleanStale(rec)
	dir := e.workspaceDir(rec.ID)
	if err := e.dropQuota(rec.ID); err != nil {
		return fmt.Errorf("remove workspace %s: %w", rec.ID, err)
	}
	if err := os.RemoveAll(dir); err != nil {
		return fmt.Errorf("remove workspace %s: %w", rec.ID, err)
	}
	if err := e.removeQuotaImage(rec.ID); err != nil {
		return fmt.Errorf("remove workspace %s: %w", rec.ID, err)
	}
	if rec.MountPath != "" && !isBelow(rec.MountPath, dir) {
		os.Remove(rec.MountPath) // a requested mount path: remove it only when empty
	}
	if rec.Project == "" { // native: never recorded
		return nil
	}
	// Its ports' share tokens are revoked with it, before its record
	// goes: a token never outlives its workspace.
	if _, err := e.db.DeletePortShares(ctx, rec.ID, 0); err != nil {
		return fmt.Errorf("remove workspace %s: %w", rec.ID, err)
	}
	return classify(e.db.DeleteWorkspace(ctx, rec.ID))
}

func isBelow(p, dir string) bool {
	rel, err := filepath.Rel(dir, p)
	return err == nil && rel != ".." && !filepath.IsAbs(rel) && (len(rel) < 3 || rel[:3] != "../")
}

// MountWorkspace serves again a recorded workspace that is not served (after
// a crash of the daemon that served it): a stale mount is cleaned up and the
// upper layer is mounted over the same lower tree, nothing lost.
func (e *Engine) MountWorkspace(ctx context.Context, id string) (wire.Workspace, error) {
	if err := e.checkOpen(); err != nil {
		return wire.Workspace{}, err
	}
	e.mu.Lock()
	if w := e.live[id]; w != nil {
		e.mu.Unlock()
		w.mu.RLock()
		defer w.mu.RUnlock()
		return w.info(), nil
	}
	e.mu.Unlock()
	rec, err := e.db.Workspace(ctx, id)
	if errors.Is(err, store.ErrNotFound) {
		return wire.Workspace{}, e.notHere(ctx, id, err)
	}
	if err != nil {
		return wire.Workspace{}, classify(err)
	}
	w := &workspace{rec: rec}
	if err := json.Unmarshal(rec.Options, &w.opts); err != nil {
		return wire.Workspace{}, fmt.Errorf("workspace %s: bad options: %w", id, err)
	}
	if _, ok := e.plats[w.opts.Platform]; !ok {
		return wire.Workspace{}, fmt.Errorf("workspace %s needs platform %q, which this daemon lacks: %w", id, w.opts.Platform, errclass.Unavailable)
	}
	if err := e.cleanStale(rec); err != nil {
		return wire.Workspace{}, fmt.Errorf("clean stale mount of %s: %w", id, err)
	}
	if err := e.serve(ctx, w, false); err != nil {
		return wire.Workspace{}, err
	}
	if len(w.opts.Pending) > 0 {
		// The daemon that served it died while it changed the view: finish.
		if _, err := e.catchUp(ctx, w); err != nil {
			e.unserve(context.WithoutCancel(ctx), w)
			return wire.Workspace{}, fmt.Errorf("workspace %s: %w", id, err)
		}
	}
	w.rec.State = wire.StateMounted
	e.mu.Lock()
	e.live[id] = w
	e.mu.Unlock()
	return w.info(), nil
}

// Recover remounts every recorded workspace that this process does not
// serve: the daemon calls it on start. Failures are logged and the
// workspace stays recorded (unmounted) so nothing is lost.
func (e *Engine) Recover(ctx context.Context) error {
	recs, err := e.db.Workspaces(ctx)
	if err != nil {
		return err
	}
	e.detachOrphans(recs)
	for _, r := range recs {
		if _, err := e.MountWorkspace(ctx, r.ID); err != nil {
			e.log.Error("recover workspace", "id", r.ID, "err", err)
			continue
		}
		if w, err := e.get(ctx, r.ID); err == nil {
			e.recoverServices(w)
		}
		e.log.Info("workspace recovered", "id", r.ID, "mount", r.MountPath)
	}
	return nil
}

// detachOrphans detaches mounts of this Store that no workspace record
// owns: a daemon killed while it created a workspace may have mounted it
// before the record was written. They are found by their source in
// /proc/self/mountinfo, never by touching them.
func (e *Engine) detachOrphans(recs []store.Workspace) {
	owned := map[string]bool{}
	var dirs []string // a recorded workspace's own mounts (an overlay's FUSE view) are below
	for _, r := range recs {
		owned[filepath.Clean(r.MountPath)] = true
		dirs = append(dirs, e.workspaceDir(r.ID))
	}
	ms, err := mountinfo.Read(mountinfo.Self)
	if err != nil {
		e.log.Warn("list mounts", "err", err)
		return
	}
	for _, m := range ms {
		if m.Source != e.source || owned[m.Dir] || slices.ContainsFunc(dirs, func(d string) bool { return isBelow(m.Dir, d) }) {
			continue
		}
		if err := fusefs.CleanStale(m.Dir); err != nil {
			e.log.Warn("detach a mount no workspace owns", "mount", m.Dir, "err", err)
			continue
		}
		e.log.Info("detached a mount no workspace owns", "mount", m.Dir)
	}
}

// trackUpper starts following w's upper layer for the receipts' upper
// figures; without a tracker (no inotify), each receipt scans the upper.
func (e *Engine) trackUpper(ctx context.Context, w *workspace) {
	if e.trackers == nil {
		return
	}
	t, err := e.trackers.Track(ctx, w.mnt.UpperDir(), e.db, w.opts.Root)
	if err != nil {
		e.log.Warn("upper layer not tracked: each exec scans it", "id", w.rec.ID, "err", err)
		return
	}
	u, _, err := t.Summary(ctx)
	if err != nil {
		t.Close()
		e.log.Warn("upper layer not tracked: each exec scans it", "id", w.rec.ID, "err", err)
		return
	}
	w.upperMu.Lock()
	w.tracker, w.upper = t, u
	w.upperMu.Unlock()
}

// upperTook returns what changed in w's upper layer since the last exec's
// receipt.
func (e *Engine) upperTook(ctx context.Context, w *workspace) wire.UpperStats {
	if w.mnt == nil {
		return wire.UpperStats{}
	}
	u, _ := e.upperNow(ctx, w, nil)
	w.upperMu.Lock()
	defer w.upperMu.Unlock()
	d := u.Sub(w.upper)
	w.upper = u
	return wire.UpperStats(d)
}

// upperNow summarizes what w's upper layer holds and the bytes it takes on
// disk: from its tracker, else from scanned (a scan a commit or status
// already made) or a scan of its own.
func (e *Engine) upperNow(ctx context.Context, w *workspace, scanned *overlay.UpperState) (overlay.UpperSummary, int64) {
	if w.tracker != nil {
		u, disk, err := w.tracker.Summary(ctx)
		if err != nil {
			e.log.Warn("track upper layer", "id", w.rec.ID, "err", err)
		}
		return u, disk
	}
	u := scanned
	if u == nil {
		var err error
		if u, err = overlay.ScanUpper(w.mnt.UpperDir()); err != nil {
			e.log.Warn("scan upper layer", "id", w.rec.ID, "err", err)
			return overlay.UpperSummary{}, 0
		}
	}
	if err := overlay.CountCopyUps(ctx, e.db, w.opts.Root, u); err != nil {
		e.log.Warn("count copy-ups", "id", w.rec.ID, "err", err)
	}
	disk, _ := diskusage.Tree(w.mnt.UpperDir())
	return u.UpperSummary, disk
}

// splitPath splits a clean relative path into its names ("" has none).
func splitPath(rel string) []string {
	if rel == "" {
		return nil
	}
	return strings.Split(rel, "/")
}
