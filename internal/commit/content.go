package commit

import (
	"context"
	"fmt"

	"layerfs.dev/layerfs/internal/store"
)

// readContent returns the bytes of the file entry e, read chunk by chunk
// through r (holes read as zeros), verifying that they add up to e.Size.
func readContent(ctx context.Context, r Reader, e *store.Entry) ([]byte, error) {
	switch {
	case e.Object.IsZero():
		if e.Size != 0 {
			return nil, fmt.Errorf("%s: no content for %d bytes: %w", e.Name, e.Size, store.ErrCorrupt)
		}
		return []byte{}, nil
	case e.ObjectKind == store.KindChunk:
		b, err := r.Chunk(ctx, e.Object)
		if err != nil {
			return nil, err
		}
		if int64(len(b)) != e.Size {
			return nil, fmt.Errorf("chunk %s has %d bytes, entry says %d: %w", e.Object.Short(), len(b), e.Size, store.ErrCorrupt)
		}
		return b, nil
	case e.ObjectKind == store.KindManifest:
		m, err := r.Manifest(ctx, e.Object)
		if err != nil {
			return nil, err
		}
		if m.Size != e.Size {
			return nil, fmt.Errorf("manifest %s has size %d, entry says %d: %w", e.Object.Short(), m.Size, e.Size, store.ErrCorrupt)
		}
		out := make([]byte, 0, m.Size)
		for _, x := range m.Extents {
			if x.Chunk.IsZero() {
				out = append(out, make([]byte, x.Length)...)
				continue
			}
			b, err := r.Chunk(ctx, x.Chunk)
			if err != nil {
				return nil, err
			}
			if int64(len(b)) != x.Length {
				return nil, fmt.Errorf("chunk %s has %d bytes, manifest says %d: %w", x.Chunk.Short(), len(b), x.Length, store.ErrCorrupt)
			}
			out = append(out, b...)
		}
		return out, nil
	}
	return nil, fmt.Errorf("%s names a %s: %w", e.Name, e.ObjectKind, store.ErrCorrupt)
}

// storeBytes stores data as a file's content, cut the way a capture cuts
// a file (one chunk up to the chunker's Max, else content-defined chunks
// with runs of zeros as holes), so the same bytes captured from a file get
// the same object. It returns the object and its kind (ZeroID and 0 for no
// bytes).
func storeBytes(w Writer, ch *Chunker, data []byte) (store.ID, store.Kind, error) {
	switch {
	case len(data) == 0:
		return store.ZeroID, 0, nil
	case len(data) <= ch.p.Max:
		id := store.Hash(store.KindChunk, data)
		if _, err := w.PutChunk(id, data); err != nil {
			return id, 0, err
		}
		return id, store.KindChunk, nil
	}
	m := &store.Manifest{Size: int64(len(data))}
	lastHole := -1
	for rest := data; len(rest) > 0; {
		k, zero := ch.cut(rest)
		if isHole(rest[:k], zero) {
			addHole(m, &lastHole, k)
		} else {
			id := store.Hash(store.KindChunk, rest[:k])
			if _, err := w.PutChunk(id, rest[:k]); err != nil {
				return id, 0, err
			}
			m.Extents = append(m.Extents, store.Extent{Chunk: id, Length: int64(k)})
		}
		rest = rest[k:]
	}
	id, err := w.PutManifest(m)
	return id, store.KindManifest, err
}

// pending serves what a merge wrote and has not flushed yet, beside what
// the Store holds: a merge of merge bases (the virtual base of a
// criss-cross) is read by the merge that follows it before anything is
// durable. It writes through to w.
type pending struct {
	w         Writer
	r         Reader
	trees     map[store.ID]*store.Tree
	manifests map[store.ID]*store.Manifest
	chunks    map[store.ID][]byte
}

func newPending(w Writer, r Reader) *pending {
	return &pending{w: w, r: r, trees: map[store.ID]*store.Tree{}, manifests: map[store.ID]*store.Manifest{}, chunks: map[store.ID][]byte{}}
}

func (p *pending) PutChunk(id store.ID, data []byte) (bool, error) {
	if _, ok := p.chunks[id]; !ok {
		p.chunks[id] = append([]byte(nil), data...)
	}
	return p.w.PutChunk(id, data)
}

func (p *pending) PutManifest(m *store.Manifest) (store.ID, error) {
	id, err := p.w.PutManifest(m)
	if err == nil {
		p.manifests[id] = m
	}
	return id, err
}

func (p *pending) PutTree(t *store.Tree) (store.ID, error) {
	id, err := p.w.PutTree(t)
	if err == nil {
		p.trees[id] = t
	}
	return id, err
}

func (p *pending) Tree(ctx context.Context, id store.ID) (*store.Tree, error) {
	if t, ok := p.trees[id]; ok {
		return t, nil
	}
	return p.r.Tree(ctx, id)
}

func (p *pending) Manifest(ctx context.Context, id store.ID) (*store.Manifest, error) {
	if m, ok := p.manifests[id]; ok {
		return m, nil
	}
	return p.r.Manifest(ctx, id)
}

func (p *pending) Chunk(ctx context.Context, id store.ID) ([]byte, error) {
	if b, ok := p.chunks[id]; ok {
		return b, nil
	}
	return p.r.Chunk(ctx, id)
}
