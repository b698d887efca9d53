package store

import (
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"layerfs.dev/layerfs/internal/store/bucketpack"
	"layerfs.dev/layerfs/internal/testenv"
)

// TestSharedStoreHostKilledMidCommit: a host publishing on a branch of a
// shared Store is killed (SIGKILL) at random moments, while another host
// publishes on the same branch. No partial commit is ever visible (fsck
// finds nothing wrong, every acknowledged commit reads back whole and is
// on the branch's history), the other host goes on, and GC then removes
// the pack objects the killed host uploaded but never indexed.
func TestSharedStoreHostKilledMidCommit(t *testing.T) {
	ctx := t.Context()
	url := sharedURL(t)
	b := openHost(t, url)
	first, err := writeSeeded(ctx, b, ZeroID, 1)
	require.NoError(t, err)
	_, err = b.CreateProject(ctx, "p", first)
	require.NoError(t, err)
	dir := t.TempDir() // host a's directory
	a, err := Init(ctx, dir, Options{URL: url})
	require.NoError(t, err)
	require.NoError(t, a.Close())

	// Host b publishes on main all along.
	stop := make(chan struct{})
	var bAcked []ID
	var bErr error
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			var out strings.Builder
			if bErr = publishOne(ctx, b, &out, "main", uint64(1<<40+i)); bErr != nil {
				return
			}
			id, _ := ParseID(strings.TrimSpace(strings.TrimPrefix(out.String(), "ACK ")))
			bAcked = append(bAcked, id)
		}
	}()

	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 15))
	var aAcked []ID
	const kills = 8
	for k := range kills {
		cmd := child(t, dir, "crash", "")
		ready, first, done := acksFirst(t, cmd)
		require.NoError(t, cmd.Start())
		ids := crashChild(t, cmd, ready, first, k, 2*time.Minute, time.Duration(rng.IntN(300_000))*time.Microsecond, done)
		aAcked = append(aAcked, ids...)
		rep, err := b.Fsck(ctx, nil)
		require.NoError(t, err, "kill %d: fsck", k)
		require.NoError(t, rep.Err(), "kill %d: fsck", k)
	}
	close(stop)
	wg.Wait()
	require.NoError(t, bErr, "host b, publishing beside the killed host")
	require.NotEmpty(t, aAcked, "host a's acknowledged commits")
	require.NotEmpty(t, bAcked, "host b's acknowledged commits")
	onMain := map[ID]bool{}
	for c := mustBranch(t, b, "main"); !c.IsZero(); c = mustCommit(t, b, c).Parent() {
		onMain[c] = true
	}
	for _, c := range append(aAcked, bAcked...) {
		require.True(t, onMain[c], "acknowledged commit %s is not on main's history", c.Short())
		verifySeeded(t, b, c)
	}

	// Nothing runs now: GC with no grace removes what the kills left
	// (unpublished commits, and pack objects uploaded but never indexed),
	// and every pack object left is indexed.
	st, err := b.GC(ctx, GCOptions{Grace: -1})
	require.NoError(t, err)
	t.Logf("after %d kills: GC deleted %d objects, %d chunks, %d packs and %d orphan pack objects", kills, st.DeadObjects, st.DeadChunks, st.PacksDeleted, st.OrphanPacks)
	objs, err := b.bucket.S3().List(ctx, bucketpack.KeyPrefix)
	require.NoError(t, err)
	var indexed int
	require.NoError(t, b.r.QueryRowContext(ctx, `SELECT count(*) FROM packs`).Scan(&indexed))
	require.Len(t, objs, indexed, "pack objects in the bucket after GC, against those indexed")
	for _, c := range append(aAcked, bAcked...) {
		verifySeeded(t, b, c)
	}
	mustFsck(t, b)
}

// TestSharedStoreBucketAway: the S3 server stops for a while. A host reads
// what its chunk cache holds; a read of anything else and a commit fail
// after the bucket client's bounded retries, with an error that names the
// endpoint and is not a corruption; nothing of the failed commit is
// visible; once the server is back, the same commit succeeds, and
// everything reads back whole on a host that had never seen it.
func TestSharedStoreBucketAway(t *testing.T) {
	ctx := t.Context()
	s3 := testenv.NewStoppableS3(t)
	url := testenv.StoreURLWith(t, s3.S3Server)
	a, b := openHost(t, url), openHost(t, url)
	c1, err := writeSeeded(ctx, a, ZeroID, 1)
	require.NoError(t, err)
	_, err = a.CreateProject(ctx, "p", c1)
	require.NoError(t, err)
	verifySeeded(t, a, c1) // fills a's chunk cache

	s3.Stop()
	verifySeeded(t, a, c1) // from the cache
	e, _ := mustTree(t, b, c1).Find("b")
	m, err := b.Manifest(ctx, e.Object)
	require.NoError(t, err)
	_, err = b.Chunk(ctx, m.Extents[0].Chunk)
	require.ErrorContains(t, err, s3.Endpoint, "read from a host without the chunk while the bucket is away")
	require.NotErrorIs(t, err, ErrCorrupt, "a bucket away is not a corruption")
	c2, err := writeSeeded(ctx, a, c1, 2)
	require.ErrorContains(t, err, s3.Endpoint, "commit while the bucket is away: the upload's error")
	require.ErrorContains(t, err, "attempt", "commit while the bucket is away: after its retries")
	ok, err := b.HasCommit(ctx, c2)
	require.NoError(t, err)
	require.False(t, ok, "the failed commit is visible")

	s3.Start(t)
	c2again, err := writeSeeded(ctx, a, c1, 2)
	require.NoError(t, err, "commit once the bucket is back")
	o, err := a.SetBranchHead(ctx, "p", DefaultBranch, c1, c2again)
	require.NoError(t, err, "publish once the bucket is back")
	require.Equal(t, PublishCreated, o, "publish once the bucket is back")
	fresh := openHost(t, url)
	verifySeeded(t, fresh, c1)
	verifySeeded(t, fresh, c2again)
	mustFsck(t, fresh)
}
