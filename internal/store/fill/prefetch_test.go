package fill

import (
	"bytes"
	"context"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"layerfs.dev/layerfs/internal/account"
	"layerfs.dev/layerfs/internal/store/cache"
	"layerfs.dev/layerfs/internal/store/object"
	"layerfs.dev/layerfs/internal/store/pack"
)

// packSource is a Source over real pack files: chunks appended to a pack
// of a pack.Set, manifests held by ID, and the reads of the packs
// counted.
type packSource struct {
	packs     *pack.Set
	manifests map[object.ID][]byte
	chunks    map[object.ID][3]int64 // pack, offset, length
	reads     atomic.Int64
}

func (s *packSource) Manifests(_ context.Context, ids []object.ID, each func(object.ID, []byte) error) error {
	for _, id := range ids {
		if d, ok := s.manifests[id]; ok {
			if err := each(id, d); err != nil {
				return err
			}
		}
	}
	return nil
}

func (s *packSource) Chunks(_ context.Context, ids []object.ID, each func(object.ID, int64, int64, int64) error) error {
	for _, id := range ids {
		if c, ok := s.chunks[id]; ok {
			if err := each(id, c[0], c[1], c[2]); err != nil {
				return err
			}
		}
	}
	return nil
}

func (s *packSource) ReadRange(ctx context.Context, num, off, n int64) ([]byte, error) {
	s.reads.Add(1)
	return s.packs.ReadRange(ctx, num, off, n)
}

func (s *packSource) Manifest(_ context.Context, id object.ID) (*object.Manifest, error) {
	return object.DecodeManifest(s.manifests[id])
}

func (s *packSource) ReadLock() func() { return func() {} }

func (s *packSource) Contents(context.Context, object.ID) ([]Content, error) { return nil, nil }

// newPackSource writes a chunked content (two chunks and a hole) and two
// contents of one chunk into a pack, and returns the contents and their
// bytes.
func newPackSource(t *testing.T) (*packSource, []Content, map[object.ID][]byte) {
	dir := t.TempDir()
	s := &packSource{packs: pack.NewSet(dir, 1<<30, false, &account.Account{}),
		manifests: map[object.ID][]byte{}, chunks: map[object.ID][3]int64{}}
	t.Cleanup(func() { s.packs.Close() })
	w, err := s.packs.Create()
	require.NoError(t, err)
	rnd := rand.New(rand.NewPCG(1, 2))
	chunk := func(n int) (object.ID, []byte) {
		d := make([]byte, n)
		for i := range d {
			d[i] = byte(rnd.Uint32())
		}
		id := object.Hash(object.KindChunk, d)
		off, err := w.Append(id, d)
		require.NoError(t, err)
		s.chunks[id] = [3]int64{w.Number(), off, int64(n)}
		return id, d
	}
	want := map[object.ID][]byte{}
	var cs []Content
	for _, n := range []int{300, 5000} {
		id, d := chunk(n)
		cs = append(cs, Content{ID: id, Kind: object.KindChunk, Size: int64(n)})
		want[id] = d
	}
	aid, a := chunk(70 << 10)
	bid, b := chunk(1234)
	const hole = 1 << 20
	m := &object.Manifest{Size: int64(len(a) + hole + len(b)), Extents: []object.Extent{
		{Chunk: aid, Length: int64(len(a))}, {Length: hole}, {Chunk: bid, Length: int64(len(b))}}}
	data := m.Encode()
	mid := object.Hash(object.KindManifest, data)
	s.manifests[mid] = data
	big := make([]byte, m.Size)
	copy(big, a)
	copy(big[len(a)+hole:], b)
	cs = append(cs, Content{ID: mid, Kind: object.KindManifest, Size: m.Size})
	want[mid] = big
	require.NoError(t, w.Sync())
	s.packs.Discard(w)
	return s, cs, want
}

// TestPrefetchServes: a read that needs a content a running prefetch has
// read but not written yet is served from the prefetch's bytes, with no
// read of its own; one whose span is not read yet is not served.
func TestPrefetchServes(t *testing.T) {
	ctx := t.Context()
	src, cs, bytesOf := newPackSource(t)
	dir, err := cache.Open(ctx, filepath.Join(t.TempDir(), "cache"), -1, nil)
	require.NoError(t, err)
	t.Cleanup(dir.Close)
	fc := New(Config{Dir: dir, Src: src, Total: &account.Account{}})
	p := &prefetch{fc: fc, uses: map[object.ID][]chunkUse{}, byID: map[object.ID]*want{}, limits: spanLimits{maxSpan: 64 << 10, maxGap: 0, workers: 1}}
	p.missing(cs)
	require.NoError(t, p.resolve(ctx))
	p.cut()
	require.Greater(t, len(p.spans), 1, "the contents' chunks in one span: nothing left unread")
	fc.prefetches.add(p)
	defer fc.prefetches.remove(p)

	first := p.where[p.locs[0].id]
	p.read(ctx, first.s)
	close(first.s.ready)
	for _, s := range p.spans[1:] {
		close(s.ready) // unread: no bytes
		s.err = context.Canceled
	}
	reads := src.reads.Load()
	served := 0
	for _, c := range cs {
		r := p.where[c.ID]
		if c.Kind == object.KindChunk && r.s == first.s {
			require.True(t, fc.Serve(c.ID), "content %s of the span read", c.ID.Short())
			got, err := os.ReadFile(dir.Path(c.ID))
			require.NoError(t, err)
			require.True(t, bytes.Equal(bytesOf[c.ID], got))
			served++
		}
	}
	require.NotZero(t, served, "no content of one chunk in the first span")
	assert.False(t, fc.Serve(cs[len(cs)-1].ID), "the chunked content's chunks are not all read")
	assert.Equal(t, reads, src.reads.Load(), "a served read read the packs")
}
