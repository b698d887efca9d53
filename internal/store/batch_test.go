package store

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
)

func TestBatchDedupAndStats(t *testing.T) {
	eachBackend(t, func(t *testing.T, newDB func(testing.TB) *DB) {
		ctx := context.Background()
		db := newDB(t)
		b, err := db.NewBatch(ctx)
		if err != nil {
			t.Fatal(err)
		}
		data := randBytes(1, 1000)
		id := Hash(KindChunk, data)
		for i, want := range []bool{true, false} {
			added, err := b.PutChunk(id, data)
			if err != nil || added != want {
				t.Fatalf("put %d: added=%v err=%v, want %v", i, added, err, want)
			}
		}
		if _, err := db.Chunk(ctx, id); !errors.Is(err, ErrNotFound) {
			t.Fatalf("chunk visible before Flush: %v", err)
		}
		if err := b.Flush(ctx); err != nil {
			t.Fatal(err)
		}
		got, err := db.Chunk(ctx, id)
		if err != nil || string(got) != string(data) {
			t.Fatalf("Chunk after Flush: %v", err)
		}
		// A second batch reuses it and writes nothing.
		before := packBytes(t, db)
		b2, _ := db.NewBatch(ctx)
		if added, err := b2.PutChunk(id, data); added || err != nil {
			t.Fatalf("second batch: added=%v err=%v", added, err)
		}
		tr := &Tree{Entries: []Entry{{Name: "f", Type: TypeFile, Size: 1000, Object: id, ObjectKind: KindChunk}}}
		t1, _ := b2.PutTree(tr)
		t2, _ := b2.PutTree(tr)
		if t1 != t2 {
			t.Fatal("same tree, different ids")
		}
		if err := b2.Flush(ctx); err != nil {
			t.Fatal(err)
		}
		st := b2.Stats()
		want := BatchStats{ReusedChunks: 1, ReusedBytes: 1000, NewObjects: 1, ReusedObjects: 1, NewObjectBytes: int64(len(tr.Encode())), Flushes: 1}
		if st != want {
			t.Fatalf("Stats = %+v, want %+v", st, want)
		}
		if after := packBytes(t, db); after != before {
			t.Fatalf("dedup wrote %d pack bytes", after-before)
		}
		b2.Abort()
		b2.Abort()
		if _, err := b2.PutChunk(id, data); err == nil {
			t.Fatal("PutChunk after Abort succeeded")
		}
	})
}

