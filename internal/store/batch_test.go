package store

import (
	"fmt"
	"os"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"layerfs.dev/layerfs/internal/store/pack"
)

func TestBatchDedupAndStats(t *testing.T) {
	eachBackend(t, func(t *testing.T, newDB func(testing.TB) *DB) {
		ctx := t.Context()
		db := newDB(t)
		b, err := db.NewBatch(ctx)
		require.NoError(t, err)
		data := randBytes(1, 1000)
		id := Hash(KindChunk, data)
		for i, want := range []bool{true, false} {
			added, err := b.PutChunk(id, data)
			require.NoError(t, err, "put %d", i)
			require.Equal(t, want, added, "put %d: added", i)
		}
		_, err = db.Chunk(ctx, id)
		require.ErrorIs(t, err, ErrNotFound, "chunk visible before Flush")
		require.NoError(t, b.Flush(ctx))
		got, err := db.Chunk(ctx, id)
		require.NoError(t, err, "Chunk after Flush")
		require.Equal(t, data, got, "Chunk after Flush")
		// A second batch reuses it and writes nothing.
		before := packBytes(t, db)
		b2, _ := db.NewBatch(ctx)
		added, err := b2.PutChunk(id, data)
		require.NoError(t, err, "second batch")
		require.False(t, added, "second batch added the chunk again")
		tr := &Tree{Entries: []Entry{{Name: "f", Type: TypeFile, Size: 1000, Object: id, ObjectKind: KindChunk}}}
		t1, _ := b2.PutTree(tr)
		t2, _ := b2.PutTree(tr)
		require.Equal(t, t1, t2, "same tree, different ids")
		require.NoError(t, b2.Flush(ctx))
		st := b2.Stats()
		want := BatchStats{ReusedChunks: 1, ReusedBytes: 1000, NewObjects: 1, ReusedObjects: 1, NewObjectBytes: int64(len(tr.Encode())), Flushes: 1}
		require.Equal(t, want, st, "Stats")
		require.Equal(t, before, packBytes(t, db), "pack bytes after a batch of reused data")
		b2.Abort()
		b2.Abort()
		_, err = b2.PutChunk(id, data)
		require.Error(t, err, "PutChunk after Abort succeeded")
	})
}

func TestBatchAbortLeavesNothing(t *testing.T) {
	eachBackend(t, func(t *testing.T, newDB func(testing.TB) *DB) {
		ctx := t.Context()
		db := newDB(t)
		keep := commitFiles(t, db, ZeroID, "keep", map[string][]byte{"k": []byte("keep")})
		before := packBytes(t, db)
		b, _ := db.NewBatch(ctx)
		e := putContent(t, b, "big", randBytes(2, 300<<10))
		tid, err := b.PutTree(&Tree{Entries: []Entry{e}})
		require.NoError(t, err)
		b.Abort()
		_, err = db.Tree(ctx, tid)
		require.ErrorIs(t, err, ErrNotFound, "aborted tree visible")
		_, err = db.Manifest(ctx, e.Object)
		require.ErrorIs(t, err, ErrNotFound, "aborted manifest visible")
		require.Equal(t, before, packBytes(t, db), "pack bytes after an abort")
		readAll(t, db, keep)
		mustFsck(t, db)
		// The pack is reused by the next batch after the rollback.
		c := commitFiles(t, db, keep, "after", map[string][]byte{"x": randBytes(3, 100<<10)})
		readAll(t, db, c)
		mustFsck(t, db)
	})
}

