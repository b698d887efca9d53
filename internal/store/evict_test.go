package store

import (
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestCacheBound: a cache over its bound loses the contents read least
// recently, down to package cache's target share of the bound, once enough
// was placed; an evicted content is materialized again on demand; Stats
// tells the cache's contents and bound (the default bound is package
// cache's TestDefaultBound).
func TestCacheBound(t *testing.T) {
	ctx := t.Context()
	const each, n = 16 << 10, 10
	db := initTestDB(t, Options{CacheBytes: 4 * each})
	b, err := db.NewBatch(ctx)
	require.NoError(t, err)
	var es []Entry
	for i := range n {
		es = append(es, putContent(t, b, "f", randBytes(uint64(100+i), each)))
	}
	require.NoError(t, b.Flush(ctx))
	b.Abort()

	base := time.Now().Add(-time.Hour)
	for i, e := range es {
		p, err := db.Materialize(ctx, &e)
		require.NoError(t, err)
		// Read in order: the first is the least recent.
		at := base.Add(time.Duration(i) * time.Minute)
		require.NoError(t, os.Chtimes(p, at, at))
		db.cache.WaitEvict() // a pass started by this placement
	}
	st, err := db.EvictCache(ctx)
	require.NoError(t, err)
	assert.LessOrEqual(t, st.Bytes, int64(4*each), "the cache exceeds its bound after the passes")
	for i, e := range es {
		_, err := os.Stat(db.CachePath(e.Object))
		if i >= n-3 {
			assert.NoError(t, err, "content %d, among the last read, was evicted", i)
		}
	}
	assert.NoFileExists(t, db.CachePath(es[0].Object), "the least recently read is kept")

	// Materialized again on demand.
	p, err := db.Materialize(ctx, &es[0])
	require.NoError(t, err)
	got, err := os.ReadFile(p)
	require.NoError(t, err)
	assert.Equal(t, randBytes(100, each), got)

	ss, err := db.Stats(ctx)
	require.NoError(t, err)
	assert.Equal(t, int64(4*each), ss.CacheLimit)
	assert.LessOrEqual(t, ss.CacheFiles, int64(5))
	assert.Positive(t, ss.CacheFiles)

	unbounded := initTestDB(t, Options{CacheBytes: -1})
	ss, err = unbounded.Stats(ctx)
	require.NoError(t, err)
	assert.Zero(t, ss.CacheLimit)
}
