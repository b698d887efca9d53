package image

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"layerfs.dev/layerfs/internal/commit"
	"layerfs.dev/layerfs/internal/store"
)

// Builder makes an image from a stored one (or from nothing) a layer at a
// time: a workspace root's changes (image commit), a build's steps. Each
// layer is a commit on the one before, recorded as a derivation under the
// key its caller gives, so the same step on the same input is made once.
// Nothing is named until Name.
type Builder struct {
	db      DB
	Commit  store.ID     // the image so far (ZeroID: nothing yet)
	commit  store.Commit // and its commit
	Config  v1.ConfigFile
	Layers  []Layer
	Derived map[string]store.ID
}

// NewBuilder starts from base (nil: scratch, an empty tree with a new
// config).
func NewBuilder(ctx context.Context, db DB, base *store.Image) (*Builder, error) {
	b := &Builder{db: db, Derived: map[string]store.ID{}}
	if base == nil {
		cfg, err := NewConfig(nil, nil, "")
		if err != nil {
			return nil, err
		}
		return b, json.Unmarshal(cfg, &b.Config)
	}
	rec, err := DecodeRecord(*base)
	if err != nil {
		return nil, err
	}
	cf, err := rec.ConfigFile()
	if err != nil {
		return nil, err
	}
	c, err := db.Commit(ctx, base.Commit)
	if err != nil {
		return nil, err
	}
	b.Commit, b.commit, b.Config, b.Layers = base.Commit, *c, *cf, rec.Layers
	return b, nil
}

// Root is the tree of the image so far.
func (b *Builder) Root() store.ID { return b.commit.Root }

// Reuse looks up the commit derived before under key: if it is stored,
// it becomes the image's next layer and Reuse reports true. Its diff ID
// is in its message, as AddLayer and Import write it.
func (b *Builder) Reuse(ctx context.Context, key, createdBy string) (bool, error) {
	id, ok, err := b.db.Derivation(ctx, key)
	if err != nil || !ok {
		return false, err
	}
	c, err := b.db.Commit(ctx, id)
	if err != nil {
		return false, err
	}
	diffID, ok := strings.CutPrefix(c.Message, layerMessage)
	if !ok || c.Parent() != b.Commit {
		return false, nil
	}
	b.push(id, *c, Layer{DiffID: diffID, Commit: id}, createdBy)
	return true, nil
}

// AddLayer applies changes to the image's tree and makes the result its
// next layer, derived under key ("": none recorded).
func (b *Builder) AddLayer(ctx context.Context, key, createdBy string, changes []commit.Change) (Stats, error) {
	return b.AddLayerOn(ctx, key, createdBy, b.commit, changes)
}

// AddLayerOn applies changes to on's tree and makes the result the
// image's next layer: what it holds beyond the image's tree, the changes
// that made on (a stored commit descending from the image's, such as a
// forked workspace's root) and changes alike. on's Stats must be its
// tree's totals.
func (b *Builder) AddLayerOn(ctx context.Context, key, createdBy string, on store.Commit, changes []commit.Change) (Stats, error) {
	batch, err := b.db.NewBatch(ctx)
	if err != nil {
		return Stats{}, err
	}
	defer batch.Abort()
	root, st, err := commit.Build(ctx, batch, b.db, on.Root, changes, nil)
	if err != nil {
		return Stats{}, err
	}
	if err := batch.Flush(ctx); err != nil {
		return Stats{}, err
	}
	diffID, size, err := DiffID(ctx, b.db, b.commit.Root, root)
	if err != nil {
		return Stats{}, err
	}
	c := store.Commit{Root: root, Message: layerMessage + diffID, Author: Author, Generation: 1, Stats: store.CommitStats{
		Files: on.Stats.Files + st.Delta.Files, Dirs: on.Stats.Dirs + st.Delta.Dirs,
		Bytes: on.Stats.Bytes + st.Delta.Bytes, Changed: st.Changes}}
	if !b.Commit.IsZero() {
		c.Parents, c.Generation = []store.ID{b.Commit}, b.commit.Generation+1
	}
	id, err := batch.PutCommit(&c)
	if err == nil {
		err = batch.Flush(ctx)
	}
	if err != nil {
		return Stats{}, err
	}
	bs := batch.Stats()
	b.push(id, c, Layer{DiffID: diffID, Size: size, Commit: id}, createdBy)
	if key != "" {
		b.Derived[key] = id
	}
	return Stats{Layers: 1, LayersRead: 1, Bytes: st.Bytes, NewChunks: st.NewChunks, NewBytes: st.NewBytes,
		StoreGrowth: bs.NewChunkBytes + bs.NewObjectBytes}, nil
}

func (b *Builder) push(id store.ID, c store.Commit, l Layer, createdBy string) {
	h, _ := v1.NewHash(l.DiffID)
	b.Config.RootFS.Type = "layers"
	b.Config.RootFS.DiffIDs = append(b.Config.RootFS.DiffIDs, h)
	b.Config.History = append(b.Config.History, v1.History{CreatedBy: createdBy})
	b.Commit, b.commit, b.Layers = id, c, append(b.Layers, l)
}

// Note records a step that adds no layer (ENV, WORKDIR, ...) in the
// config's history.
func (b *Builder) Note(createdBy string) {
	b.Config.History = append(b.Config.History, v1.History{CreatedBy: createdBy, EmptyLayer: true})
}

// Name names the image made so far, with its derivations, in one
// transaction. An image of no layer is the empty tree's commit.
func (b *Builder) Name(ctx context.Context, name, source string) (store.Image, error) {
	if err := store.ValidImageName(name); err != nil {
		return store.Image{}, err
	}
	if b.Commit.IsZero() {
		batch, err := b.db.NewBatch(ctx)
		if err != nil {
			return store.Image{}, err
		}
		defer batch.Abort()
		c := store.Commit{Message: "image of no layer", Author: Author, Generation: 1}
		id, err := batch.PutCommit(&c)
		if err == nil {
			err = batch.Flush(ctx)
		}
		if err != nil {
			return store.Image{}, err
		}
		b.Commit, b.commit = id, c
	}
	cfg, err := json.Marshal(b.Config)
	if err != nil {
		return store.Image{}, err
	}
	rec, err := json.Marshal(Record{Config: cfg, Layers: b.Layers, Source: source})
	if err != nil {
		return store.Image{}, err
	}
	img, err := b.db.PutImage(ctx, store.Image{Name: name, Digest: Digest(cfg), Commit: b.Commit, Record: rec}, b.Derived)
	if err != nil {
		return store.Image{}, fmt.Errorf("name image %s: %w", name, err)
	}
	return img, nil
}
