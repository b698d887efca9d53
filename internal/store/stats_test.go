package store

import (
	"context"
	"testing"
)

func TestStatsAndCounters(t *testing.T) {
	eachBackend(t, func(t *testing.T, newDB func(testing.TB) *DB) {
		ctx := context.Background()
		db := newDB(t)
		before := db.Counters()
		big := randBytes(1, 4*testChunkSize)
		c1 := commitFiles(t, db, ZeroID, "one", map[string][]byte{"big": big, "s": []byte("small")})
		// The same content again under another name: logical bytes double,
		// stored bytes do not.
		c2 := commitFiles(t, db, c1, "two", map[string][]byte{"big": big, "copy": big, "s": []byte("small")})
		if _, err := db.CreateProject(ctx, "p", c2); err != nil {
			t.Fatal(err)
		}
		d := db.Counters().Sub(before)
		if d.Transactions < 3 || d.Statements < 6 || d.Rows == 0 || d.TxTime <= 0 {
			t.Fatalf("SQL counters did not move: %+v", d)
		}
		if d.ChunksWritten != 5 || d.ChunksReused != 9 || d.PackBytesWritten != int64(len(big))+5+5*recordHeader || d.PackSyncs != 1 /* the second batch added no chunk */ {
			t.Fatalf("pack counters: %+v", d)
		}
		st, err := db.Stats(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if st.Chunks.Count != 5 || st.Chunks.Bytes != int64(len(big))+5 || st.Manifests.Count != 1 || st.Trees.Count != 2 || st.Commits.Count != 2 {
			t.Fatalf("object counts: %+v", st)
		}
		if st.Projects != 1 || st.Branches != 1 || st.Layers != 1 || st.Workspaces != 0 || st.PackFiles != 1 {
			t.Fatalf("ref counts: %+v", st)
		}
		logical := int64(len(big)+5) + int64(2*len(big)+5)
		if st.LogicalBytes != logical || st.StoredBytes != int64(len(big))+5 {
			t.Fatalf("logical %d stored %d, want %d and %d", st.LogicalBytes, st.StoredBytes, logical, len(big)+5)
		}
		if want := float64(logical) / float64(len(big)+5); st.DedupRatio != want {
			t.Fatalf("dedup ratio %v, want %v", st.DedupRatio, want)
		}
		if st.DBBytes == 0 || st.PackBytes < st.StoredBytes {
			t.Fatalf("sizes: %+v", st)
		}
		r0 := db.Counters()
		readAll(t, db, c2)
		wantRead := int64(2 * len(big))
		if db.Shared() {
			wantRead = int64(len(big)) // the second copy's chunks come from the host's chunk cache
		}
		if d := db.Counters().Sub(r0); d.PackBytesRead < wantRead || d.ChunksRead == 0 || d.TreeCacheHits+d.TreeCacheMisses == 0 {
			t.Fatalf("read counters: %+v", d)
		}
	})
}
