package store

import (
	"io"
	"math/rand/v2"
	"os"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"layerfs.dev/layerfs/internal/store/pack"
	"layerfs.dev/layerfs/internal/testenv"
)

// testChunkSize splits test files into fixed-size chunks; the real
// chunker lives in the commit package.
const testChunkSize = 64 << 10

func newDB(t testing.TB) *DB {
	t.Helper()
	return initTestDB(t, Options{})
}

// initTestDB makes a store in a fresh directory, closed when t ends.
func initTestDB(t testing.TB, opts Options) *DB {
	t.Helper()
	db, err := Init(t.Context(), t.TempDir(), opts)
	require.NoError(t, err)
	t.Cleanup(func() {
		assert.NoError(t, db.Close(), "close")
	})
	return db
}

func randBytes(seed uint64, n int) []byte {
	r := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	b := make([]byte, n)
	for i := 0; i+8 <= n; i += 8 {
		v := r.Uint64()
		for j := 0; j < 8; j++ {
			b[i+j] = byte(v >> (8 * j))
		}
	}
	for i := n &^ 7; i < n; i++ {
		b[i] = byte(r.Uint32())
	}
	return b
}

// putContent stores data as one chunk (up to testChunkSize) or as a
// manifest of fixed-size chunks, and returns a file entry for it.
func putContent(t testing.TB, b *Batch, name string, data []byte) Entry {
	t.Helper()
	e := Entry{Name: name, Type: TypeFile, Mode: 0o644, Size: int64(len(data))}
	switch {
	case len(data) == 0:
	case len(data) <= testChunkSize:
		e.Object, e.ObjectKind = Hash(KindChunk, data), KindChunk
		_, err := b.PutChunk(e.Object, data)
		require.NoError(t, err)
	default:
		m := &Manifest{Size: int64(len(data))}
		for off := 0; off < len(data); off += testChunkSize {
			c := data[off:min(off+testChunkSize, len(data))]
			id := Hash(KindChunk, c)
			_, err := b.PutChunk(id, c)
			require.NoError(t, err)
			m.Extents = append(m.Extents, Extent{Chunk: id, Length: int64(len(c))})
		}
		id, err := b.PutManifest(m)
		require.NoError(t, err)
		e.Object, e.ObjectKind = id, KindManifest
	}
	return e
}

// commitFiles stores a flat tree of files and a commit on parent, flushes,
// and returns the commit id.
func commitFiles(t testing.TB, db *DB, parent ID, msg string, files map[string][]byte) ID {
	t.Helper()
	return commitMerge(t, db, parentsOf(parent), 0, msg, files)
}

// commitMerge is commitFiles with any parents and a generation.
func commitMerge(t testing.TB, db *DB, parents []ID, gen uint64, msg string, files map[string][]byte) ID {
	t.Helper()
	ctx := t.Context()
	b, err := db.NewBatch(ctx)
	require.NoError(t, err)
	tr := &Tree{}
	for _, name := range sortedKeys(files) {
		tr.Entries = append(tr.Entries, putContent(t, b, name, files[name]))
	}
	root, err := b.PutTree(tr)
	require.NoError(t, err)
	var size int64
	for _, d := range files {
		size += int64(len(d))
	}
	c, err := b.PutCommit(&Commit{Root: root, Parents: parents, Generation: gen, Message: msg, TimeNs: 1, Stats: CommitStats{Files: int64(len(files)), Bytes: size}})
	require.NoError(t, err)
	require.NoError(t, b.Flush(ctx))
	return c
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	for i := 1; i < len(out); i++ {
		for j := i; j > 0 && out[j] < out[j-1]; j-- {
			out[j], out[j-1] = out[j-1], out[j]
		}
	}
	return out
}

// readAll reads every file of commit c's (flat) tree.
func readAll(t testing.TB, db *DB, c ID) map[string][]byte {
	t.Helper()
	ctx := t.Context()
	cm, err := db.Commit(ctx, c)
	require.NoError(t, err)
	tr, err := db.Tree(ctx, cm.Root)
	require.NoError(t, err)
	out := map[string][]byte{}
	for i := range tr.Entries {
		e := &tr.Entries[i]
		if e.Type != TypeFile {
			continue
		}
		rc, err := db.OpenContent(ctx, e)
		require.NoError(t, err)
		data, err := readCloser(rc)
		require.NoError(t, err, "read %s", e.Name)
		out[e.Name] = data
	}
	return out
}

func mustFsck(t testing.TB, db *DB) FsckReport {
	t.Helper()
	rep, err := db.Fsck(t.Context(), nil)
	require.NoError(t, err)
	require.NoError(t, rep.Err())
	return rep
}

func fileBytes(t testing.TB, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	return b
}

func readCloser(rc io.ReadCloser) ([]byte, error) {
	data, err := io.ReadAll(rc)
	if cerr := rc.Close(); err == nil {
		err = cerr
	}
	return data, err
}

// backends are the Stores the parameterised tests run on: the embedded
// one, and a shared one on this test binary's private PostgreSQL and S3
// server (skipped, or failed under LAYERFS_TEST_STRICT, without them).
var backends = []struct {
	name string
	open func(testing.TB) *DB
}{
	{"sqlite", newDB},
	{"postgres+s3", newSharedDB},
}

// eachBackend runs test once per backend, as a subtest named after it.
func eachBackend(t *testing.T, test func(t *testing.T, newDB func(testing.TB) *DB)) {
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) { test(t, b.open) })
	}
}

// eachBackendB runs a benchmark once per backend.
func eachBackendB(b *testing.B, bench func(b *testing.B, newDB func(testing.TB) *DB)) {
	for _, be := range backends {
		b.Run(be.name, func(b *testing.B) { bench(b, be.open) })
	}
}

// newSharedDB initialises a shared Store in a fresh database and bucket.
func newSharedDB(t testing.TB) *DB {
	t.Helper()
	return initTestDB(t, Options{URL: sharedURL(t)})
}

// sharedURL is a Store URL on a fresh database and bucket of the test
// binary's private servers.
func sharedURL(t testing.TB) string { return testenv.StoreURL(t) }

// parentsOf is the parent list of a commit whose only parent is p (none for
// ZeroID).
func parentsOf(p ID) []ID {
	if p.IsZero() {
		return nil
	}
	return []ID{p}
}

// livePackBytes is each pack's live bytes (its chunks' records, headers
// included) as the index has them.
func livePackBytes(t testing.TB, db *DB) map[int64]int64 {
	out := map[int64]int64{}
	err := db.withTx(t.Context(), txRead, func(tx *tx) error {
		r, err := tx.Query(t.Context(), `SELECT pack, len FROM chunks`)
		if err != nil {
			return err
		}
		defer r.Close()
		for r.Next() {
			var num, n int64
			if err := r.Scan(&num, &n); err != nil {
				return err
			}
			out[num] += pack.HeaderSize + n
		}
		return r.Err()
	})
	require.NoError(t, err)
	return out
}
