package store

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// prefetchContents stores n small contents and a chunked one with a hole
// and a chunk used twice (and by one of the small ones), and returns them
// with their bytes.
func prefetchContents(t *testing.T, db *DB, n int) ([]Content, map[ID][]byte) {
	t.Helper()
	ctx := t.Context()
	b, err := db.NewBatch(ctx)
	require.NoError(t, err)
	defer b.Abort()
	want := map[ID][]byte{}
	var cs []Content
	for i := range n {
		data := randBytes(uint64(1000+i), 100+i*37)
		e := putContent(t, b, "f", data)
		cs = append(cs, Content{ID: e.Object, Kind: e.ObjectKind, Size: e.Size})
		want[e.Object] = data
	}
	a, c := randBytes(7, testChunkSize), randBytes(8, 1234)
	aid, cid := Hash(KindChunk, a), Hash(KindChunk, c)
	for id, d := range map[ID][]byte{aid: a, cid: c} {
		_, err := b.PutChunk(id, d)
		require.NoError(t, err)
	}
	const hole = 1 << 20
	m := &Manifest{Size: int64(2*len(a) + hole + len(c) + hole), Extents: []Extent{
		{Chunk: aid, Length: int64(len(a))}, {Length: hole}, {Chunk: aid, Length: int64(len(a))},
		{Chunk: cid, Length: int64(len(c))}, {Length: hole},
	}}
	mid, err := b.PutManifest(m)
	require.NoError(t, err)
	require.NoError(t, b.Flush(ctx))
	big := make([]byte, m.Size)
	copy(big, a)
	copy(big[len(a)+hole:], a)
	copy(big[2*len(a)+hole:], c)
	cs = append(cs, Content{ID: mid, Kind: KindManifest, Size: m.Size}, Content{ID: cid, Kind: KindChunk, Size: int64(len(c))})
	want[mid], want[cid] = big, c
	return cs, want
}

// TestPrefetch puts a commit's contents in the cache in few reads, each
// verified, skips what is there, and leaves a corrupt chunk's contents
// out, saying so.
func TestPrefetch(t *testing.T) {
	eachBackend(t, func(t *testing.T, newDB func(testing.TB) *DB) {
		ctx := t.Context()
		db := newDB(t)
		cs, want := prefetchContents(t, db, 300)
		st, err := db.Prefetch(ctx, append(cs, cs[0])) // a content twice: once
		require.NoError(t, err)
		assert.Equal(t, len(cs)+1, st.Contents)
		assert.Equal(t, len(cs), st.Missing)
		assert.Equal(t, len(cs), st.Placed)
		assert.LessOrEqual(t, st.Reads, 4, "reads for %d contents", len(cs))
		for id, data := range want {
			got, err := os.ReadFile(db.CachePath(id))
			require.NoError(t, err, "content %s", id.Short())
			require.True(t, bytes.Equal(data, got), "content %s differs", id.Short())
		}

		st, err = db.Prefetch(ctx, cs)
		require.NoError(t, err)
		assert.Zero(t, st.Missing, "in the cache already")

		canceled, cancel := context.WithCancel(ctx)
		cancel()
		require.NoError(t, os.Remove(db.CachePath(cs[1].ID)))
		_, err = db.Prefetch(canceled, cs)
		assert.ErrorIs(t, err, context.Canceled)
	})
}

func TestPrefetchCorrupt(t *testing.T) {
	ctx := t.Context()
	db := newDB(t)
	cs, _ := prefetchContents(t, db, 3)
	victim := cs[1]
	flipPackByte(t, db, victim.ID, 5)
	st, err := db.Prefetch(ctx, cs)
	wantCorrupt(t, "Prefetch", err, victim.ID.String())
	assert.Equal(t, len(cs)-1, st.Placed)
	assert.NoFileExists(t, db.CachePath(victim.ID))
	assert.FileExists(t, db.CachePath(cs[0].ID))
}

// TestLoadTrees loads many trees in one statement per few hundred, each
// verified, into the tree cache.
func TestLoadTrees(t *testing.T) {
	eachBackend(t, func(t *testing.T, newDB func(testing.TB) *DB) {
		ctx := t.Context()
		db := newDB(t)
		b, err := db.NewBatch(ctx)
		require.NoError(t, err)
		var ids []ID
		for i := range 300 {
			id, err := b.PutTree(&Tree{Entries: []Entry{putContent(t, b, fmt.Sprintf("f%d", i), []byte{byte(i)})}})
			require.NoError(t, err)
			ids = append(ids, id)
		}
		require.NoError(t, b.Flush(ctx))
		b.Abort()
		// A fresh open: nothing cached.
		db2 := reopen(t, db)
		before := db2.Counters()
		require.NoError(t, db2.LoadTrees(ctx, append(ids, ZeroID)))
		mid := db2.Counters().Sub(before)
		assert.LessOrEqual(t, mid.Statements, int64(2), "statements for 300 trees")
		for i, id := range ids {
			tr, err := db2.Tree(ctx, id)
			require.NoError(t, err)
			require.Equal(t, fmt.Sprintf("f%d", i), tr.Entries[0].Name)
		}
		after := db2.Counters().Sub(before)
		assert.Equal(t, int64(300), after.TreeCacheHits)
	})
}

// reopen closes db and opens its directory again.
func reopen(t *testing.T, db *DB) *DB {
	t.Helper()
	require.NoError(t, db.Close())
	again, err := Open(t.Context(), db.Dir(), Options{})
	require.NoError(t, err)
	t.Cleanup(func() { again.Close() })
	return again
}
