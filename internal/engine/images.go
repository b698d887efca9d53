package engine

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"time"

	"layerfs.dev/layerfs/internal/image"
	"layerfs.dev/layerfs/internal/store"
	"layerfs.dev/layerfs/wire"
	"layerfs.dev/layerfs/wire/errclass"
)

// wireImage describes a stored image.
func (e *Engine) wireImage(ctx context.Context, img store.Image) (wire.Image, error) {
	rec, err := image.DecodeRecord(img)
	if err != nil {
		return wire.Image{}, err
	}
	d, err := rec.Defaults()
	if err != nil {
		return wire.Image{}, err
	}
	out := wire.Image{Name: img.Name, Digest: img.Digest, Commit: img.Commit.String(), Created: img.Created.UTC(),
		Source: rec.Source, ManifestDigest: rec.ManifestDigest, Layers: []wire.ImageLayer{},
		Config: wire.ImageConfig{Env: d.Env, WorkingDir: d.WorkingDir, User: d.User, Entrypoint: d.Entrypoint, Cmd: d.Cmd}}
	for _, l := range rec.Layers {
		out.Layers = append(out.Layers, wire.ImageLayer{DiffID: l.DiffID, Digest: l.Digest, Size: l.Size, Commit: l.Commit.String()})
	}
	if c, err := e.db.Commit(ctx, img.Commit); err == nil {
		out.Files, out.Bytes = c.Stats.Files, c.Stats.Bytes
	}
	return out, nil
}

// Images lists the Store's images by name.
func (e *Engine) Images(ctx context.Context) ([]wire.Image, error) {
	imgs, err := e.db.Images(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]wire.Image, 0, len(imgs))
	for _, img := range imgs {
		w, err := e.wireImage(ctx, img)
		if err != nil {
			return nil, err
		}
		out = append(out, w)
	}
	return out, nil
}

// Image describes one image, NAME or NAME@DIGEST.
func (e *Engine) Image(ctx context.Context, ref string) (wire.Image, error) {
	img, err := e.findImage(ctx, ref)
	if err != nil {
		return wire.Image{}, err
	}
	return e.wireImage(ctx, img)
}

// RemoveImage removes an image's name; GC collects what nothing else
// reaches. Workspaces on it keep their root.
func (e *Engine) RemoveImage(ctx context.Context, name string) error {
	if err := store.ValidImageName(name); err != nil {
		return fmt.Errorf("%w: %w", errclass.Invalid, err)
	}
	return classify(e.db.DeleteImage(ctx, name))
}

// imageTemp is where an import keeps what it reads a source through (a
// Docker engine's saved image, an unpacked archive): beside the Store, on
// its file system, not in a memory-backed /tmp.
func (e *Engine) imageTemp() (string, error) {
	dir := filepath.Join(e.db.WorkspacesDir(), ".image-tmp")
	return dir, os.MkdirAll(dir, 0o700)
}

// ImportImage stores the image at req.Source as req.Name: only the
// layers the Store lacks are read.
func (e *Engine) ImportImage(ctx context.Context, req wire.ImageImport) (wire.ImageResult, error) {
	if err := e.checkOpen(); err != nil {
		return wire.ImageResult{}, err
	}
	if err := store.ValidImageName(req.Name); err != nil {
		return wire.ImageResult{}, fmt.Errorf("%w: name: %w", errclass.Invalid, err)
	}
	if !slices.Contains(image.Kinds, req.Kind) {
		return wire.ImageResult{}, fmt.Errorf("%w: kind %q: want one of %q", errclass.Invalid, req.Kind, image.Kinds)
	}
	var (
		img store.Image
		st  image.Stats
		err error
	)
	switch req.Kind {
	case image.FromDir:
		dir, derr := hostDir(req.Source, "source")
		if derr != nil {
			return wire.ImageResult{}, derr
		}
		img, st, err = image.ImportDir(ctx, e.db, req.Name, dir)
	default:
		if req.Kind == image.FromLayout || req.Kind == image.FromArchive {
			if !filepath.IsAbs(req.Source) {
				return wire.ImageResult{}, fmt.Errorf("%w: source %q must be an absolute path on the daemon's host", errclass.Invalid, req.Source)
			}
		}
		tmp, terr := e.imageTemp()
		if terr != nil {
			return wire.ImageResult{}, terr
		}
		o, oerr := image.Open(ctx, req.Kind, req.Source, image.OpenOptions{TempDir: tmp, Insecure: req.Insecure})
		if oerr != nil {
			return wire.ImageResult{}, classify(oerr)
		}
		defer o.Close()
		img, st, err = image.Import(ctx, e.db, req.Name, o.Image, o.Source)
	}
	if err != nil {
		return wire.ImageResult{}, classify(err)
	}
	e.log.Info("image imported", "name", img.Name, "digest", img.Digest, "layers", st.Layers, "read", st.LayersRead, "ms", st.WallNs/1e6)
	return e.imageResult(ctx, img, st)
}

