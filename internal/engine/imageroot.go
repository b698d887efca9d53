package engine

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"

	"layerfs.dev/layerfs/internal/commit"
	"layerfs.dev/layerfs/internal/image"
	"layerfs.dev/layerfs/internal/kerneloverlay"
	"layerfs.dev/layerfs/internal/overlay"
	"layerfs.dev/layerfs/internal/platforms"
	"layerfs.dev/layerfs/internal/store"
	"layerfs.dev/layerfs/wire"
	"layerfs.dev/layerfs/wire/errclass"
)

// rootImage is the image a workspace's root lies over, kept in its
// record's options: the root is served like a workspace (kernel
// overlayfs over the metadata image of the image's tree, data from the
// Store's cache) with an upper layer of the workspace's own, so what its
// execs install there stays for its life.
type rootImage struct {
	Name   string   `json:"name"`
	Digest string   `json:"digest"`
	Commit store.ID `json:"commit"`
	Root   store.ID `json:"root"` // the commit's tree
	// On and OnRoot are the commit and tree the root stands on when they
	// are not the image's: a fork's root stands on its source's root as
	// it was forked, a commit on the image's (or on the source's On).
	// ZeroID: Commit and Root.
	On     store.ID `json:"on,omitempty"`
	OnRoot store.ID `json:"on_root,omitempty"`
	// Env, Dir, UID, GID and Home are the execs' defaults: the image
	// config's Env, WorkingDir and User (resolved in its /etc/passwd).
	Env  []string `json:"env,omitempty"`
	Dir  string   `json:"dir,omitempty"`
	UID  int      `json:"uid"`
	GID  int      `json:"gid"`
	Home string   `json:"home,omitempty"`
}

// ref is the image as a workspace names it: NAME@DIGEST.
func (r *rootImage) ref() string {
	if r == nil {
		return ""
	}
	return r.Name + "@" + r.Digest
}

// lower is the tree the root's upper lies over.
func (r *rootImage) lower() store.ID {
	if !r.OnRoot.IsZero() {
		return r.OnRoot
	}
	return r.Root
}

// base is the commit of lower.
func (r *rootImage) base() store.ID {
	if !r.On.IsZero() {
		return r.On
	}
	return r.Commit
}

// rootDir and rootTarget are where a workspace's root is kept and served:
// the overlay's own directories (upper/, work/, lower/, view/), and its
// mount, inside them (so a root made ahead moves in with one rename, see
// rootPool).
func (e *Engine) rootDir(id string) string    { return filepath.Join(e.workspaceDir(id), "rootfs") }
func (e *Engine) rootTarget(id string) string { return kerneloverlay.MountDir(e.rootDir(id)) }

// findImage resolves NAME[@DIGEST] to a stored image: the name's, which
// must have the pinned digest; else, when pinned, any image of that
// digest (the name moved on since).
func (e *Engine) findImage(ctx context.Context, ref string) (store.Image, error) {
	r, err := image.ParseRef(ref)
	if err != nil {
		return store.Image{}, fmt.Errorf("%w: image: %w", errclass.Invalid, err)
	}
	img, err := e.db.Image(ctx, r.Name)
	switch {
	case err == nil && (r.Digest == "" || img.Digest == r.Digest):
		return img, nil
	case err != nil && !errors.Is(err, store.ErrNotFound):
		return store.Image{}, err
	case r.Digest == "":
		return store.Image{}, fmt.Errorf("%w: image %q is not in the Store (import, pull or build it first)", errclass.NotFound, r.Name)
	}
	same, err := e.db.ImagesByDigest(ctx, r.Digest)
	if err != nil {
		return store.Image{}, err
	}
	if len(same) == 0 {
		return store.Image{}, fmt.Errorf("%w: image %s: no stored image has digest %s", errclass.NotFound, r.Name, r.Digest)
	}
	return same[0], nil
}

// resolveImage makes the rootImage of ref (a workspace's request), or of
// the project's default image when ref is "" (nil: neither).
func (e *Engine) resolveImage(ctx context.Context, project, ref string) (*rootImage, error) {
	if ref == "" && project != "" {
		p, err := e.db.Project(ctx, project)
		if err != nil {
			return nil, classify(err)
		}
		ref = p.Image
	}
	if ref == "" {
		return nil, nil
	}
	img, err := e.findImage(ctx, ref)
	if err != nil {
		return nil, err
	}
	return e.imageRoot(ctx, img)
}

// imageKey names what an image's rootImage is read from.
type imageKey struct {
	commit store.ID
	digest string
}

// maxRootImages bounds the engine's rootImages.
const maxRootImages = 64

