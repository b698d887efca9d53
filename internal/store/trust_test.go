package store

import (
	"bytes"
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
)

// logBuffer is a logger whose records a test reads.
type logBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

func (l *logBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.String()
}

// flipByte flips one byte of the file at path at off, as a failing disk or
// a stray tool would: in place, through the file system.
func flipByte(t *testing.T, path string, off int64) {
	t.Helper()
	require.NoError(t, os.Chmod(path, 0o644))
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	require.NoError(t, err)
	defer f.Close()
	b := []byte{0}
	_, err = f.ReadAt(b, off)
	require.NoError(t, err)
	b[0] ^= 0x20
	_, err = f.WriteAt(b, off)
	require.NoError(t, err)
	require.NoError(t, os.Chmod(path, 0o444))
}

// damagedStore holds a content of one chunk and a chunked one of 3 MiB
// with a hole, materialized (and so trusted) by a first DB, then reopened
// by a second, as after a restart.
type damagedStore struct {
	dir          string
	small, large Entry
	smallData    []byte
	largeData    []byte
}

func newDamagedStore(t *testing.T) damagedStore {
	ctx := t.Context()
	s := damagedStore{dir: t.TempDir()}
	db, err := Init(ctx, s.dir, Options{})
	require.NoError(t, err)
	b, err := db.NewBatch(ctx)
	require.NoError(t, err)
	s.smallData = randBytes(1, 5000)
	s.small = putContent(t, b, "small", s.smallData)
	s.largeData = randBytes(2, 3<<20)
	s.large = putContent(t, b, "large", s.largeData)
	require.NoError(t, b.Flush(ctx))
	for _, e := range []*Entry{&s.small, &s.large} {
		_, err := db.Materialize(ctx, e)
		require.NoError(t, err)
	}
	require.NoError(t, db.Close())
	return s
}

// TestMaterializeDamaged: a cache file damaged before this process
// trusted it is never returned: Materialize checks it, evicts it with a
// warning that names it, and makes it again from the packs; the trusted
// layer holds the right bytes.
func TestMaterializeDamaged(t *testing.T) {
	ctx := t.Context()
	s := newDamagedStore(t)
	var log logBuffer
	db, err := Open(ctx, s.dir, Options{Logger: slog.New(slog.NewTextHandler(&log, nil))})
	require.NoError(t, err)
	defer db.Close()
	for _, c := range []struct {
		e    Entry
		want []byte
	}{{s.small, s.smallData}, {s.large, s.largeData}} {
		flipByte(t, db.CachePath(c.e.Object), int64(len(c.want))/2)
		p, err := db.Materialize(ctx, &c.e)
		require.NoError(t, err)
		require.True(t, bytes.Equal(fileBytes(t, p), c.want), "%s: damaged bytes returned", c.e.Name)
		layer := filepath.Join(db.CacheLayer(), c.e.Object.String()[:2], c.e.Object.String())
		require.True(t, bytes.Equal(fileBytes(t, layer), c.want), "%s: damaged bytes in the trusted layer", c.e.Name)
		require.Contains(t, log.String(), "damaged cache file evicted")
		require.Contains(t, log.String(), c.e.Object.String(), "the warning does not name the content")
	}
	st, err := db.Stats(ctx)
	require.NoError(t, err)
	require.EqualValues(t, 2, st.CacheFiles)
	require.EqualValues(t, 2, st.CacheTrusted)
}

// TestReadyDamaged: Ready checks a commit's contents ahead of reads,
// trusts the good ones, evicts a damaged one and fetches it again.
func TestReadyDamaged(t *testing.T) {
	ctx := t.Context()
	s := newDamagedStore(t)
	db, err := Open(ctx, s.dir, Options{})
	require.NoError(t, err)
	defer db.Close()
	st, err := db.Stats(ctx)
	require.NoError(t, err)
	require.EqualValues(t, 0, st.CacheTrusted, "a new process trusts what an earlier one checked")

	flipByte(t, db.CachePath(s.large.Object), 1<<20)
	rs, err := db.Ready(ctx, []Content{contentOf(&s.small), contentOf(&s.large)})
	require.NoError(t, err)
	require.Equal(t, 2, rs.Trusted)
	require.Equal(t, 1, rs.Damaged)
	require.Equal(t, 1, rs.Placed)
	require.True(t, db.cache.Trusted(s.large.Object))
	require.True(t, bytes.Equal(fileBytes(t, db.CachePath(s.large.Object)), s.largeData))
}

// TestFsckCache: fsck checks every cache file, trusted or not, names each
// damaged one, and RepairCache evicts them; what is then materialized is
// right.
func TestFsckCache(t *testing.T) {
	ctx := t.Context()
	s := newDamagedStore(t)
	var log logBuffer
	db, err := Open(ctx, s.dir, Options{Logger: slog.New(slog.NewTextHandler(&log, nil))})
	require.NoError(t, err)
	defer db.Close()
	rep, err := db.Fsck(ctx, nil)
	require.NoError(t, err)
	require.True(t, rep.OK(), "%v", rep.Problems)
	require.EqualValues(t, 2, rep.CacheFiles)
	require.EqualValues(t, len(s.smallData)+len(s.largeData), rep.CacheBytes)

	// Damaged after this process trusted it (Materialize) and before.
	_, err = db.Materialize(ctx, &s.small)
	require.NoError(t, err)
	flipByte(t, db.CachePath(s.small.Object), 10)
	flipByte(t, db.CachePath(s.large.Object), 2<<20+5)
	rep, err = db.Fsck(ctx, nil)
	require.NoError(t, err)
	require.Len(t, rep.Problems, 2, "%v", rep.Problems)
	for _, p := range rep.Problems {
		require.Equal(t, "cache", p.Kind)
		require.Equal(t, db.CachePath(p.Object), p.Where)
		require.True(t, strings.Contains(p.Detail, "hashes to"), p.Detail)
	}
	n, err := db.RepairCache(rep)
	require.NoError(t, err)
	require.Equal(t, 2, n)
	require.NoFileExists(t, db.CachePath(s.small.Object))
	require.NoFileExists(t, db.CachePath(s.large.Object))
	require.Contains(t, log.String(), s.large.Object.String())
	rep, err = db.Fsck(ctx, nil)
	require.NoError(t, err)
	require.True(t, rep.OK(), "%v", rep.Problems)
	for _, c := range []struct {
		e    Entry
		want []byte
	}{{s.small, s.smallData}, {s.large, s.largeData}} {
		p, err := db.Materialize(context.Background(), &c.e)
		require.NoError(t, err)
		require.True(t, bytes.Equal(fileBytes(t, p), c.want), c.e.Name)
	}
}
