package store

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

// openHost makes a host's directory of the shared Store at url.
func openHost(t *testing.T, url string) *DB {
	t.Helper()
	return initTestDB(t, Options{URL: url})
}

// TestSharedStoreTwoHosts: what one host commits, another (its own
// directory, connections and caches) reads at once; each host sees only
// its own workspace records, but a branch under any host's workspace
// cannot be deleted from another.
func TestSharedStoreTwoHosts(t *testing.T) {
	ctx := context.Background()
	url := sharedURL(t)
	a, b := openHost(t, url), openHost(t, url)
	if a.Node() == b.Node() || a.Node() == "" {
		t.Fatalf("two hosts share node name %q", a.Node())
	}
	files := map[string][]byte{"small": randBytes(1, 3000), "big": randBytes(2, 5*testChunkSize+99), "empty": nil}
	c := commitFiles(t, a, ZeroID, "from a", files)
	if _, err := a.CreateProject(ctx, "p", c); err != nil {
		t.Fatal(err)
	}

	head, err := b.ResolveRef(ctx, "p", DefaultBranch)
	if err != nil || head != c {
		t.Fatalf("b resolves main to %s, %v; want %s", head, err, c)
	}
	got := readAll(t, b, head)
	for name, want := range files {
		if !bytes.Equal(got[name], want) {
			t.Fatalf("b reads %s wrong: %d bytes, want %d", name, len(got[name]), len(want))
		}
	}
	// b fetched every chunk from the bucket once; a second read is served
	// by b's chunk cache.
	before := b.Counters()
	readAll(t, b, head)
	if d := b.Counters().Sub(before); d.PackBytesRead != 0 || d.ChunksRead == 0 {
		t.Fatalf("second read on b: %d bytes from the bucket, %d chunks; want all from the cache", d.PackBytesRead, d.ChunksRead)
	}
	// A file materialized on b (FUSE passthrough's source) is whole.
	tr, _ := b.Tree(ctx, mustCommit(t, b, head).Root)
	big, _ := tr.Find("big")
	p, err := b.Materialize(ctx, big)
	if err != nil || !bytes.Equal(fileBytes(t, p), files["big"]) {
		t.Fatalf("materialize on b: %v", err)
	}

	if _, err := a.CreateWorkspace(ctx, Workspace{ID: "ws-a", Project: "p", Branch: DefaultBranch, Base: c, Head: c, State: "live"}); err != nil {
		t.Fatal(err)
	}
	if ws, err := b.Workspaces(ctx); err != nil || len(ws) != 0 {
		t.Fatalf("b lists %d workspaces (%v), want none of a's", len(ws), err)
	}
	if ws, err := a.Workspaces(ctx); err != nil || len(ws) != 1 {
		t.Fatalf("a lists %d workspaces (%v), want its one", len(ws), err)
	}
	if err := b.DeleteBranch(ctx, "p", DefaultBranch); !errors.Is(err, ErrBusy) {
		t.Fatalf("b deleted the branch a's workspace stands on: %v", err)
	}
	mustFsck(t, b)
}