func TestBatchConcurrentGoroutines(t *testing.T) {
	eachBackend(t, func(t *testing.T, newDB func(testing.TB) *DB) {
		ctx := t.Context()
		db := newDB(t)
		const workers, commits = 4, 10
		var wg sync.WaitGroup
		ids := make([][]ID, workers)
		errs := make(chan error, workers+4)
		for w := 0; w < workers; w++ {
			wg.Add(1)
			go func(w int) {
				defer wg.Done()
				for i := 0; i < commits; i++ {
					c, err := writeSeeded(ctx, db, ZeroID, uint64(w*1000+i))
					if err != nil {
						errs <- err
						return
					}
					ids[w] = append(ids[w], c)
				}
			}(w)
		}
		// And one batch shared by goroutines, as capture uses it: each
		// puts 20 chunks of its own and the same 10 as the others, which
		// the batch stores once however the probes interleave.
		b, _ := db.NewBatch(ctx)
		var mu sync.Mutex
		var shared []ID
		for g := 0; g < 4; g++ {
			wg.Add(1)
			go func(g int) {
				defer wg.Done()
				for i := 0; i < 30; i++ {
					seed := uint64(50000 + g*100 + i)
					if i >= 20 {
						seed = uint64(60000 + i)
					}
					d := randBytes(seed, 20<<10)
					id := Hash(KindChunk, d)
					if _, err := b.PutChunk(id, d); err != nil {
						errs <- err
						return
					}
					mu.Lock()
					shared = append(shared, id)
					mu.Unlock()
				}
			}(g)
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			require.NoError(t, err)
		}
		require.NoError(t, b.Flush(ctx))
		for w := range ids {
			require.Len(t, ids[w], commits, "worker %d's commits", w)
			for _, c := range ids[w] {
				verifySeeded(t, db, c)
			}
		}
		for _, id := range shared {
			_, err := db.Chunk(ctx, id)
			require.NoError(t, err)
		}
		require.EqualValues(t, 90, b.Stats().NewChunks, "chunks the shared batch stored")
		require.EqualValues(t, 30, b.Stats().ReusedChunks, "chunks the shared batch found put")
		mustFsck(t, db)
	})
}

func TestPackRollover(t *testing.T) {
	ctx := t.Context()
	db, err := Init(ctx, t.TempDir(), Options{MaxPackSize: 256 << 10})
	require.NoError(t, err)
	defer db.Close()
	files := map[string][]byte{}
	for i := 0; i < 12; i++ {
		files[fmt.Sprint("f", i)] = randBytes(uint64(i), 100<<10)
	}
	c := commitFiles(t, db, ZeroID, "big", files)
	got := readAll(t, db, c)
	for n, d := range files {
		require.Equal(t, d, got[n], "%s reads back wrong", n)
	}
	nums, err := db.packs.List()
	require.NoError(t, err)
	require.GreaterOrEqual(t, len(nums), 4, "packs for 1.2 MiB at 256 KiB each")
	for _, n := range nums {
		fi, err := os.Stat(db.packs.Path(n))
		require.NoError(t, err)
		require.LessOrEqual(t, fi.Size(), int64(256<<10+testChunkSize+pack.HeaderSize), "pack %d's size", n)
	}
	mustFsck(t, db)
}

func packBytes(t testing.TB, db *DB) int64 {
	t.Helper()
	if db.Shared() {
		st, err := db.Stats(t.Context())
		require.NoError(t, err)
		return st.PackBytes // of the pack objects in the bucket
	}
	nums, err := db.packs.List()
	require.NoError(t, err)
	var n int64
	for _, num := range nums {
		fi, err := os.Stat(db.packs.Path(num))
		require.NoError(t, err)
		n += fi.Size()
	}
	return n
}