// imageRoot is a stored image's tree and defaults (readImageRoot), read
// once per image: opening a workspace on it then costs no read of its
// record, its commit or its /etc/passwd.
func (e *Engine) imageRoot(ctx context.Context, img store.Image) (*rootImage, error) {
	k := imageKey{img.Commit, img.Digest}
	e.rootsMu.Lock()
	r, ok := e.rootImages[k]
	e.rootsMu.Unlock()
	if ok {
		r.Name, r.Env = img.Name, slices.Clone(r.Env)
		return &r, nil
	}
	rp, err := e.readImageRoot(ctx, img)
	if err != nil {
		return nil, err
	}
	e.rootsMu.Lock()
	if e.rootImages == nil || len(e.rootImages) >= maxRootImages {
		e.rootImages = map[imageKey]rootImage{}
	}
	kept := *rp
	kept.Env = slices.Clone(rp.Env)
	e.rootImages[k] = kept
	e.rootsMu.Unlock()
	return rp, nil
}

// readImageRoot reads a stored image's tree and defaults.
func (e *Engine) readImageRoot(ctx context.Context, img store.Image) (*rootImage, error) {
	rec, err := image.DecodeRecord(img)
	if err != nil {
		return nil, err
	}
	d, err := rec.Defaults()
	if err != nil {
		return nil, err
	}
	c, err := e.db.Commit(ctx, img.Commit)
	if err != nil {
		return nil, err
	}
	u, err := image.ResolveUser(ctx, e.db, c.Root, d.User)
	if err != nil {
		return nil, fmt.Errorf("image %s: %w", img.Name, err)
	}
	return &rootImage{Name: img.Name, Digest: img.Digest, Commit: img.Commit, Root: c.Root,
		Env: d.Env, Dir: d.WorkingDir, UID: u.UID, GID: u.GID, Home: u.Home}, nil
}

// mountRoot serves w's root: kernel overlayfs over the tree it stands on
// (the image's, or a fork's inherited one) with the workspace's upper, id-mapped like the workspace for its platform's
// user namespace; a fresh root is taken from the pool when it has one
// (rootPool). A root needs the overlay data path; there is no
// fallback (a root served through the daemon would make every exec's
// every file access a FUSE request).
func (e *Engine) mountRoot(ctx context.Context, w *workspace, fresh bool) error {
	if err := e.overlayCheck(); err != nil {
		return fmt.Errorf("%w: an image root needs kernel overlayfs: %w", errclass.Unavailable, err)
	}
	var committed *overlay.UpperState
	if fresh {
		committed = overlay.EmptyUpper()
		if w.opts.QuotaBytes == 0 && e.takeRoot(w) {
			e.prefetch(w.opts.Image.lower())
			return nil
		}
	}
	target := e.rootTarget(w.rec.ID)
	if err := mkdirs(target); err != nil {
		return err
	}
	idmap := e.layerIDMap(w)
	root := w.opts.Image.lower()
	lower, err := e.acquireLower(ctx, root)
	if err == nil {
		w.root, err = lower.Over(ctx, e.rootDir(w.rec.ID), target, committed, idmap, w.opts.volatile())
		if err != nil {
			e.releaseLower(context.WithoutCancel(ctx), root)
		}
	}
	if err != nil {
		// A lower of its own, as a workspace's.
		e.log.Warn("shared lower of an image root refused; the root gets its own", "id", w.rec.ID, "err", err)
		w.root, err = kerneloverlay.New(ctx, kerneloverlay.Config{
			Lower: e.db, Root: root, Dir: e.rootDir(w.rec.ID), Target: target, Committed: committed,
			Logger: e.log, Source: e.source, IDMap: idmap, MetaCache: e.db.CacheDir(), Volatile: w.opts.volatile(),
		})
		if err != nil {
			return fmt.Errorf("mount the root of %s (image %s): %w", w.rec.ID, w.opts.Image.ref(), err)
		}
	} else {
		w.rootShared = true
	}
	e.prefetch(root)
	return nil
}

// rootLower is the shared lower of the image trees workspaces' roots
// stand on, with the number of roots over it.
type rootLower struct {
	l    *kerneloverlay.SharedLower
	refs int
}

// acquireLower returns the shared lower of the tree root, mounting it
// for its first root.
func (e *Engine) acquireLower(ctx context.Context, root store.ID) (*kerneloverlay.SharedLower, error) {
	e.rootsMu.Lock()
	defer e.rootsMu.Unlock()
	if rl := e.rootLowers[root]; rl != nil {
		rl.refs++
		return rl.l, nil
	}
	l, err := kerneloverlay.NewSharedLower(ctx, kerneloverlay.Config{Lower: e.db, Root: root,
		Dir: filepath.Join(e.db.WorkspacesDir(), ".roots", root.String()), Source: e.source, MetaCache: e.db.CacheDir(), Logger: e.log})
	if err != nil {
		return nil, err
	}
	if e.rootLowers == nil {
		e.rootLowers = map[store.ID]*rootLower{}
	}
	e.rootLowers[root] = &rootLower{l: l, refs: 1}
	return l, nil
}