// TestSharedStoreConcurrentCommits: two hosts publish different commits on
// one branch at once, many times: each time exactly one is created and the
// other gets head-moved, with its commit still stored for a retry.
func TestSharedStoreConcurrentCommits(t *testing.T) {
	ctx := context.Background()
	url := sharedURL(t)
	hosts := []*DB{openHost(t, url), openHost(t, url)}
	base := commitFiles(t, hosts[0], ZeroID, "base", map[string][]byte{"f": []byte("base")})
	if _, err := hosts[0].CreateProject(ctx, "p", base); err != nil {
		t.Fatal(err)
	}
	for round := range 10 {
		var commits [2]ID
		for i, h := range hosts {
			commits[i] = commitFiles(t, h, base, "round", map[string][]byte{"f": randBytes(uint64(100*round+i), 200)})
		}
		var outcomes [2]Publish
		var errs [2]error
		var wg sync.WaitGroup
		start := make(chan struct{})
		for i, h := range hosts {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				outcomes[i], errs[i] = h.SetBranchHead(ctx, "p", DefaultBranch, base, commits[i])
			}()
		}
		close(start)
		wg.Wait()
		if errs[0] != nil || errs[1] != nil {
			t.Fatalf("round %d: %v, %v", round, errs[0], errs[1])
		}
		winner := -1
		for i, o := range outcomes {
			if o == PublishCreated {
				winner = i
			}
		}
		if winner < 0 || outcomes[1-winner] != PublishHeadMoved {
			t.Fatalf("round %d: outcomes %v, want one created and one head-moved", round, outcomes)
		}
		for _, h := range hosts {
			if head, err := h.ResolveRef(ctx, "p", DefaultBranch); err != nil || head != commits[winner] {
				t.Fatalf("round %d: head %s, %v; want the winner's %s", round, head, err, commits[winner])
			}
		}
		if ok, err := hosts[winner].HasCommit(ctx, commits[1-winner]); err != nil || !ok {
			t.Fatalf("round %d: the loser's commit is gone: %v", round, err)
		}
		// Back to base for the next round.
		if o, err := hosts[0].SetBranchHead(ctx, "p", DefaultBranch, commits[winner], base); err != nil || o != PublishCreated {
			t.Fatalf("round %d: reset: %v, %v", round, o, err)
		}
	}
}

// TestSharedStoreCorruptObject: a pack object changed in the bucket is
// caught by hash on read, named, never served, and fsck reports it.
func TestSharedStoreCorruptObject(t *testing.T) {
	ctx := context.Background()
	url := sharedURL(t)
	a := openHost(t, url)
	data := randBytes(7, 4000)
	c := commitFiles(t, a, ZeroID, "c", map[string][]byte{"f": data})
	e, _ := mustTree(t, a, c).Find("f")
	var num, off int64
	if err := a.r.QueryRowContext(ctx, `SELECT pack, off FROM chunks WHERE id = $1`, e.Object[:]).Scan(&num, &off); err != nil {
		t.Fatal(err)
	}
	key, err := a.bucket.packKey(ctx, num)
	if err != nil {
		t.Fatal(err)
	}
	size, err := a.bucket.bucket.Size(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	pack, err := a.bucket.bucket.ReadRange(ctx, key, 0, size)
	if err != nil {
		t.Fatal(err)
	}
	pack[off+10] ^= 0x40
	if err := a.bucket.bucket.Put(ctx, key, bytes.NewReader(pack), size); err != nil {
		t.Fatal(err)
	}

	b := openHost(t, url) // a host whose cache has never seen the chunk
	_, err = b.Chunk(ctx, e.Object)
	if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), e.Object.String()) || !strings.Contains(err.Error(), key) {
		t.Fatalf("read of a corrupted chunk: %v; want ErrCorrupt naming %s in %s", err, e.Object, key)
	}
	rep, err := b.Fsck(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Problems) != 1 || rep.Problems[0].Kind != "hash" || rep.Problems[0].Object != e.Object {
		t.Fatalf("fsck found %v; want one hash problem for %s", rep.Problems, e.Object)
	}
	if _, err := b.GC(ctx, GCOptions{}); !errors.Is(err, ErrUnsupported) {
		t.Fatalf("GC on a shared store: %v, want ErrUnsupported until leases exist", err)
	}
}

func mustTree(t *testing.T, db *DB, c ID) *Tree {
	t.Helper()
	tr, err := db.Tree(context.Background(), mustCommit(t, db, c).Root)
	if err != nil {
		t.Fatal(err)
	}
	return tr
}

