package store

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"layerfs.dev/layerfs/internal/loopfs"
	"layerfs.dev/layerfs/internal/testenv"
)

// cacheBytes reads the cache file of id, checking that it is read-only.
func cacheBytes(t *testing.T, db *DB, id ID) []byte {
	t.Helper()
	fi, err := os.Stat(db.CachePath(id))
	require.NoError(t, err, "content %s not in the cache", id.Short())
	require.Equal(t, os.FileMode(0o444), fi.Mode().Perm())
	b, err := os.ReadFile(db.CachePath(id))
	require.NoError(t, err)
	return b
}

// TestCacheFill puts contents in the cache as a capture would: a content
// of one chunk, and a chunked one written in order with a hole, which
// stays a hole; a content already cached is skipped; a Store that fills
// on first read only has no fill.
func TestCacheFill(t *testing.T) {
	ctx := t.Context()
	db := newDB(t)
	b, err := db.NewBatch(ctx)
	require.NoError(t, err)
	defer b.Abort()
	f := b.CacheFill()
	require.NotNil(t, f)

	small := randBytes(1, 5000)
	sid := Hash(KindChunk, small)
	f.Put(sid, small, true)

	head, tail := randBytes(2, 3<<20), randBytes(3, 1000) // a run longer than writeruns.Size
	const hole = 8 << 20
	w := f.Start()
	w.Write(head[:1<<20])
	w.Write(head[1<<20:])
	w.Skip(hole)
	w.Write(tail)
	big := ID{1, 2, 3} // the manifest's ID, as far as the cache knows
	size := int64(len(head) + hole + len(tail))
	w.Place(big, size)

	require.NoError(t, b.Flush(ctx))
	f.Wait()
	assert.Equal(t, small, cacheBytes(t, db, sid))
	got := cacheBytes(t, db, big)
	want := make([]byte, size)
	copy(want, head)
	copy(want[len(head)+hole:], tail)
	require.True(t, bytes.Equal(want, got), "the chunked content differs")
	var st unix.Stat_t
	require.NoError(t, unix.Stat(db.CachePath(big), &st))
	assert.Less(t, st.Blocks*512, size-hole/2, "the hole was written")

	f.Put(sid, small, false)
	f.Wait()
	assert.Equal(t, FillStats{Placed: 2, Bytes: int64(len(small)) + size, Skipped: 1}, f.Stats())

	none := initTestDB(t, Options{NoCacheFill: true})
	nb, err := none.NewBatch(ctx)
	require.NoError(t, err)
	defer nb.Abort()
	require.Nil(t, nb.CacheFill())
	nb.CacheFill().Put(sid, small, true) // a nil fill takes and drops
	nb.CacheFill().Start().Write(small)
	require.NoFileExists(t, none.CachePath(sid))
}

// TestCacheFillClone clones a captured file into the cache where the file
// system shares blocks (XFS), only while the file is unchanged, and stops
// trying where it does not.
func TestCacheFillClone(t *testing.T) {
	testenv.RequireRoot(t)
	ctx := t.Context()
	img, mnt := filepath.Join(t.TempDir(), "xfs.img"), t.TempDir()
	require.NoError(t, loopfs.Make(ctx, img, "xfs", 320<<20))
	require.NoError(t, loopfs.Mount(ctx, img, mnt, "xfs"))
	t.Cleanup(func() { assert.NoError(t, loopfs.Unmount(mnt)) })

	db, err := Init(ctx, filepath.Join(mnt, "store"), Options{})
	require.NoError(t, err)
	defer db.Close()
	data := randBytes(4, 1<<20)
	id := Hash(KindChunk, data)
	src := filepath.Join(mnt, "src")
	require.NoError(t, os.WriteFile(src, data, 0o644))
	fd, err := unix.Open(src, unix.O_RDONLY, 0)
	require.NoError(t, err)
	defer unix.Close(fd)

	f := db.NewCacheFill()
	require.True(t, f.Clone(id, fd, func(int) bool { return false }))
	f.Wait()
	require.NoFileExists(t, db.CachePath(id), "a changed file is kept")
	require.True(t, f.Clone(id, fd, func(int) bool { return true }))
	f.Wait()
	assert.Equal(t, data, cacheBytes(t, db, id))
	assert.Equal(t, FillStats{Placed: 1, Bytes: int64(len(data)), Cloned: 1}, f.Stats())

	// Another file system: no clone, and no more tries.
	other := filepath.Join(t.TempDir(), "src")
	require.NoError(t, os.WriteFile(other, data[:100], 0o644))
	ofd, err := unix.Open(other, unix.O_RDONLY, 0)
	require.NoError(t, err)
	defer unix.Close(ofd)
	oid := Hash(KindChunk, data[:100])
	f.Clone(oid, ofd, func(int) bool { return true })
	f.Wait()
	require.NoFileExists(t, db.CachePath(oid))
	require.False(t, f.CanClone(ofd))
	require.False(t, f.Clone(id, fd, func(int) bool { return true }), "tried again after a clone failed")
}