// releaseLower drops a root's hold on the shared lower of root. A lower
// no root holds stays mounted, for the next workspace on the image to
// open at an overlay's cost, until the engine shuts down (closeLowers).
func (e *Engine) releaseLower(_ context.Context, root store.ID) error {
	e.rootsMu.Lock()
	defer e.rootsMu.Unlock()
	if rl := e.rootLowers[root]; rl != nil {
		rl.refs--
	}
	return nil
}

// closeLowers unmounts every shared lower; their roots must be gone.
func (e *Engine) closeLowers(ctx context.Context) error {
	e.rootsMu.Lock()
	defer e.rootsMu.Unlock()
	var errs []error
	for root, rl := range e.rootLowers {
		if rl.refs > 0 {
			errs = append(errs, fmt.Errorf("shared lower of %s: %d roots still on it", root.Short(), rl.refs))
			continue
		}
		errs = append(errs, rl.l.Close(ctx))
		delete(e.rootLowers, root)
	}
	return errors.Join(errs...)
}

// rootAttach is what w's sandboxes need to know of its root.
func (e *Engine) rootAttach(w *workspace, pw *platforms.Workspace) {
	if w.root != nil {
		pw.RootDir, pw.RootWritable = e.rootTarget(w.rec.ID), true
	}
}

// unmountRoot takes w's root down (its upper stays), and lets go of its
// shared lower.
func (e *Engine) unmountRoot(ctx context.Context, w *workspace) error {
	if w.root == nil {
		return nil
	}
	err := w.root.Unmount(ctx)
	if w.rootShared {
		err = errors.Join(err, e.releaseLower(ctx, w.opts.Image.lower()))
	}
	w.root, w.rootShared = nil, false
	return err
}

// imageSpec is req's spec on a workspace whose root is img: the request
// with the image config's defaults where it names none: its Env (the
// request's entries win, key by key), HOME from its user's passwd entry,
// its WorkingDir (RootWorkdir, unless it is in /workspace) and its User.
func imageSpec(img *rootImage, req wire.ExecRequest) (platforms.ExecSpec, error) {
	env := img.Env
	if img.Home != "" && !slices.ContainsFunc(append(env, req.Env...), func(kv string) bool { return strings.HasPrefix(kv, "HOME=") }) {
		env = append(slices.Clone(env), "HOME="+img.Home)
	}
	req.Env = mergeEnv(env, req.Env)
	rootDir := ""
	if req.Dir == "" && img.Dir != "" {
		d := path.Clean(img.Dir)
		switch {
		case d == platforms.WorkspaceDir:
		case strings.HasPrefix(d, platforms.WorkspaceDir+"/"):
			req.Dir = strings.TrimPrefix(d, platforms.WorkspaceDir+"/")
		default:
			rootDir = d
		}
	}
	spec, err := platforms.FromRequest(req, img.UID, img.GID)
	if err != nil || rootDir == "" {
		return spec, err
	}
	spec.RootWorkdir = rootDir
	return spec.Normalize()
}

// mergeEnv is base with over's entries on top, key by key, in base's
// order then over's new keys.
func mergeEnv(base, over []string) []string {
	out := slices.Clone(base)
	idx := map[string]int{}
	for i, kv := range out {
		k, _, _ := strings.Cut(kv, "=")
		idx[k] = i
	}
	for _, kv := range over {
		k, _, _ := strings.Cut(kv, "=")
		if i, ok := idx[k]; ok {
			out[i] = kv
			continue
		}
		idx[k] = len(out)
		out = append(out, kv)
	}
	return out
}

// mkdirs makes dir and its parents.
func mkdirs(dir string) error { return os.MkdirAll(dir, 0o755) }

// sandboxMounts are the top-level directories a sandbox mounts over in a
// workspace's root (on docker, /.layerfs holds the supervisor), made there
// when the image lacks them, and the files
// of /etc a container runtime binds its own over (Docker's): they are the
// sandbox's, not changes of the root.
var (
	sandboxMounts = []string{"workspace", "tmp", "proc", "sys", "dev", ".layerfs"}
	runtimeBinds  = []string{"etc/resolv.conf", "etc/hosts", "etc/hostname"}
)

// rootChanges are the changes of a root's upper that are the image's:
// without the sandbox's mount points.
func rootChanges(cs []commit.Change) []commit.Change {
	return slices.DeleteFunc(slices.Clone(cs), func(c commit.Change) bool {
		top, _, _ := strings.Cut(c.Path, "/")
		return !c.Delete && (slices.Contains(sandboxMounts, top) || slices.Contains(runtimeBinds, c.Path))
	})
}
