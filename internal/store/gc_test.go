package store

import (
	"context"
	"errors"
	"fmt"
	"os"
	"testing"
)

func TestGCReclaimsDeletedBranch(t *testing.T) {
	ctx := context.Background()
	db := newDB(t)
	keepFiles := map[string][]byte{"keep": randBytes(1, 3*testChunkSize+5), "small": []byte("small")}
	base := commitFiles(t, db, ZeroID, "base", keepFiles)
	if _, err := db.CreateProject(ctx, "p", base); err != nil {
		t.Fatal(err)
	}
	// A workspace's head and a second layer are roots too.
	wsFiles := map[string][]byte{"ws": randBytes(2, 200<<10)}
	wsHead := commitFiles(t, db, base, "ws", wsFiles)
	if _, err := db.CreateWorkspace(ctx, Workspace{ID: "w", Project: "p", Base: base, Head: wsHead}); err != nil {
		t.Fatal(err)
	}
	// The doomed branch: five commits of 10 MiB unique data each, sharing
	// "keep" with main.
	if _, err := db.CreateBranch(ctx, "p", "doomed", base); err != nil {
		t.Fatal(err)
	}
	head := base
	var doomed []ID
	for i := 0; i < 5; i++ {
		files := map[string][]byte{"keep": keepFiles["keep"], fmt.Sprint("big", i): randBytes(uint64(100+i), 10<<20)}
		c := commitFiles(t, db, head, fmt.Sprint("d", i), files)
		if r, err := db.SetBranchHead(ctx, "p", "doomed", head, c); err != nil || r != PublishCreated {
			t.Fatal(r, err)
		}
		doomed = append(doomed, c)
		head = c
	}
	// Materialize one doomed file and one kept file.
	tr, _ := db.Tree(ctx, mustCommit(t, db, head).Root)
	big, _ := tr.Find("big4")
	deadCache, err := db.Materialize(ctx, big)
	if err != nil {
		t.Fatal(err)
	}
	keepE, _ := tr.Find("keep")
	liveCache, err := db.Materialize(ctx, keepE)
	if err != nil {
		t.Fatal(err)
	}

	// Nothing is collectable while the branch exists.
	st, err := db.GC(ctx, GCOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if st.DeadObjects != 0 || st.DeadChunks != 0 || st.Reclaimed > 1<<20 {
		t.Fatalf("GC with every branch alive: %+v", st)
	}

	if err := db.DeleteBranch(ctx, "p", "doomed"); err != nil {
		t.Fatal(err)
	}
	packsBefore := packBytes(t, db)
	dry, err := db.GC(ctx, GCOptions{DryRun: true})
	if err != nil || dry.DeadChunkBytes < 50<<20 || packBytes(t, db) != packsBefore {
		t.Fatalf("dry run: %+v, %v", dry, err)
	}
	usageBefore, _ := diskUsage(db.PacksDir())
	st, err = db.GC(ctx, GCOptions{})
	if err != nil {
		t.Fatal(err)
	}
	usageAfter, _ := diskUsage(db.PacksDir())
	t.Logf("gc: %+v; packs on disk %d -> %d", st, usageBefore, usageAfter)
	if usageBefore-usageAfter < 45<<20 {
		t.Fatalf("packs shrank by %d bytes on disk, want >= 45 MiB", usageBefore-usageAfter)
	}
	if st.Reclaimed < 45<<20 || st.DeadObjects != 15 /* a commit, tree and manifest each */ {
		t.Fatalf("GC stats: %+v", st)
	}
	if _, err := os.Stat(deadCache); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("dead cache file still there: %v", err)
	}
	if _, err := os.Stat(liveCache); err != nil {
		t.Fatalf("live cache file removed: %v", err)
	}
	for _, c := range doomed {
		if ok, _ := db.HasCommit(ctx, c); ok {
			t.Fatalf("doomed commit %s survived", c.Short())
		}
	}
	for c, files := range map[ID]map[string][]byte{base: keepFiles, wsHead: wsFiles} {
		got := readAll(t, db, c)
		for n, d := range files {
			if string(got[n]) != string(d) {
				t.Fatalf("%s in %s reads back wrong after GC", n, c.Short())
			}
		}
	}
	mustFsck(t, db)
	// The store keeps working: new data goes to a pack and reads back.
	c := commitFiles(t, db, base, "after", map[string][]byte{"new": randBytes(9, 1<<20)})
	readAll(t, db, c)
	mustFsck(t, db)
	// A second GC finds nothing more to do but the unreferenced commit.
	st, err = db.GC(ctx, GCOptions{})
	if err != nil || st.DeadObjects != 3 || st.PacksRewritten > 1 {
		t.Fatalf("second GC: %+v, %v", st, err)
	}
	mustFsck(t, db)
}

func TestGCBusyWithUnflushedBatch(t *testing.T) {
	ctx := context.Background()
	db := newDB(t)
	b, _ := db.NewBatch(ctx)
	if _, err := b.PutChunk(Hash(KindChunk, []byte("x")), []byte("x")); err != nil {
		t.Fatal(err)
	}
	if _, err := db.GC(ctx, GCOptions{}); !errors.Is(err, ErrBusy) {
		t.Fatalf("GC during a batch = %v, want ErrBusy", err)
	}
	if err := b.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := db.GC(ctx, GCOptions{}); err != nil {
		t.Fatalf("GC after Flush: %v", err)
	}
}