func TestWorkspaces(t *testing.T) {
	eachBackend(t, func(t *testing.T, newDB func(testing.TB) *DB) {
		ctx := t.Context()
		db := newDB(t)
		c := commitFiles(t, db, ZeroID, "c", map[string][]byte{"a": []byte("a")})
		_, err := db.CreateProject(ctx, "p", c)
		require.NoError(t, err)
		w := Workspace{ID: "ws-1", Project: "p", Branch: "main", Base: c, Head: c, MountPath: "/mnt/x", UpperDir: "/u", State: "mounted", Options: []byte(`{"a":1}`)}
		got, err := db.CreateWorkspace(ctx, w)
		require.NoError(t, err, "CreateWorkspace")
		require.False(t, got.Created.IsZero(), "CreateWorkspace left Created zero")
		_, err = db.CreateWorkspace(ctx, w)
		require.ErrorIs(t, err, ErrExists, "duplicate")
		for _, bad := range []Workspace{{ID: "Bad", Project: "p"}, {ID: "x", Project: "nope"}, {ID: "y", Project: "p", Base: Hash(KindCommit, nil)}} {
			_, err := db.CreateWorkspace(ctx, bad)
			assert.Error(t, err, "CreateWorkspace(%+v) succeeded", bad)
		}
		w.State = "ended"
		w.Options = nil
		up, err := db.UpdateWorkspace(ctx, w)
		require.NoError(t, err, "UpdateWorkspace")
		require.Equal(t, "ended", up.State, "UpdateWorkspace")
		require.Nil(t, up.Options, "UpdateWorkspace")
		require.True(t, up.Created.Equal(got.Created), "UpdateWorkspace moved Created from %v to %v", got.Created, up.Created)
		r, err := db.Workspace(ctx, "ws-1")
		require.NoError(t, err, "Workspace")
		require.Equal(t, "ended", r.State, "Workspace")
		require.Equal(t, c, r.Base, "Workspace")
		require.Equal(t, "/mnt/x", r.MountPath, "Workspace")
		all, err := db.Workspaces(ctx)
		require.NoError(t, err, "Workspaces")
		require.Len(t, all, 1, "Workspaces")
		require.NoError(t, db.DeleteWorkspace(ctx, "ws-1"))
		_, err = db.Workspace(ctx, "ws-1")
		require.ErrorIs(t, err, ErrNotFound, "deleted workspace")
		require.ErrorIs(t, db.DeleteWorkspace(ctx, "ws-1"), ErrNotFound, "second delete")
		_, err = db.UpdateWorkspace(ctx, w)
		require.ErrorIs(t, err, ErrNotFound, "update of deleted")
	})
}

// Both pack write paths (O_DIRECT and buffered) append, roll back, read
// and reopen alike.
func TestPackWritePaths(t *testing.T) {
	for _, buffered := range []bool{false, true} {
		t.Run(fmt.Sprint("buffered=", buffered), func(t *testing.T) {
			ctx := t.Context()
			dir := t.TempDir()
			opts := Options{BufferedPacks: buffered, MaxPackSize: 1 << 20}
			db, err := Init(ctx, dir, opts)
			require.NoError(t, err)
			var commits []ID
			for i := 0; i < 6; i++ {
				c, err := writeSeeded(ctx, db, ZeroID, uint64(i))
				require.NoError(t, err)
				commits = append(commits, c)
				// An aborted batch between flushes, ending mid-block.
				b, _ := db.NewBatch(ctx)
				putContent(t, b, "x", randBytes(uint64(100+i), 5000+i*777))
				b.Abort()
			}
			nums, _ := db.packs.List()
			for _, w := range db.packs.Idle() {
				assert.Equal(t, !buffered, w.Direct(), "pack %d written directly", w.Number())
			}
			require.NoError(t, db.Close())
			// Reopen and append to the same packs from their ends.
			db, err = Open(ctx, dir, opts)
			require.NoError(t, err)
			defer db.Close()
			for i := 6; i < 10; i++ {
				c, err := writeSeeded(ctx, db, ZeroID, uint64(i))
				require.NoError(t, err)
				commits = append(commits, c)
			}
			for _, c := range commits {
				verifySeeded(t, db, c)
			}
			after, _ := db.packs.List()
			assert.GreaterOrEqual(t, len(after), max(len(nums), 2), "packs %v then %v", nums, after)
			rep := mustFsck(t, db)
			// Live payload plus headers fill the packs exactly: aborted
			// appends and direct-write padding left nothing behind.
			var want int64
			for _, n := range livePackBytes(t, db) {
				want += n + int64(len(pack.Magic))
			}
			assert.Equal(t, want, packBytes(t, db), "bytes in the packs against live records (fsck checked %d chunks)", rep.Chunks)
		})
	}
}
