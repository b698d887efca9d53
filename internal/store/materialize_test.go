package store

import (
	"bytes"
	"context"
	"os"
	"sync"
	"testing"

	"golang.org/x/sys/unix"
)

func TestMaterialize(t *testing.T) {
	eachBackend(t, func(t *testing.T, newDB func(testing.TB) *DB) {
		ctx := context.Background()
		db := newDB(t)
		b, _ := db.NewBatch(ctx)
		small := putContent(t, b, "small", []byte("hello"))
		empty := putContent(t, b, "empty", nil)
		// A sparse 100 MiB file: data, a long hole, data, and a trailing hole.
		head, tail := randBytes(7, testChunkSize), randBytes(8, 1000)
		hid, tid := Hash(KindChunk, head), Hash(KindChunk, tail)
		for id, d := range map[ID][]byte{hid: head, tid: tail} {
			if _, err := b.PutChunk(id, d); err != nil {
				t.Fatal(err)
			}
		}
		const size = 100 << 20
		m := &Manifest{Size: size, Extents: []Extent{
			{Chunk: hid, Length: int64(len(head))},
			{Length: 50 << 20},
			{Chunk: tid, Length: int64(len(tail))},
			{Length: size - int64(len(head)) - 50<<20 - int64(len(tail))},
		}}
		mid, err := b.PutManifest(m)
		if err != nil {
			t.Fatal(err)
		}
		if err := b.Flush(ctx); err != nil {
			t.Fatal(err)
		}
		sparse := Entry{Name: "sparse", Type: TypeFile, Size: size, Object: mid, ObjectKind: KindManifest}

		want := make([]byte, size)
		copy(want, head)
		copy(want[len(head)+50<<20:], tail)
		for _, c := range []struct {
			e    Entry
			want []byte
		}{{small, []byte("hello")}, {empty, nil}, {sparse, want}} {
			p, err := db.Materialize(ctx, &c.e)
			if err != nil {
				t.Fatal(err)
			}
			if p != db.CachePath(c.e.Object) {
				t.Fatalf("path %s, want %s", p, db.CachePath(c.e.Object))
			}
			got := fileBytes(t, p)
			if !bytes.Equal(got, c.want) {
				t.Fatalf("%s: materialized content differs (%d bytes, want %d)", c.e.Name, len(got), len(c.want))
			}
			fi, _ := os.Stat(p)
			if !fi.Mode().IsRegular() || fi.Mode().Perm() != 0o444 {
				t.Fatalf("%s: mode %v", c.e.Name, fi.Mode())
			}
			rc, err := db.OpenContent(ctx, &c.e)
			if err != nil {
				t.Fatal(err)
			}
			if got, err := readCloser(rc); err != nil || !bytes.Equal(got, c.want) {
				t.Fatalf("%s: OpenContent differs: %v", c.e.Name, err)
			}
		}
		var st unix.Stat_t
		if err := unix.Stat(db.CachePath(mid), &st); err != nil {
			t.Fatal(err)
		}
		if st.Blocks*512 > 1<<20 {
			t.Fatalf("sparse file takes %d bytes on disk; holes were written", st.Blocks*512)
		}
		if _, err := db.Materialize(ctx, &Entry{Name: "d", Type: TypeDir}); err == nil {
			t.Fatal("Materialize of a directory succeeded")
		}
	})
}

// Concurrent callers share one materialization, and the file in place is
// never replaced: its inode stays the same across calls and handles.
func TestMaterializeConcurrentAndStable(t *testing.T) {
	eachBackend(t, func(t *testing.T, newDB func(testing.TB) *DB) {
		ctx := context.Background()
		db := newDB(t)
		data := randBytes(9, 5*testChunkSize+3)
		b, _ := db.NewBatch(ctx)
		e := putContent(t, b, "f", data)
		if err := b.Flush(ctx); err != nil {
			t.Fatal(err)
		}
		before := db.Counters()
		var wg sync.WaitGroup
		paths := make([]string, 16)
		for i := range paths {
			wg.Add(1)
			go func(i int) {
				defer wg.Done()
				p, err := db.Materialize(ctx, &e)
				if err != nil {
					t.Error(err)
				}
				paths[i] = p
			}(i)
		}
		wg.Wait()
		if d := db.Counters().Sub(before); d.CacheBytes != int64(len(data)) {
			t.Fatalf("16 concurrent calls materialized %d bytes, want one copy of %d", d.CacheBytes, len(data))
		}
		var first unix.Stat_t
		unix.Stat(paths[0], &first)
		// A second store handle (as another process would) finds it in place.
		db2, err := Open(ctx, db.Dir(), Options{})
		if err != nil {
			t.Fatal(err)
		}
		defer db2.Close()
		p2, err := db2.Materialize(ctx, &e)
		if err != nil {
			t.Fatal(err)
		}
		var again unix.Stat_t
		unix.Stat(p2, &again)
		if p2 != paths[0] || again.Ino != first.Ino {
			t.Fatal("the cache file was replaced")
		}
		if !bytes.Equal(fileBytes(t, p2), data) {
			t.Fatal("content differs")
		}
	})
}