// TestFillServes: a read of a content a batch's fill holds (its writes
// wait for the flush) is served from the fill's bytes at once; a
// discarded fill places nothing.
func TestFillServes(t *testing.T) {
	ctx := t.Context()
	db := newDB(t)
	b, err := db.NewBatch(ctx)
	require.NoError(t, err)
	data := randBytes(9, 3000)
	e := putContent(t, b, "f", data)
	b.CacheFill().Put(e.Object, data, true)
	other := randBytes(10, 100)
	oid := Hash(KindChunk, other)
	b.CacheFill().Put(oid, other, true)
	require.NoError(t, db.WaitFill(ctx))
	require.NoFileExists(t, db.CachePath(e.Object), "written before the flush")

	before := db.Counters()
	p, err := db.Materialize(ctx, &e)
	require.NoError(t, err)
	assert.Zero(t, db.Counters().Sub(before).ChunksRead, "the read read a chunk of its own")
	assert.Equal(t, data, cacheBytes(t, db, e.Object))
	assert.Equal(t, db.CachePath(e.Object), p)

	b.Abort() // the fill's other content is dropped
	require.NoError(t, db.WaitFill(ctx))
	assert.NoFileExists(t, db.CachePath(oid))
	assert.Equal(t, int64(1), b.CacheFill().Stats().Dropped)
}

// TestFillBehind: the contents a capture's fill left out (all of them,
// where captures do not fill the cache) are fetched into the cache behind
// the capture once its batch is flushed; with NoPrefetch they are left
// to their first read.
func TestFillBehind(t *testing.T) {
	for _, noPrefetch := range []bool{false, true} {
		db := initTestDB(t, Options{NoCacheFill: true, NoPrefetch: noPrefetch})
		ctx := t.Context()
		b, err := db.NewBatch(ctx)
		require.NoError(t, err)
		small, big := randBytes(1, 3000), randBytes(2, 3*testChunkSize+5)
		es := []Entry{putContent(t, b, "big", big), putContent(t, b, "small", small)}
		root, err := b.PutTree(&Tree{Entries: es})
		require.NoError(t, err)
		b.FillBehind(root)
		require.NoError(t, b.Flush(ctx))
		b.Abort()
		if noPrefetch {
			require.NoError(t, db.Close()) // waits for any fetch behind
			for _, e := range es {
				assert.NoFileExists(t, db.CachePath(e.Object), "NoPrefetch: %s fetched", e.Name)
			}
			continue
		}
		for _, e := range es {
			require.Eventually(t, func() bool {
				_, err := os.Stat(db.CachePath(e.Object))
				return err == nil
			}, 10*time.Second, 5*time.Millisecond, "%s was not fetched behind the capture", e.Name)
			got, err := os.ReadFile(db.CachePath(e.Object))
			require.NoError(t, err)
			require.Equal(t, map[string][]byte{"big": big, "small": small}[e.Name], got, e.Name)
		}
	}
}
