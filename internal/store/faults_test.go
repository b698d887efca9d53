package store

import (
	"context"
	"errors"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"

	"layerfs.dev/layerfs/internal/testenv"
)

// TestSharedStoreHostKilledMidCommit: a host publishing on a branch of a
// shared Store is killed (SIGKILL) at random moments, while another host
// publishes on the same branch. No partial commit is ever visible (fsck
// finds nothing wrong, every acknowledged commit reads back whole and is
// on the branch's history), the other host goes on, and GC then removes
// the pack objects the killed host uploaded but never indexed.
func TestSharedStoreHostKilledMidCommit(t *testing.T) {
	ctx := context.Background()
	url := sharedURL(t)
	b := openHost(t, url)
	first, err := writeSeeded(ctx, b, ZeroID, 1)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.CreateProject(ctx, "p", first); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir() // host a's directory
	a, err := Init(ctx, dir, Options{URL: url})
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}

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
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		ids := crashChild(t, cmd, ready, first, k, 2*time.Minute, time.Duration(rng.IntN(300_000))*time.Microsecond, done)
		aAcked = append(aAcked, ids...)
		rep, err := b.Fsck(ctx, nil)
		if err != nil || !rep.OK() {
			t.Fatalf("kill %d: fsck: %v %v", k, err, rep.Err())
		}
	}
	close(stop)
	wg.Wait()
	if bErr != nil {
		t.Fatalf("host b, publishing beside the killed host: %v", bErr)
	}
	if len(bAcked) == 0 || len(aAcked) == 0 {
		t.Fatalf("acknowledged: host a %d, host b %d; want both to have published", len(aAcked), len(bAcked))
	}
	onMain := map[ID]bool{}
	for c := mustBranch(t, b, "main"); !c.IsZero(); c = mustCommit(t, b, c).Parent {
		onMain[c] = true
	}
	for _, c := range append(aAcked, bAcked...) {
		if !onMain[c] {
			t.Fatalf("acknowledged commit %s is not on main's history", c.Short())
		}
		verifySeeded(t, b, c)
	}

	// Nothing runs now: GC with no grace removes what the kills left
	// (unpublished commits, and pack objects uploaded but never indexed),
	// and every pack object left is indexed.
	st, err := b.GC(ctx, GCOptions{Grace: -1})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("after %d kills: GC deleted %d objects, %d chunks, %d packs and %d orphan pack objects", kills, st.DeadObjects, st.DeadChunks, st.PacksDeleted, st.OrphanPacks)
	objs, err := b.bucket.bucket.List(ctx, packKeyPrefix)
	if err != nil {
		t.Fatal(err)
	}
	var indexed int
	if err := b.r.QueryRowContext(ctx, `SELECT count(*) FROM packs`).Scan(&indexed); err != nil {
		t.Fatal(err)
	}
	if len(objs) != indexed {
		t.Fatalf("after GC: %d pack objects in the bucket, %d indexed", len(objs), indexed)
	}
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
	ctx := context.Background()
	s3 := testenv.NewStoppableS3(t)
	url := testenv.StoreURLWith(t, s3.S3Server)
	a, b := openHost(t, url), openHost(t, url)
	c1, err := writeSeeded(ctx, a, ZeroID, 1)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.CreateProject(ctx, "p", c1); err != nil {
		t.Fatal(err)
	}
	verifySeeded(t, a, c1) // fills a's chunk cache

	s3.Stop()
	verifySeeded(t, a, c1) // from the cache
	e, _ := mustTree(t, b, c1).Find("b")
	m, err := b.Manifest(ctx, e.Object)
	if err != nil {
		t.Fatal(err)
	}
	_, err = b.Chunk(ctx, m.Extents[0].Chunk)
	if err == nil || errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), s3.Endpoint) {
		t.Fatalf("read from a host without the chunk while the bucket is away: %v; want an error naming %s, not a corruption", err, s3.Endpoint)
	}
	c2, err := writeSeeded(ctx, a, c1, 2)
	if err == nil || !strings.Contains(err.Error(), s3.Endpoint) || !strings.Contains(err.Error(), "attempt") {
		t.Fatalf("commit while the bucket is away: %v; want the upload's error after its retries, naming %s", err, s3.Endpoint)
	}
	if ok, err := b.HasCommit(ctx, c2); ok || err != nil {
		t.Fatalf("the failed commit is visible: %v, %v", ok, err)
	}

	s3.Start(t)
	c2again, err := writeSeeded(ctx, a, c1, 2)
	if err != nil {
		t.Fatalf("commit once the bucket is back: %v", err)
	}
	if o, err := a.SetBranchHead(ctx, "p", DefaultBranch, c1, c2again); err != nil || o != PublishCreated {
		t.Fatalf("publish once the bucket is back: %v, %v", o, err)
	}
	fresh := openHost(t, url)
	verifySeeded(t, fresh, c1)
	verifySeeded(t, fresh, c2again)
	mustFsck(t, fresh)
}
