package image

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"sync"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"layerfs.dev/layerfs/internal/commit"
	"layerfs.dev/layerfs/internal/store"
)

// layerMessage starts the message of a layer's commit; its diff ID follows.
const layerMessage = "image layer "

// Author signs the commits of image layers. Layer commits carry no time,
// so that one layer on one base is one commit whatever imported it.
const Author = "layerfs image"

// Stats tell what an import or a build did.
type Stats struct {
	Layers      int   `json:"layers"`       // layers of the image
	LayersRead  int   `json:"layers_read"`  // of them, read (the others were stored already)
	Bytes       int64 `json:"bytes"`        // uncompressed layer bytes read
	NewChunks   int64 `json:"new_chunks"`   // chunks the Store did not have
	NewBytes    int64 `json:"new_bytes"`    // their payload bytes
	StoreGrowth int64 `json:"store_growth"` // payload and object bytes the Store took on
	WallNs      int64 `json:"wall_ns"`      // time of the whole import
}

// DB is what an import needs of the Store.
type DB interface {
	commit.Reader
	NewBatch(ctx context.Context) (*store.Batch, error)
	Commit(ctx context.Context, id store.ID) (*store.Commit, error)
	Derivation(ctx context.Context, key string) (store.ID, bool, error)
	PutImage(ctx context.Context, img store.Image, derivations map[string]store.ID) (store.Image, error)
}

// layerKey names the derivation "this layer on that commit" (ZeroID: on
// nothing).
func layerKey(parent store.ID, diffID string) string {
	return "oci-layer:" + parent.String() + ":" + diffID
}

// Import stores img under name: every layer not stored yet is read and
// applied, then the name points at the last layer's commit. from says
// where it came from (Record.Source).
func Import(ctx context.Context, db DB, name string, img v1.Image, from string) (store.Image, Stats, error) {
	t0 := time.Now()
	if err := store.ValidImageName(name); err != nil {
		return store.Image{}, Stats{}, err
	}
	cfg, err := img.RawConfigFile()
	if err != nil {
		return store.Image{}, Stats{}, fmt.Errorf("%w: read the config: %w", ErrBadImage, err)
	}
	cf, err := v1.ParseConfigFile(bytes.NewReader(cfg))
	if err != nil {
		return store.Image{}, Stats{}, fmt.Errorf("%w: parse the config: %w", ErrBadImage, err)
	}
	layers, err := img.Layers()
	if err != nil {
		return store.Image{}, Stats{}, fmt.Errorf("%w: list the layers: %w", ErrBadImage, err)
	}
	if len(layers) != len(cf.RootFS.DiffIDs) {
		return store.Image{}, Stats{}, fmt.Errorf("%w: %d layers, the config lists %d diff ids", ErrBadImage, len(layers), len(cf.RootFS.DiffIDs))
	}
	rec := &Record{Config: json.RawMessage(cfg), Source: from}
	// An archive's layers are uncompressed: their blob digests and the
	// manifest's would cost a gzip of every layer, so they are left out.
	blobs := !isArchive(from)
	if blobs {
		if d, err := img.Digest(); err == nil {
			rec.ManifestDigest = d.String()
		}
	}
	im, err := newImporter(ctx, db)
	if err != nil {
		return store.Image{}, Stats{}, err
	}
	defer im.batch.Abort()
	for i, l := range layers {
		diffID := cf.RootFS.DiffIDs[i].String()
		layer := Layer{DiffID: diffID}
		if blobs {
			if d, err := l.Digest(); err == nil {
				layer.Digest = d.String()
			}
		}
		if err := im.layer(ctx, &layer, func() (io.ReadCloser, error) { return l.Uncompressed() }); err != nil {
			return store.Image{}, im.stats, err
		}
		rec.Layers = append(rec.Layers, layer)
	}
	out, err := im.finish(ctx, name, rec)
	im.stats.WallNs = time.Since(t0).Nanoseconds()
	return out, im.stats, err
}

// importer applies layers on one batch, which holds the whole import
// until it is named.
type importer struct {
	db     DB
	batch  *store.Batch
	ps     *pendingStore
	cw     *commit.ContentWriter
	top    store.ID     // the last layer's commit (ZeroID: none yet)
	topC   store.Commit // and the commit itself
	derivs map[string]store.ID
	stats  Stats
}

