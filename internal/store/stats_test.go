package store

import (
	"testing"

	"github.com/stretchr/testify/require"

	"layerfs.dev/layerfs/internal/store/pack"
)

func TestStatsAndCounters(t *testing.T) {
	eachBackend(t, func(t *testing.T, newDB func(testing.TB) *DB) {
		ctx := t.Context()
		db := newDB(t)
		before := db.Counters()
		big := randBytes(1, 4*testChunkSize)
		c1 := commitFiles(t, db, ZeroID, "one", map[string][]byte{"big": big, "s": []byte("small")})
		// The same content again under another name: logical bytes double,
		// stored bytes do not.
		c2 := commitFiles(t, db, c1, "two", map[string][]byte{"big": big, "copy": big, "s": []byte("small")})
		_, err := db.CreateProject(ctx, "p", c2)
		require.NoError(t, err)
		d := db.Counters().Sub(before)
		require.GreaterOrEqual(t, d.Transactions, int64(3), "SQL counters: %+v", d)
		require.GreaterOrEqual(t, d.Statements, int64(6), "SQL counters: %+v", d)
		require.NotZero(t, d.Rows, "SQL counters: %+v", d)
		require.Positive(t, d.TxTime, "SQL counters: %+v", d)
		require.EqualValues(t, 5, d.ChunksWritten, "pack counters: %+v", d)
		require.EqualValues(t, 9, d.ChunksReused, "pack counters: %+v", d)
		require.Equal(t, int64(len(big))+5+5*pack.HeaderSize, d.PackBytesWritten, "pack counters: %+v", d)
		require.EqualValues(t, 1, d.PackSyncs, "pack counters: %+v (the second batch added no chunk)", d)
		st, err := db.Stats(ctx)
		require.NoError(t, err)
		require.EqualValues(t, 5, st.Chunks.Count, "object counts: %+v", st)
		require.Equal(t, int64(len(big))+5, st.Chunks.Bytes, "object counts: %+v", st)
		require.EqualValues(t, 1, st.Manifests.Count, "object counts: %+v", st)
		require.EqualValues(t, 2, st.Trees.Count, "object counts: %+v", st)
		require.EqualValues(t, 2, st.Commits.Count, "object counts: %+v", st)
		require.EqualValues(t, 1, st.Projects, "ref counts: %+v", st)
		require.EqualValues(t, 1, st.Branches, "ref counts: %+v", st)
		require.EqualValues(t, 1, st.Layers, "ref counts: %+v", st)
		require.Zero(t, st.Workspaces, "ref counts: %+v", st)
		require.Equal(t, 1, st.PackFiles, "ref counts: %+v", st)
		logical := int64(len(big)+5) + int64(2*len(big)+5)
		require.Equal(t, logical, st.LogicalBytes, "logical bytes")
		require.Equal(t, int64(len(big))+5, st.StoredBytes, "stored bytes")
		require.Equal(t, float64(logical)/float64(len(big)+5), st.DedupRatio, "dedup ratio")
		require.NotZero(t, st.DBBytes, "sizes: %+v", st)
		require.GreaterOrEqual(t, st.PackBytes, st.StoredBytes, "sizes: %+v", st)
		r0 := db.Counters()
		readAll(t, db, c2)
		wantRead := int64(2 * len(big))
		if db.Shared() {
			wantRead = int64(len(big)) // the second copy's chunks come from the host's chunk cache
		}
		d = db.Counters().Sub(r0)
		require.GreaterOrEqual(t, d.PackBytesRead, wantRead, "read counters: %+v", d)
		require.NotZero(t, d.ChunksRead, "read counters: %+v", d)
		require.NotZero(t, d.TreeCacheHits+d.TreeCacheMisses, "read counters: %+v", d)
	})
}