func (e *Engine) imageResult(ctx context.Context, img store.Image, st image.Stats) (wire.ImageResult, error) {
	w, err := e.wireImage(ctx, img)
	if err != nil {
		return wire.ImageResult{}, err
	}
	return wire.ImageResult{Image: w, Stats: wire.ImageStats(st)}, nil
}

// CommitImage makes the changes of a workspace's root (since it was made
// on its image, those a fork inherited included) a new layer on that image, named req.Name, as docker
// commit does. The workspace goes on as it was.
func (e *Engine) CommitImage(ctx context.Context, id string, req wire.ImageCommit) (wire.ImageResult, error) {
	if err := e.checkOpen(); err != nil {
		return wire.ImageResult{}, err
	}
	if err := store.ValidImageName(req.Name); err != nil {
		return wire.ImageResult{}, fmt.Errorf("%w: name: %w", errclass.Invalid, err)
	}
	w, err := e.get(ctx, id)
	if err != nil {
		return wire.ImageResult{}, err
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.root == nil {
		return wire.ImageResult{}, fmt.Errorf("%w: workspace %s has no image root (create it with an image)", errclass.Invalid, id)
	}
	cs, err := w.root.Changes(ctx)
	if err != nil {
		return wire.ImageResult{}, fmt.Errorf("changes of the root of %s: %w", id, err)
	}
	base, err := e.imageOfRoot(ctx, w.opts.Image)
	if err != nil {
		return wire.ImageResult{}, err
	}
	b, err := image.NewBuilder(ctx, e.db, &base)
	if err != nil {
		return wire.ImageResult{}, err
	}
	// A fork's root stands on its source's root: the layer holds what
	// that added to the image too.
	on, err := e.db.Commit(ctx, w.opts.Image.base())
	if err != nil {
		return wire.ImageResult{}, err
	}
	st, err := b.AddLayerOn(ctx, "", "layerfs image commit "+id, *on, rootChanges(cs.Changes))
	if err != nil {
		return wire.ImageResult{}, classify(err)
	}
	img, err := b.Name(ctx, req.Name, "commit:"+id)
	if err != nil {
		return wire.ImageResult{}, classify(err)
	}
	e.log.Info("image committed", "workspace", id, "name", img.Name, "digest", img.Digest, "changes", len(cs.Changes))
	return e.imageResult(ctx, img, st)
}

// imageOfRoot is the stored image a root lies over: by its name if the
// name still has its digest, else by its digest, else rebuilt from what
// the workspace recorded (its commit's record is kept under no name then:
// the image was removed).
func (e *Engine) imageOfRoot(ctx context.Context, r *rootImage) (store.Image, error) {
	img, err := e.findImage(ctx, r.ref())
	if err == nil {
		return img, nil
	}
	return store.Image{}, fmt.Errorf("%w: the image %s this workspace stands on was removed; import it again to commit on it: %w", errclass.NotFound, r.ref(), err)
}

// SetProjectImage names the image a project's workspaces get when they
// name none ("" for none).
func (e *Engine) SetProjectImage(ctx context.Context, project string, req wire.ProjectImage) (wire.Project, error) {
	if req.Image != "" {
		if _, err := e.findImage(ctx, req.Image); err != nil {
			return wire.Project{}, err
		}
	}
	if err := e.db.SetProjectImage(ctx, project, req.Image); err != nil {
		return wire.Project{}, classify(err)
	}
	return e.Project(ctx, project)
}

// PushImage sends an image to a registry as req.Ref, its layers written
// from the Store.
func (e *Engine) PushImage(ctx context.Context, req wire.ImagePush) (wire.ImageResult, error) {
	if req.Ref == "" {
		return wire.ImageResult{}, fmt.Errorf("%w: ref: a registry reference is needed", errclass.Invalid)
	}
	img, err := e.findImage(ctx, req.Name)
	if err != nil {
		return wire.ImageResult{}, err
	}
	t0 := time.Now()
	pushed, err := image.Push(ctx, e.db, img, req.Ref, image.OpenOptions{Insecure: req.Insecure})
	if err != nil {
		return wire.ImageResult{}, classify(err)
	}
	res, err := e.imageResult(ctx, img, image.Stats{WallNs: time.Since(t0).Nanoseconds()})
	if err != nil {
		return res, err
	}
	res.Stats.Layers, res.Pushed = len(res.Image.Layers), pushed
	e.log.Info("image pushed", "name", img.Name, "ref", pushed)
	return res, nil
}