func newImporter(ctx context.Context, db DB) (*importer, error) {
	b, err := db.NewBatch(ctx)
	if err != nil {
		return nil, err
	}
	ps := &pendingStore{Batch: b, db: db, trees: map[store.ID]*store.Tree{}}
	cw, err := commit.NewContentWriter(ps, nil)
	if err != nil {
		b.Abort()
		return nil, err
	}
	return &importer{db: db, batch: b, ps: ps, cw: cw, derivs: map[string]store.ID{}}, nil
}

// layer applies one layer (read through open, unless this layer on this
// base is stored already) on top of the image so far and records its
// commit in l.
func (im *importer) layer(ctx context.Context, l *Layer, open func() (io.ReadCloser, error)) error {
	im.stats.Layers++
	key := layerKey(im.top, l.DiffID)
	if id, ok, err := im.db.Derivation(ctx, key); err != nil {
		return err
	} else if ok {
		c, err := im.db.Commit(ctx, id)
		if err != nil {
			return err
		}
		im.top, im.topC, l.Commit = id, *c, id
		return nil
	}
	im.stats.LayersRead++
	rc, err := open()
	if err != nil {
		return fmt.Errorf("%w: layer %s: open: %w", ErrBadLayer, short(l.DiffID), err)
	}
	defer rc.Close()
	h := sha256.New()
	counted := &countingReader{r: io.TeeReader(rc, h)}
	a := &applier{r: im.ps, base: im.topC.Root, cw: im.cw, digest: l.DiffID, changes: map[string]*layerChange{}}
	if err := a.apply(ctx, counted); err != nil {
		return err
	}
	// What follows the archive's end (its padding) is part of the digest.
	if _, err := io.Copy(io.Discard, counted); err != nil {
		return fmt.Errorf("%w: layer %s: read: %w", ErrBadLayer, short(l.DiffID), err)
	}
	if got := "sha256:" + hex.EncodeToString(h.Sum(nil)); got != l.DiffID {
		return fmt.Errorf("%w: layer %s: its content has digest %s, not its diff id", ErrBadLayer, short(l.DiffID), short(got))
	}
	l.Size = counted.n
	im.stats.Bytes += counted.n
	id, err := im.commitChanges(ctx, a.base, a.buildChanges(), layerMessage+l.DiffID)
	if err != nil {
		return fmt.Errorf("layer %s: %w", short(l.DiffID), err)
	}
	l.Commit = id
	im.derivs[key] = id
	return nil
}

// commitChanges builds changes on base (a tree) and puts the commit of
// the result on top of the image so far.
func (im *importer) commitChanges(ctx context.Context, base store.ID, changes []commit.Change, msg string) (store.ID, error) {
	root, st, err := commit.Build(ctx, im.ps, im.ps, base, changes, nil)
	if err != nil {
		return store.ZeroID, err
	}
	return im.putCommit(root, st, msg)
}

// putCommit puts the commit of root, on top of the image so far.
func (im *importer) putCommit(root store.ID, st commit.Stats, msg string) (store.ID, error) {
	c := store.Commit{Root: root, Message: msg, Author: Author, Generation: 1, Stats: store.CommitStats{
		Files: im.topC.Stats.Files + st.Delta.Files, Dirs: im.topC.Stats.Dirs + st.Delta.Dirs,
		Bytes: im.topC.Stats.Bytes + st.Delta.Bytes, Changed: st.Changes}}
	if !im.top.IsZero() {
		c.Parents, c.Generation = []store.ID{im.top}, im.topC.Generation+1
	}
	id, err := im.batch.PutCommit(&c)
	if err != nil {
		return store.ZeroID, err
	}
	im.top, im.topC = id, c
	return id, nil
}

