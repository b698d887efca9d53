package store

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// ageRows makes every chunk and object row of the shared Store look stored
// d earlier: time passing, for the grace period.
func ageRows(t *testing.T, db *DB, d time.Duration) {
	t.Helper()
	for _, table := range []string{"chunks", "objects"} {
		_, err := db.w.ExecContext(t.Context(), `UPDATE `+table+` SET created = created - $1`, d.Nanoseconds())
		require.NoError(t, err)
	}
}

// TestSharedGCReclaims: on a shared Store GC deletes the rows, and the pack
// objects, of what nothing reaches, keeps what the branches reach, and
// spares what was stored within the grace period.
func TestSharedGCReclaims(t *testing.T) {
	ctx := t.Context()
	url := sharedURL(t)
	a, b := openHost(t, url), openHost(t, url)
	keep := commitFiles(t, a, ZeroID, "kept", map[string][]byte{"k": randBytes(1, 3*testChunkSize)})
	_, err := a.CreateProject(ctx, "p", keep)
	require.NoError(t, err)
	lost := commitFiles(t, a, ZeroID, "never published", map[string][]byte{"l": randBytes(2, 3*testChunkSize), "m": randBytes(3, 100)})

	// Within the grace period nothing is deleted.
	st, err := b.GC(ctx, GCOptions{})
	require.NoError(t, err)
	require.Zero(t, st.DeadObjects+st.DeadChunks+int64(st.PacksDeleted), "GC within the grace period deleted something: %+v", st)
	ok, err := b.HasCommit(ctx, lost)
	require.NoError(t, err)
	require.True(t, ok, "GC deleted a commit stored within the grace period")

	ageRows(t, a, DefaultGCGrace+time.Minute)
	st, err = b.GC(ctx, GCOptions{})
	require.NoError(t, err)
	// The commit, its tree, the manifest of l and the chunks of l and m.
	require.EqualValues(t, 3, st.DeadObjects, "objects deleted: %+v", st)
	require.EqualValues(t, 4, st.DeadChunks, "chunks deleted: %+v", st)
	require.Equal(t, 1, st.PacksDeleted, "packs deleted: %+v", st)
	require.Positive(t, st.Reclaimed, "bytes reclaimed: %+v", st)
	ok, err = a.HasCommit(ctx, lost)
	require.NoError(t, err)
	require.False(t, ok, "the unpublished commit survived GC")
	c := openHost(t, url) // nothing cached
	require.Equal(t, randBytes(1, 3*testChunkSize), readAll(t, c, keep)["k"], "the kept commit after GC")
	mustFsck(t, c)
}

// TestSharedGCSparesWhatABatchFound: a batch on one host finds an old chunk
// that nothing reaches (its dedup probe says it is stored), and a GC on
// another host runs before the batch publishes what names it: the probe
// made the chunk young again, so GC keeps it and the publish is whole.
// Without the batch, the same chunk is collected.
func TestSharedGCSparesWhatABatchFound(t *testing.T) {
	ctx := t.Context()
	url := sharedURL(t)
	a, b := openHost(t, url), openHost(t, url)
	x, y := randBytes(10, 5000), randBytes(11, 6000)
	xid, yid := Hash(KindChunk, x), Hash(KindChunk, y)
	commitFiles(t, a, ZeroID, "old", map[string][]byte{"x": x, "y": y}) // never published
	ageRows(t, a, DefaultGCGrace+time.Minute)

	bt, err := b.NewBatch(ctx)
	require.NoError(t, err)
	defer bt.Abort()
	added, err := bt.PutChunk(xid, x)
	require.NoError(t, err)
	require.False(t, added, "put x: want it found stored")

	st, err := a.GC(ctx, GCOptions{})
	require.NoError(t, err)
	require.EqualValues(t, 1, st.DeadChunks, "want y's chunk deleted, x kept: %+v", st)
	require.EqualValues(t, 2, st.DeadObjects, "want the old tree and commit deleted: %+v", st)
	_, err = a.Chunk(ctx, yid)
	require.ErrorIs(t, err, ErrNotFound, "y after GC")

	tr, err := bt.PutTree(&Tree{Entries: []Entry{{Name: "x", Type: TypeFile, Mode: 0o644, Size: int64(len(x)), Object: xid, ObjectKind: KindChunk}}})
	require.NoError(t, err)
	c, err := bt.PutCommit(&Commit{Root: tr, Message: "names x", TimeNs: 2})
	require.NoError(t, err)
	require.NoError(t, bt.Flush(ctx))
	_, err = b.CreateProject(ctx, "p", c)
	require.NoError(t, err)
	fresh := openHost(t, url)
	require.Equal(t, x, readAll(t, fresh, c)["x"], "the published commit's x")
	mustFsck(t, fresh)

	// The control: the same kind of chunk, found by no batch, is collected.
	z := randBytes(12, 7000)
	commitFiles(t, a, ZeroID, "old too", map[string][]byte{"z": z})
	ageRows(t, a, DefaultGCGrace+time.Minute)
	_, err = a.GC(ctx, GCOptions{})
	require.NoError(t, err)
	_, err = a.Chunk(ctx, Hash(KindChunk, z))
	require.ErrorIs(t, err, ErrNotFound, "z after GC")
}