func TestBatchAbortLeavesNothing(t *testing.T) {
	eachBackend(t, func(t *testing.T, newDB func(testing.TB) *DB) {
		ctx := context.Background()
		db := newDB(t)
		keep := commitFiles(t, db, ZeroID, "keep", map[string][]byte{"k": []byte("keep")})
		before := packBytes(t, db)
		b, _ := db.NewBatch(ctx)
		e := putContent(t, b, "big", randBytes(2, 300<<10))
		tid, err := b.PutTree(&Tree{Entries: []Entry{e}})
		if err != nil {
			t.Fatal(err)
		}
		b.Abort()
		if _, err := db.Tree(ctx, tid); !errors.Is(err, ErrNotFound) {
			t.Fatalf("aborted tree visible: %v", err)
		}
		if _, err := db.Manifest(ctx, e.Object); !errors.Is(err, ErrNotFound) {
			t.Fatalf("aborted manifest visible: %v", err)
		}
		if after := packBytes(t, db); after != before {
			t.Fatalf("abort left %d pack bytes", after-before)
		}
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
		ctx := context.Background()
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
		// And one batch shared by goroutines, as capture uses it.
		b, _ := db.NewBatch(ctx)
		var mu sync.Mutex
		var shared []ID
		for g := 0; g < 4; g++ {
			wg.Add(1)
			go func(g int) {
				defer wg.Done()
				for i := 0; i < 20; i++ {
					d := randBytes(uint64(50000+g*100+i), 20<<10)
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
			t.Fatal(err)
		}
		if err := b.Flush(ctx); err != nil {
			t.Fatal(err)
		}
		for w := range ids {
			if len(ids[w]) != commits {
				t.Fatalf("worker %d made %d commits", w, len(ids[w]))
			}
			for _, c := range ids[w] {
				verifySeeded(t, db, c)
			}
		}
		for _, id := range shared {
			if _, err := db.Chunk(ctx, id); err != nil {
				t.Fatal(err)
			}
		}
		if st := b.Stats(); st.NewChunks != 80 {
			t.Fatalf("shared batch stored %d chunks, want 80", st.NewChunks)
		}
		mustFsck(t, db)
	})
}

func TestPackRollover(t *testing.T) {
	ctx := context.Background()
	db, err := Init(ctx, t.TempDir(), Options{MaxPackSize: 256 << 10})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	files := map[string][]byte{}
	for i := 0; i < 12; i++ {
		files[fmt.Sprint("f", i)] = randBytes(uint64(i), 100<<10)
	}
	c := commitFiles(t, db, ZeroID, "big", files)
	got := readAll(t, db, c)
	for n, d := range files {
		if string(got[n]) != string(d) {
			t.Fatalf("%s reads back wrong", n)
		}
	}
	nums, _ := db.packs.listPacks()
	if len(nums) < 4 {
		t.Fatalf("%d packs for 1.2 MiB at 256 KiB each", len(nums))
	}
	for _, n := range nums {
		fi, _ := os.Stat(filepath.Join(db.PacksDir(), packName(n)))
		if fi.Size() > 256<<10+testChunkSize+recordHeader {
			t.Fatalf("pack %d is %d bytes", n, fi.Size())
		}
	}
	mustFsck(t, db)
}

func packBytes(t testing.TB, db *DB) int64 {
	t.Helper()
	if db.Shared() {
		st, err := db.Stats(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		return st.PackBytes // of the pack objects in the bucket
	}
	nums, err := db.packs.listPacks()
	if err != nil {
		t.Fatal(err)
	}
	var n int64
	for _, num := range nums {
		fi, err := os.Stat(filepath.Join(db.PacksDir(), packName(num)))
		if err != nil {
			t.Fatal(err)
		}
		n += fi.Size()
	}
	return n
}

func TestWorkspaces(t *testing.T) {
	eachBackend(t, func(t *testing.T, newDB func(testing.TB) *DB) {
		ctx := context.Background()
		db := newDB(t)
		c := commitFiles(t, db, ZeroID, "c", map[string][]byte{"a": []byte("a")})
		if _, err := db.CreateProject(ctx, "p", c); err != nil {
			t.Fatal(err)
		}
		w := Workspace{ID: "ws-1", Project: "p", Branch: "main", Base: c, Head: c, MountPath: "/mnt/x", UpperDir: "/u", State: "mounted", Options: []byte(`{"a":1}`)}
		got, err := db.CreateWorkspace(ctx, w)
		if err != nil || got.Created.IsZero() {
			t.Fatalf("CreateWorkspace = %+v, %v", got, err)
		}
		if _, err := db.CreateWorkspace(ctx, w); !errors.Is(err, ErrExists) {
			t.Fatalf("duplicate: %v", err)
		}
		for _, bad := range []Workspace{{ID: "Bad", Project: "p"}, {ID: "x", Project: "nope"}, {ID: "y", Project: "p", Base: Hash(KindCommit, nil)}} {
			if _, err := db.CreateWorkspace(ctx, bad); err == nil {
				t.Errorf("CreateWorkspace(%+v) succeeded", bad)
			}
		}
		w.State = "ended"
		w.Options = nil
		up, err := db.UpdateWorkspace(ctx, w)
		if err != nil || up.State != "ended" || up.Options != nil || !up.Created.Equal(got.Created) {
			t.Fatalf("UpdateWorkspace = %+v, %v", up, err)
		}
		r, err := db.Workspace(ctx, "ws-1")
		if err != nil || r.State != "ended" || r.Base != c || r.MountPath != "/mnt/x" {
			t.Fatalf("Workspace = %+v, %v", r, err)
		}
		all, err := db.Workspaces(ctx)
		if err != nil || len(all) != 1 {
			t.Fatalf("Workspaces = %+v, %v", all, err)
		}
		if err := db.DeleteWorkspace(ctx, "ws-1"); err != nil {
			t.Fatal(err)
		}
		if _, err := db.Workspace(ctx, "ws-1"); !errors.Is(err, ErrNotFound) {
			t.Fatalf("deleted workspace: %v", err)
		}
		if err := db.DeleteWorkspace(ctx, "ws-1"); !errors.Is(err, ErrNotFound) {
			t.Fatalf("second delete: %v", err)
		}
		if _, err := db.UpdateWorkspace(ctx, w); !errors.Is(err, ErrNotFound) {
			t.Fatalf("update of deleted: %v", err)
		}
	})
}

// Both pack write paths (O_DIRECT and buffered) append, roll back, read
// and reopen alike.
func TestPackWritePaths(t *testing.T) {
	for _, buffered := range []bool{false, true} {
		t.Run(fmt.Sprint("buffered=", buffered), func(t *testing.T) {
			ctx := context.Background()
			dir := t.TempDir()
			opts := Options{BufferedPacks: buffered, MaxPackSize: 1 << 20}
			db, err := Init(ctx, dir, opts)
			if err != nil {
				t.Fatal(err)
			}
			var commits []ID
			for i := 0; i < 6; i++ {
				c, err := writeSeeded(ctx, db, ZeroID, uint64(i))
				if err != nil {
					t.Fatal(err)
				}
				commits = append(commits, c)
				// An aborted batch between flushes, ending mid-block.
				b, _ := db.NewBatch(ctx)
				putContent(t, b, "x", randBytes(uint64(100+i), 5000+i*777))
				b.Abort()
			}
			nums, _ := db.packs.listPacks()
			db.packs.mu.Lock()
			for _, w := range db.packs.idle {
				if (w.d == nil) != buffered {
					t.Errorf("pack %d: direct=%v, want %v", w.num, w.d != nil, !buffered)
				}
			}
			db.packs.mu.Unlock()
			if err := db.Close(); err != nil {
				t.Fatal(err)
			}
			// Reopen and append to the same packs from their ends.
			db, err = Open(ctx, dir, opts)
			if err != nil {
				t.Fatal(err)
			}
			defer db.Close()
			for i := 6; i < 10; i++ {
				c, err := writeSeeded(ctx, db, ZeroID, uint64(i))
				if err != nil {
					t.Fatal(err)
				}
				commits = append(commits, c)
			}
			for _, c := range commits {
				verifySeeded(t, db, c)
			}
			after, _ := db.packs.listPacks()
			if len(after) < len(nums) || len(after) < 2 {
				t.Errorf("packs %v then %v", nums, after)
			}
			rep := mustFsck(t, db)
			// Live payload plus headers fill the packs exactly: aborted
			// appends and direct-write padding left nothing behind.
			var want int64
			packs, _ := db.livePacks(ctx)
			for _, p := range packs {
				want += p.bytes + int64(len(packMagic))
			}
			if got := packBytes(t, db); got != want {
				t.Errorf("packs hold %d bytes, live records %d (fsck checked %d chunks)", got, want, rep.Chunks)
			}
		})
	}
}