// finish makes the import durable and names it.
func (im *importer) finish(ctx context.Context, name string, rec *Record) (store.Image, error) {
	if im.top.IsZero() {
		// No layer at all (FROM scratch): the empty tree.
		if _, err := im.putCommit(store.ZeroID, commit.Stats{}, "image of no layer"); err != nil {
			return store.Image{}, err
		}
	}
	cw := im.cw.Stats()
	im.stats.NewChunks, im.stats.NewBytes = cw.NewChunks, cw.NewBytes
	if err := im.batch.Flush(ctx); err != nil {
		return store.Image{}, err
	}
	bs := im.batch.Stats()
	im.stats.StoreGrowth = bs.NewChunkBytes + bs.NewObjectBytes
	b, err := json.Marshal(rec)
	if err != nil {
		return store.Image{}, err
	}
	return im.db.PutImage(ctx, store.Image{Name: name, Digest: Digest(rec.Config), Commit: im.top, Record: b}, im.derivs)
}

// pendingStore is the import's batch, which also serves the trees it
// holds before they are flushed (a layer is built on the one before it).
type pendingStore struct {
	*store.Batch
	db    commit.Reader
	mu    sync.Mutex
	trees map[store.ID]*store.Tree
}

func (p *pendingStore) PutTree(t *store.Tree) (store.ID, error) {
	id, err := p.Batch.PutTree(t)
	if err == nil {
		p.mu.Lock()
		p.trees[id] = t
		p.mu.Unlock()
	}
	return id, err
}

func (p *pendingStore) Tree(ctx context.Context, id store.ID) (*store.Tree, error) {
	p.mu.Lock()
	t, ok := p.trees[id]
	p.mu.Unlock()
	if ok {
		return t, nil
	}
	return p.db.Tree(ctx, id)
}

func (p *pendingStore) Manifest(ctx context.Context, id store.ID) (*store.Manifest, error) {
	return p.db.Manifest(ctx, id)
}

func (p *pendingStore) Chunk(ctx context.Context, id store.ID) ([]byte, error) {
	return p.db.Chunk(ctx, id)
}

// countingReader counts what it read.
type countingReader struct {
	r io.Reader
	n int64
}

func (c *countingReader) Read(b []byte) (int, error) {
	n, err := c.r.Read(b)
	c.n += int64(n)
	return n, err
}

// ImportDir stores the directory dir as an image of one layer: its whole
// tree as a capture takes it (owners, modes, xattrs, hard links), with a
// config that names the layer and the usual PATH.
func ImportDir(ctx context.Context, db DB, name, dir string) (store.Image, Stats, error) {
	t0 := time.Now()
	if err := store.ValidImageName(name); err != nil {
		return store.Image{}, Stats{}, err
	}
	im, err := newImporter(ctx, db)
	if err != nil {
		return store.Image{}, Stats{}, err
	}
	defer im.batch.Abort()
	root, st, err := commit.CaptureDir(ctx, im.ps, im.ps, dir, nil)
	if err != nil {
		return store.Image{}, Stats{}, fmt.Errorf("%w: directory %s: %w", ErrBadImage, dir, err)
	}
	// The layer's tar reads the contents back: they must be stored. (The
	// batch goes on for the commit, and the name comes last, as always.)
	if err := im.batch.Flush(ctx); err != nil {
		return store.Image{}, Stats{}, err
	}
	diffID, size, err := DiffID(ctx, db, store.ZeroID, root)
	if err != nil {
		return store.Image{}, Stats{}, err
	}
	id, err := im.putCommit(root, st, layerMessage+diffID)
	if err != nil {
		return store.Image{}, Stats{}, err
	}
	cfg, err := NewConfig(nil, []string{diffID}, "layerfs image import (directory "+dir+")")
	if err != nil {
		return store.Image{}, Stats{}, err
	}
	rec := &Record{Config: cfg, Source: FromDir + ":" + dir, Layers: []Layer{{DiffID: diffID, Size: size, Commit: id}}}
	im.stats.Layers, im.stats.LayersRead, im.stats.Bytes = 1, 1, st.Bytes
	out, err := im.finish(ctx, name, rec)
	im.stats.NewChunks, im.stats.NewBytes = st.NewChunks, st.NewBytes
	im.stats.WallNs = time.Since(t0).Nanoseconds()
	return out, im.stats, err
}

// isArchive reports whether from (Record.Source) is a docker save or OCI
// archive, or a Docker engine's image (saved as one).
func isArchive(from string) bool {
	return strings.HasPrefix(from, FromArchive+":") || strings.HasPrefix(from, FromDocker+":")
}
