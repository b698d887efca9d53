package store

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// ageRows makes every chunk and object row of the shared Store look stored
// d earlier: time passing, for the grace period.
func ageRows(t *testing.T, db *DB, d time.Duration) {
	t.Helper()
	for _, table := range []string{"chunks", "objects"} {
		if _, err := db.w.ExecContext(context.Background(), `UPDATE `+table+` SET created = created - $1`, d.Nanoseconds()); err != nil {
			t.Fatal(err)
		}
	}
}

// TestSharedGCReclaims: on a shared Store GC deletes the rows, and the pack
// objects, of what nothing reaches, keeps what the branches reach, and
// spares what was stored within the grace period.
func TestSharedGCReclaims(t *testing.T) {
	ctx := context.Background()
	url := sharedURL(t)
	a, b := openHost(t, url), openHost(t, url)
	keep := commitFiles(t, a, ZeroID, "kept", map[string][]byte{"k": randBytes(1, 3*testChunkSize)})
	if _, err := a.CreateProject(ctx, "p", keep); err != nil {
		t.Fatal(err)
	}
	lost := commitFiles(t, a, ZeroID, "never published", map[string][]byte{"l": randBytes(2, 3*testChunkSize), "m": randBytes(3, 100)})

	// Within the grace period nothing is deleted.
	st, err := b.GC(ctx, GCOptions{})
	if err != nil || st.DeadObjects != 0 || st.DeadChunks != 0 || st.PacksDeleted != 0 {
		t.Fatalf("GC within the grace period: %+v, %v; want nothing deleted", st, err)
	}
	if ok, _ := b.HasCommit(ctx, lost); !ok {
		t.Fatal("GC deleted a commit stored within the grace period")
	}
	ageRows(t, a, DefaultGCGrace+time.Minute)
	st, err = b.GC(ctx, GCOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// The commit, its tree, the manifest of l and the chunks of l and m.
	if st.DeadObjects != 3 || st.DeadChunks != 4 || st.PacksDeleted != 1 || st.Reclaimed <= 0 {
		t.Fatalf("GC after the grace period: %+v; want 3 objects, 4 chunks and 1 pack deleted", st)
	}
	if ok, _ := a.HasCommit(ctx, lost); ok {
		t.Fatal("the unpublished commit survived GC")
	}
	c := openHost(t, url) // nothing cached
	if got := readAll(t, c, keep)["k"]; !bytes.Equal(got, randBytes(1, 3*testChunkSize)) {
		t.Fatal("the kept commit reads back wrong after GC")
	}
	mustFsck(t, c)
}

// TestSharedGCSparesWhatABatchFound: a batch on one host finds an old chunk
// that nothing reaches (its dedup probe says it is stored), and a GC on
// another host runs before the batch publishes what names it: the probe
// made the chunk young again, so GC keeps it and the publish is whole.
// Without the batch, the same chunk is collected.
func TestSharedGCSparesWhatABatchFound(t *testing.T) {
	ctx := context.Background()
	url := sharedURL(t)
	a, b := openHost(t, url), openHost(t, url)
	x, y := randBytes(10, 5000), randBytes(11, 6000)
	xid, yid := Hash(KindChunk, x), Hash(KindChunk, y)
	commitFiles(t, a, ZeroID, "old", map[string][]byte{"x": x, "y": y}) // never published
	ageRows(t, a, DefaultGCGrace+time.Minute)

	bt, err := b.NewBatch(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer bt.Abort()
	if added, err := bt.PutChunk(xid, x); err != nil || added {
		t.Fatalf("put x: added %v, %v; want it found stored", added, err)
	}
	st, err := a.GC(ctx, GCOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if st.DeadChunks != 1 || st.DeadObjects != 2 {
		t.Fatalf("GC: %+v; want y's chunk, the old tree and commit deleted, x kept", st)
	}
	if _, err := a.Chunk(ctx, yid); !errors.Is(err, ErrNotFound) {
		t.Fatalf("y after GC: %v, want ErrNotFound", err)
	}
	tr, err := bt.PutTree(&Tree{Entries: []Entry{{Name: "x", Type: TypeFile, Mode: 0o644, Size: int64(len(x)), Object: xid, ObjectKind: KindChunk}}})
	if err != nil {
		t.Fatal(err)
	}
	c, err := bt.PutCommit(&Commit{Root: tr, Message: "names x", TimeNs: 2})
	if err != nil {
		t.Fatal(err)
	}
	if err := bt.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := b.CreateProject(ctx, "p", c); err != nil {
		t.Fatal(err)
	}
	fresh := openHost(t, url)
	if got := readAll(t, fresh, c)["x"]; !bytes.Equal(got, x) {
		t.Fatal("the published commit's x reads back wrong")
	}
	mustFsck(t, fresh)

	// The control: the same kind of chunk, found by no batch, is collected.
	z := randBytes(12, 7000)
	commitFiles(t, a, ZeroID, "old too", map[string][]byte{"z": z})
	ageRows(t, a, DefaultGCGrace+time.Minute)
	if _, err := a.GC(ctx, GCOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Chunk(ctx, Hash(KindChunk, z)); !errors.Is(err, ErrNotFound) {
		t.Fatalf("z after GC: %v, want ErrNotFound", err)
	}
}

// TestSharedGCHostDies: a workspace open on a host keeps its base alive
// while the host's lease lives; the host is killed, its lease expires, and
// GC on another host then reclaims the base.
func TestSharedGCHostDies(t *testing.T) {
	ctx := context.Background()
	url := sharedURL(t)
	b := openHost(t, url)
	base := commitFiles(t, b, ZeroID, "base", map[string][]byte{"f": randBytes(20, 2*testChunkSize)})
	if _, err := b.CreateProject(ctx, "p", base); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	a, err := Init(ctx, dir, Options{URL: url})
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	node, err := os.ReadFile(filepath.Join(dir, nodeFile))
	if err != nil {
		t.Fatal(err)
	}
	aNode := strings.TrimSpace(string(node))

	// Host a, a process of its own: a 10 s lease (renewed every 2.5 s)
	// and a workspace on a commit no branch names.
	cmd := child(t, dir, "lease", "10s")
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	defer stdin.Close()
	ready, done := acks(t, cmd)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	<-ready
	if err := cmd.Process.Kill(); err != nil && !errors.Is(err, os.ErrProcessDone) {
		t.Fatal(err)
	}
	ids := done()
	cmd.Wait()
	if len(ids) != 1 {
		t.Fatalf("host a acknowledged %d commits, want 1", len(ids))
	}
	c := ids[0]
	// Dead, but its lease has not expired yet... unless the machine was
	// too slow to get here in 10 s: then this part proves nothing, and
	// says so.
	leaseLive := func() bool {
		ls, err := b.Leases(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, l := range ls {
			if l.Node == aNode {
				return l.Live
			}
		}
		t.Fatalf("no lease of host %s in %+v", aNode, ls)
		return false
	}
	if _, err := b.GC(ctx, GCOptions{Grace: -1}); err != nil {
		t.Fatal(err)
	}
	if leaseLive() {
		verifySeeded(t, b, c) // kept by the workspace of a host whose lease lives
	} else {
		t.Log("host a's lease expired before the first GC: not checked that a live lease keeps its workspace's base")
	}

	deadline := time.Now().Add(2 * time.Minute)
	for leaseLive() {
		if time.Now().After(deadline) {
			t.Fatal("host a's lease still live 2 minutes after it died")
		}
		time.Sleep(200 * time.Millisecond)
	}
	st, err := b.GC(ctx, GCOptions{Grace: -1})
	if err != nil {
		t.Fatal(err)
	}
	if ok, _ := b.HasCommit(ctx, c); ok || st.DeadObjects == 0 || st.DeadChunks == 0 || st.PacksDeleted == 0 {
		t.Fatalf("GC after host a's lease expired: %+v, commit kept %v; want its workspace's base reclaimed", st, ok)
	}
	if got := readAll(t, b, base)["f"]; !bytes.Equal(got, randBytes(20, 2*testChunkSize)) {
		t.Fatal("the branch's commit reads back wrong after GC")
	}
	mustFsck(t, b)
}
