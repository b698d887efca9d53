package store

import (
	"bytes"
	"database/sql"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
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
	ctx := t.Context()
	url := sharedURL(t)
	a, b := openHost(t, url), openHost(t, url)
	require.NotEmpty(t, a.Node(), "node name")
	require.NotEqual(t, a.Node(), b.Node(), "two hosts share a node name")
	files := map[string][]byte{"small": randBytes(1, 3000), "big": randBytes(2, 5*testChunkSize+99), "empty": nil}
	c := commitFiles(t, a, ZeroID, "from a", files)
	_, err := a.CreateProject(ctx, "p", c)
	require.NoError(t, err)

	head, err := b.ResolveRef(ctx, "p", DefaultBranch)
	require.NoError(t, err, "b resolves main")
	require.Equal(t, c, head, "b resolves main")
	got := readAll(t, b, head)
	for name, want := range files {
		require.True(t, bytes.Equal(got[name], want), "b reads %s wrong: %d bytes, want %d", name, len(got[name]), len(want))
	}
	// b fetched every chunk from the bucket once; a second read is served
	// by b's chunk cache.
	before := b.Counters()
	readAll(t, b, head)
	d := b.Counters().Sub(before)
	require.NotZero(t, d.ChunksRead, "chunks of the second read on b")
	require.Zero(t, d.PackBytesRead, "bytes of the second read on b from the bucket, not the cache")
	// A file materialized on b (FUSE passthrough's source) is whole.
	tr, _ := b.Tree(ctx, mustCommit(t, b, head).Root)
	big, _ := tr.Find("big")
	p, err := b.Materialize(ctx, big)
	require.NoError(t, err, "materialize on b")
	require.True(t, bytes.Equal(files["big"], fileBytes(t, p)), "materialize on b: the file differs")

	_, err = a.CreateWorkspace(ctx, Workspace{ID: "ws-a", Project: "p", Branch: DefaultBranch, Base: c, Head: c, State: "live"})
	require.NoError(t, err)
	ws, err := b.Workspaces(ctx)
	require.NoError(t, err)
	require.Empty(t, ws, "b lists a's workspaces")
	ws, err = a.Workspaces(ctx)
	require.NoError(t, err)
	require.Len(t, ws, 1, "a's workspaces")
	require.ErrorIs(t, b.DeleteBranch(ctx, "p", DefaultBranch), ErrBusy, "b deleted the branch a's workspace stands on")
	mustFsck(t, b)
}

// TestSharedStoreConcurrentCommits: two hosts publish different commits on
// one branch at once, many times: each time exactly one is created and the
// other gets head-moved, with its commit still stored for a retry.
func TestSharedStoreConcurrentCommits(t *testing.T) {
	ctx := t.Context()
	url := sharedURL(t)
	hosts := []*DB{openHost(t, url), openHost(t, url)}
	base := commitFiles(t, hosts[0], ZeroID, "base", map[string][]byte{"f": []byte("base")})
	_, err := hosts[0].CreateProject(ctx, "p", base)
	require.NoError(t, err)
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
		require.NoError(t, errs[0], "round %d", round)
		require.NoError(t, errs[1], "round %d", round)
		winner := -1
		for i, o := range outcomes {
			if o == PublishCreated {
				winner = i
			}
		}
		require.GreaterOrEqual(t, winner, 0, "round %d: outcomes %v, want one created", round, outcomes)
		require.Equal(t, PublishHeadMoved, outcomes[1-winner], "round %d: outcomes %v, want one head-moved", round, outcomes)
		for _, h := range hosts {
			head, err := h.ResolveRef(ctx, "p", DefaultBranch)
			require.NoError(t, err, "round %d", round)
			require.Equal(t, commits[winner], head, "round %d: head, want the winner's", round)
		}
		ok, err := hosts[winner].HasCommit(ctx, commits[1-winner])
		require.NoError(t, err, "round %d", round)
		require.True(t, ok, "round %d: the loser's commit is gone", round)
		// Back to base for the next round.
		o, err := hosts[0].SetBranchHead(ctx, "p", DefaultBranch, commits[winner], base)
		require.NoError(t, err, "round %d: reset", round)
		require.Equal(t, PublishCreated, o, "round %d: reset", round)
	}
}