// TestChunkCache: bounded by bytes, least recently used out first, a
// corrupted file never served, and the contents found again on reopen.
func TestChunkCache(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "chunks")
	c, err := openChunkCache(dir, 3000)
	if err != nil {
		t.Fatal(err)
	}
	var ids []ID
	for i := range 4 {
		data := randBytes(uint64(i), 1000)
		id := Hash(KindChunk, data)
		ids = append(ids, id)
		c.put(id, data)
		if i == 2 {
			c.get(ids[0]) // 0 is now more recent than 1
		}
	}
	if c.bytes() != 3000 {
		t.Fatalf("cache holds %d bytes, want 3000", c.bytes())
	}
	if _, ok := c.get(ids[1]); ok {
		t.Fatal("the least recently used chunk was not evicted")
	}
	for _, i := range []int{0, 2, 3} {
		if data, ok := c.get(ids[i]); !ok || Hash(KindChunk, data) != ids[i] {
			t.Fatalf("chunk %d missing or wrong", i)
		}
	}
	// Corrupt one file: it is dropped, not served.
	p := c.path(ids[2])
	b := fileBytes(t, p)
	b[5] ^= 1
	if err := os.WriteFile(p, b, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, ok := c.get(ids[2]); ok {
		t.Fatal("a corrupted cache file was served")
	}
	if _, err := os.Stat(p); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the corrupted file is still there: %v", err)
	}
	// Reopened, it finds what is there, within a smaller bound.
	c2, err := openChunkCache(dir, 1000)
	if err != nil {
		t.Fatal(err)
	}
	if c2.bytes() != 1000 {
		t.Fatalf("reopened cache holds %d bytes, want 1000", c2.bytes())
	}
	if c, _ := openChunkCache(dir, -1); c != nil {
		t.Fatal("a negative bound did not disable the cache")
	}
}

// TestSharedStoreReconnects: when PostgreSQL ends every connection of the
// Store (a restart, an administrator), the next operations take new ones
// instead of failing: reads, a batch's dedup probes and a publish. (pgx's
// connections tell database/sql that they are dead when they are next
// taken from the pool; this holds the Store to using them that way.)
func TestSharedStoreReconnects(t *testing.T) {
	ctx := context.Background()
	url := sharedURL(t)
	db, admin := openHost(t, url), openHost(t, url)
	c := commitFiles(t, db, ZeroID, "c", map[string][]byte{"a": []byte("one")})
	if _, err := db.CreateProject(ctx, "p", c); err != nil {
		t.Fatal(err)
	}
	// Four connections in db's pool, idle.
	var conns []*sql.Conn
	for range 4 {
		conn, err := db.r.Conn(ctx)
		if err != nil {
			t.Fatal(err)
		}
		conns = append(conns, conn)
	}
	for _, conn := range conns {
		conn.Close()
	}
	var ended int
	if err := admin.r.QueryRowContext(ctx, `SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity
		WHERE datname = current_database() AND pid <> pg_backend_pid()`).Scan(&ended); err != nil {
		t.Fatal(err)
	}
	if ended < 4 {
		t.Fatalf("ended %d connections, want at least db's 4", ended)
	}
	for i := range 6 {
		if b, err := db.Branch(ctx, "p", DefaultBranch); err != nil || b.Head != c {
			t.Fatalf("read %d after the connections ended: %v", i, err)
		}
	}
	c2 := commitFiles(t, db, c, "after", map[string][]byte{"a": []byte("two")})
	if o, err := db.SetBranchHead(ctx, "p", DefaultBranch, c, c2); err != nil || o != PublishCreated {
		t.Fatalf("publish after the connections ended: %v, %v", o, err)
	}
	if got := readAll(t, admin, c2); string(got["a"]) != "two" {
		t.Fatalf("the other host reads %q", got["a"])
	}
}

// TestDeadSpoolsRemoved: opening a shared Store's directory removes packs
// spooled by processes that are gone, and leaves those of live ones.
func TestDeadSpoolsRemoved(t *testing.T) {
	dir := t.TempDir()
	// A child that has exited: its pid is free (until reused, which a
	// fresh pid makes unlikely within the test).
	cmd := exec.Command("true")
	if err := cmd.Run(); err != nil {
		t.Fatal(err)
	}
	dead := filepath.Join(dir, fmt.Sprintf("%d-%s", cmd.Process.Pid, packName(7)))
	live := filepath.Join(dir, fmt.Sprintf("%d-%s", os.Getpid(), packName(8)))
	other := filepath.Join(dir, "notes")
	for _, p := range []string{dead, live, other} {
		if err := os.WriteFile(p, []byte("x"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if err := removeDeadSpools(dir); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(dead); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a dead process's spool is still there: %v", err)
	}
	for _, p := range []string{live, other} {
		if _, err := os.Stat(p); err != nil {
			t.Errorf("%s was removed: %v", p, err)
		}
	}
}
