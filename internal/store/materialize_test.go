package store

import (
	"bytes"
	"os"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

func TestMaterialize(t *testing.T) {
	eachBackend(t, func(t *testing.T, newDB func(testing.TB) *DB) {
		ctx := t.Context()
		db := newDB(t)
		b, _ := db.NewBatch(ctx)
		small := putContent(t, b, "small", []byte("hello"))
		empty := putContent(t, b, "empty", nil)
		// A sparse 100 MiB file: data, a long hole, data, and a trailing hole.
		head, tail := randBytes(7, testChunkSize), randBytes(8, 1000)
		hid, tid := Hash(KindChunk, head), Hash(KindChunk, tail)
		for id, d := range map[ID][]byte{hid: head, tid: tail} {
			_, err := b.PutChunk(id, d)
			require.NoError(t, err)
		}
		const size = 100 << 20
		m := &Manifest{Size: size, Extents: []Extent{
			{Chunk: hid, Length: int64(len(head))},
			{Length: 50 << 20},
			{Chunk: tid, Length: int64(len(tail))},
			{Length: size - int64(len(head)) - 50<<20 - int64(len(tail))},
		}}
		mid, err := b.PutManifest(m)
		require.NoError(t, err)
		require.NoError(t, b.Flush(ctx))
		sparse := Entry{Name: "sparse", Type: TypeFile, Size: size, Object: mid, ObjectKind: KindManifest}

		want := make([]byte, size)
		copy(want, head)
		copy(want[len(head)+50<<20:], tail)
		for _, c := range []struct {
			e    Entry
			want []byte
		}{{small, []byte("hello")}, {empty, nil}, {sparse, want}} {
			p, err := db.Materialize(ctx, &c.e)
			require.NoError(t, err)
			require.Equal(t, db.CachePath(c.e.Object), p, "%s: path", c.e.Name)
			got := fileBytes(t, p)
			// bytes.Equal: a diff of 100 MiB would drown the report.
			require.True(t, bytes.Equal(got, c.want), "%s: materialized content differs (%d bytes, want %d)", c.e.Name, len(got), len(c.want))
			fi, err := os.Stat(p)
			require.NoError(t, err)
			require.True(t, fi.Mode().IsRegular(), "%s: mode %v", c.e.Name, fi.Mode())
			require.Equal(t, os.FileMode(0o444), fi.Mode().Perm(), "%s: permissions", c.e.Name)
			rc, err := db.OpenContent(ctx, &c.e)
			require.NoError(t, err)
			got, err = readCloser(rc)
			require.NoError(t, err, "%s: OpenContent", c.e.Name)
			require.True(t, bytes.Equal(got, c.want), "%s: OpenContent differs", c.e.Name)
		}
		var st unix.Stat_t
		require.NoError(t, unix.Stat(db.CachePath(mid), &st))
		require.LessOrEqual(t, st.Blocks*512, int64(1<<20), "bytes the sparse file takes on disk; holes were written")
		_, err = db.Materialize(ctx, &Entry{Name: "d", Type: TypeDir})
		require.Error(t, err, "Materialize of a directory succeeded")
	})
}

// Concurrent callers share one materialization, and the file in place is
// never replaced: its inode stays the same across calls and handles.
func TestMaterializeConcurrentAndStable(t *testing.T) {
	eachBackend(t, func(t *testing.T, newDB func(testing.TB) *DB) {
		ctx := t.Context()
		db := newDB(t)
		data := randBytes(9, 5*testChunkSize+3)
		b, _ := db.NewBatch(ctx)
		e := putContent(t, b, "f", data)
		require.NoError(t, b.Flush(ctx))
		before := db.Counters()
		var wg sync.WaitGroup
		paths := make([]string, 16)
		for i := range paths {
			wg.Add(1)
			go func(i int) {
				defer wg.Done()
				p, err := db.Materialize(ctx, &e)
				assert.NoError(t, err)
				paths[i] = p
			}(i)
		}
		wg.Wait()
		require.Equal(t, int64(len(data)), db.Counters().Sub(before).CacheBytes, "bytes 16 concurrent calls materialized, want one copy")
		var first unix.Stat_t
		require.NoError(t, unix.Stat(paths[0], &first))
		// A second store handle (as another process would) finds it in place.
		db2, err := Open(ctx, db.Dir(), Options{})
		require.NoError(t, err)
		defer db2.Close()
		p2, err := db2.Materialize(ctx, &e)
		require.NoError(t, err)
		var again unix.Stat_t
		require.NoError(t, unix.Stat(p2, &again))
		require.Equal(t, paths[0], p2, "the second handle's path")
		require.Equal(t, first.Ino, again.Ino, "the cache file was replaced")
		require.True(t, bytes.Equal(fileBytes(t, p2), data), "content differs")
	})
}
