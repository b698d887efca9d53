package maintenance

import (
	"context"
	"log/slog"
	"os"

	"layerfs.dev/layerfs/internal/account"
	"layerfs.dev/layerfs/internal/store/bucketpack"
	"layerfs.dev/layerfs/internal/store/cache"
	"layerfs.dev/layerfs/internal/store/object"
	"layerfs.dev/layerfs/internal/store/pack"
	"layerfs.dev/layerfs/internal/store/sqltx"
)

// Store is one open Store as its maintenance sees it: its transactions,
// its locks, where its index, packs and cache are. Package store makes
// one for each GC, Fsck or RepairCache (DB.GC ...), and checks that the
// DB is open first.
type Store struct {
	// Dir is the Store's directory; Node its host's name on a shared
	// Store.
	Dir, Node string
	// IndexFile is the embedded Store's SQLite file under Dir (with its
	// -wal and -shm files beside it).
	IndexFile string
	// PacksDir and CacheDir are the directories of the pack files and of
	// the cache of contents.
	PacksDir, CacheDir string
	// MaxPackSize is the size at which a rewritten pack is cut.
	MaxPackSize int64
	Log         *slog.Logger
	// Total is the DB's totals, counted beside the request's account.
	Total *account.Account

	// Packs are the embedded Store's pack files (nil on a shared Store),
	// Bucket a shared Store's pack objects (nil on the embedded one).
	Packs  *pack.Set
	Bucket *bucketpack.Set
	Cache  *cache.Dir

	// WithTx runs fn in one transaction of mode, counted and accounted.
	WithTx func(ctx context.Context, mode sqltx.Mode, fn func(*sqltx.Tx) error) error
	// LockExclusive takes the embedded Store for GC: no unflushed batch in
	// this process and no other process with the Store open (else an
	// error wrapping errclass.Busy).
	LockExclusive func(ctx context.Context) (unlock func(), err error)
	// ExecWriter runs a statement outside any transaction on the embedded
	// Store's writer connection (VACUUM, a WAL checkpoint).
	ExecWriter func(ctx context.Context, q string) error
	// ReadLock keeps GC from rewriting packs until unlock: what reads
	// pack files holds it.
	ReadLock func() (unlock func())
	// ReadChunk reads the chunk id at off+n of pack num and checks it.
	ReadChunk func(ctx context.Context, id object.ID, num, off, n int64) ([]byte, error)
	// CheckCacheFile checks that the open file f holds the content c; a
	// mismatch wraps cache.ErrDamaged.
	CheckCacheFile func(ctx context.Context, c Content, f *os.File) error
}

// Content names a file content: its object (a chunk or a manifest), its
// kind and its size.
type Content struct {
	ID   object.ID
	Kind object.Kind
	Size int64
}

// chunkRow is a chunk's row of the index: where its bytes are.
type chunkRow struct {
	id             object.ID
	pack, off, len int64
}

func (s *Store) indexFiles() []string {
	return []string{s.IndexFile, s.IndexFile + "-wal", s.IndexFile + "-shm"}
}

func toID(b []byte) object.ID {
	var id object.ID
	copy(id[:], b)
	return id
}