// TestSharedGCHostDies: a workspace open on a host keeps its base alive
// while the host's lease lives; the host is killed, its lease expires, and
// GC on another host then reclaims the base.
func TestSharedGCHostDies(t *testing.T) {
	ctx := t.Context()
	url := sharedURL(t)
	b := openHost(t, url)
	base := commitFiles(t, b, ZeroID, "base", map[string][]byte{"f": randBytes(20, 2*testChunkSize)})
	_, err := b.CreateProject(ctx, "p", base)
	require.NoError(t, err)
	dir := t.TempDir()
	a, err := Init(ctx, dir, Options{URL: url})
	require.NoError(t, err)
	require.NoError(t, a.Close())
	node, err := os.ReadFile(filepath.Join(dir, nodeFile))
	require.NoError(t, err)
	aNode := strings.TrimSpace(string(node))

	// Host a, a process of its own: a 10 s lease (renewed every 2.5 s)
	// and a workspace on a commit no branch names.
	cmd := child(t, dir, "lease", "10s")
	stdin, err := cmd.StdinPipe()
	require.NoError(t, err)
	defer stdin.Close()
	ready, done := acks(t, cmd)
	require.NoError(t, cmd.Start())
	<-ready
	require.NoError(t, cmd.Process.Kill())
	ids := done()
	cmd.Wait()
	require.Len(t, ids, 1, "host a's acknowledged commits")
	c := ids[0]

	leaseLive := func() bool {
		ls, err := b.Leases(ctx)
		require.NoError(t, err)
		for _, l := range ls {
			if l.Node == aNode {
				return l.Live
			}
		}
		require.Failf(t, "no lease", "no lease of host %s in %+v", aNode, ls)
		return false
	}
	// Dead, but its lease has not expired yet, unless the machine was too
	// slow to get here in 10 s: then this part proves nothing, and says so.
	_, err = b.GC(ctx, GCOptions{Grace: -1})
	require.NoError(t, err)
	if leaseLive() {
		verifySeeded(t, b, c) // kept by the workspace of a host whose lease lives
	} else {
		t.Log("host a's lease expired before the first GC: not checked that a live lease keeps its workspace's base")
	}

	deadline := time.Now().Add(2 * time.Minute)
	for leaseLive() {
		require.False(t, time.Now().After(deadline), "host a's lease still live 2 minutes after it died")
		time.Sleep(200 * time.Millisecond)
	}
	st, err := b.GC(ctx, GCOptions{Grace: -1})
	require.NoError(t, err)
	ok, err := b.HasCommit(ctx, c)
	require.NoError(t, err)
	require.False(t, ok, "host a's workspace's base survived GC after its lease expired: %+v", st)
	require.True(t, st.DeadObjects > 0 && st.DeadChunks > 0 && st.PacksDeleted > 0, "GC after the lease expired: %+v", st)
	require.Equal(t, randBytes(20, 2*testChunkSize), readAll(t, b, base)["f"], "the branch's commit after GC")
	mustFsck(t, b)
}