// TestSharedStoreCorruptObject: a pack object changed in the bucket is
// caught by hash on read, named, never served, and fsck reports it.
func TestSharedStoreCorruptObject(t *testing.T) {
	ctx := t.Context()
	url := sharedURL(t)
	a := openHost(t, url)
	data := randBytes(7, 4000)
	c := commitFiles(t, a, ZeroID, "c", map[string][]byte{"f": data})
	e, _ := mustTree(t, a, c).Find("f")
	var num, off int64
	require.NoError(t, a.r.QueryRowContext(ctx, `SELECT pack, off FROM chunks WHERE id = $1`, e.Object[:]).Scan(&num, &off))
	key, err := a.bucket.Key(ctx, num)
	require.NoError(t, err)
	size, err := a.bucket.S3().Size(ctx, key)
	require.NoError(t, err)
	pack, err := a.bucket.S3().ReadRange(ctx, key, 0, size)
	require.NoError(t, err)
	pack[off+10] ^= 0x40
	require.NoError(t, a.bucket.S3().Put(ctx, key, bytes.NewReader(pack), size))

	b := openHost(t, url) // a host whose cache has never seen the chunk
	_, err = b.Chunk(ctx, e.Object)
	require.ErrorIs(t, err, ErrCorrupt, "read of a corrupted chunk")
	require.ErrorContains(t, err, e.Object.String(), "read of a corrupted chunk names it")
	require.ErrorContains(t, err, key, "read of a corrupted chunk names its pack")
	rep, err := b.Fsck(ctx, nil)
	require.NoError(t, err)
	require.Len(t, rep.Problems, 1, "fsck problems")
	require.Equal(t, "hash", rep.Problems[0].Kind, "fsck problem")
	require.Equal(t, e.Object, rep.Problems[0].Object, "fsck problem")
	// GC reads no chunk: the corrupted one, stored within the grace
	// period, is kept.
	st, err := b.GC(ctx, GCOptions{})
	require.NoError(t, err)
	require.Zero(t, st.DeadChunks, "GC within the grace period deleted chunks")
}

func mustTree(t *testing.T, db *DB, c ID) *Tree {
	t.Helper()
	tr, err := db.Tree(t.Context(), mustCommit(t, db, c).Root)
	require.NoError(t, err)
	return tr
}

// TestSharedStoreReconnects: when PostgreSQL ends every connection of the
// Store (a restart, an administrator), the next operations take new ones
// instead of failing: reads, a batch's dedup probes and a publish. (pgx's
// connections tell database/sql that they are dead when they are next
// taken from the pool; this holds the Store to using them that way.)
func TestSharedStoreReconnects(t *testing.T) {
	ctx := t.Context()
	url := sharedURL(t)
	db, admin := openHost(t, url), openHost(t, url)
	c := commitFiles(t, db, ZeroID, "c", map[string][]byte{"a": []byte("one")})
	_, err := db.CreateProject(ctx, "p", c)
	require.NoError(t, err)
	// Four connections in db's pool, idle.
	var conns []*sql.Conn
	for range 4 {
		conn, err := db.r.Conn(ctx)
		require.NoError(t, err)
		conns = append(conns, conn)
	}
	for _, conn := range conns {
		conn.Close()
	}
	var ended int
	require.NoError(t, admin.r.QueryRowContext(ctx, `SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity
		WHERE datname = current_database() AND pid <> pg_backend_pid()`).Scan(&ended))
	require.GreaterOrEqual(t, ended, 4, "connections ended, want at least db's 4")
	for i := range 6 {
		b, err := db.Branch(ctx, "p", DefaultBranch)
		require.NoError(t, err, "read %d after the connections ended", i)
		require.Equal(t, c, b.Head, "read %d after the connections ended", i)
	}
	c2 := commitFiles(t, db, c, "after", map[string][]byte{"a": []byte("two")})
	o, err := db.SetBranchHead(ctx, "p", DefaultBranch, c, c2)
	require.NoError(t, err, "publish after the connections ended")
	require.Equal(t, PublishCreated, o, "publish after the connections ended")
	require.Equal(t, "two", string(readAll(t, admin, c2)["a"]), "the other host's read")
}
