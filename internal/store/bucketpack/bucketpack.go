package bucketpack

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"

	"github.com/zeebo/blake3"
	"golang.org/x/sys/unix"

	"layerfs.dev/layerfs/internal/account"
	"layerfs.dev/layerfs/internal/s3bucket"
	"layerfs.dev/layerfs/internal/store/object"
	"layerfs.dev/layerfs/internal/store/pack"
)

// KeyPrefix is where pack objects are, in the bucket.
const KeyPrefix = "packs/"

// Index is where a shared Store numbers and names its pack objects: the
// packs table of its database.
type Index interface {
	// NextNumber returns a pack number no pack had before.
	NextNumber(ctx context.Context) (int64, error)
	// Key returns pack num's object key, or an error wrapping
	// object.ErrCorrupt when no pack num is indexed.
	Key(ctx context.Context, num int64) (string, error)
}

// Set is a shared Store's pack objects in its bucket, as this host writes
// and reads them. It is safe for concurrent use.
type Set struct {
	s3    *s3bucket.Bucket
	index Index
	spool string      // the directory of this host's spooled packs
	cache *chunkCache // nil when disabled
	total *account.Account
	keys  sync.Map // pack number -> object key
}

// Open returns the pack objects of bucket b, numbered and named by index,
// spooled in spoolDir, with a chunk cache of up to cacheBytes in cacheDir
// (negative: none). Reads are counted in total (the Store's totals) and in
// the account of the read's context.
func Open(b *s3bucket.Bucket, index Index, spoolDir, cacheDir string, cacheBytes int64, total *account.Account) (*Set, error) {
	cache, err := openChunkCache(cacheDir, cacheBytes)
	if err != nil {
		return nil, err
	}
	return &Set{s3: b, index: index, spool: spoolDir, cache: cache, total: total}, nil
}

// S3 is the bucket.
func (s *Set) S3() *s3bucket.Bucket { return s.s3 }

// Writer spools one pack; it serves one flush, then is dropped.
type Writer struct {
	bucket *s3bucket.Bucket
	num    int64
	path   string
	f      *os.File
	w      *bufio.Writer
	size   int64
	key    string // set once uploaded
}

// Acquire numbers a new pack and starts its spool.
func (s *Set) Acquire(ctx context.Context) (pack.Appender, error) {
	num, err := s.index.NextNumber(ctx)
	if err != nil {
		return nil, fmt.Errorf("number a new pack: %w", err)
	}
	// The spool is named by this process too, so that a later open can
	// tell the spools of dead processes (see RemoveDeadSpools).
	path := filepath.Join(s.spool, fmt.Sprintf("%d-%s", os.Getpid(), pack.Name(num)))
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return nil, fmt.Errorf("spool pack: %w", err)
	}
	w := &Writer{bucket: s.s3, num: num, path: path, f: f, w: bufio.NewWriterSize(f, 1<<20)}
	if _, err := w.w.WriteString(pack.Magic); err != nil {
		w.close()
		return nil, fmt.Errorf("spool pack %s: %w", path, err)
	}
	w.size = int64(len(pack.Magic))
	return w, nil
}

// Number is the pack's number.
func (w *Writer) Number() int64 { return w.num }

// End is the pack's size so far.
func (w *Writer) End() int64 { return w.size }

// Retire does nothing: a pack object is never appended to again anyway.
func (w *Writer) Retire() {}

// Key is the pack's object key, once Sync uploaded it.
func (w *Writer) Key() string { return w.key }

// Append adds one record to the spool and returns its payload's offset.
func (w *Writer) Append(id object.ID, data []byte) (int64, error) {
	hdr := pack.Header(id, len(data))
	if _, err := w.w.Write(hdr[:]); err != nil {
		return 0, fmt.Errorf("spool pack %s: %w", w.path, err)
	}
	if _, err := w.w.Write(data); err != nil {
		return 0, fmt.Errorf("spool pack %s: %w", w.path, err)
	}
	off := w.size + pack.HeaderSize
	w.size += int64(pack.HeaderSize + len(data))
	return off, nil
}

// Sync names the spooled pack by its hash and puts it in the bucket (in
// parts when large); the batch's rows commit only after it returns, as
// after a pack file's fsync. It runs while the rows are inserted, without
// the caller's context (its bound is the bucket's retries).
func (w *Writer) Sync() error {
	ctx := context.Background()
	b := w.bucket
	if err := w.w.Flush(); err != nil {
		return fmt.Errorf("spool pack %s: %w", w.path, err)
	}
	h := blake3.New()
	if _, err := io.Copy(h, io.NewSectionReader(w.f, 0, w.size)); err != nil {
		return fmt.Errorf("hash pack %s: %w", w.path, err)
	}
	key := objectKey(w.num, h.Sum(nil))
	if err := b.Put(ctx, key, w.f, w.size); err != nil {
		return fmt.Errorf("upload pack %d: %w", w.num, err)
	}
	w.key = key
	return nil
}

// objectKey names pack num with the hash of its bytes.
func objectKey(num int64, sum []byte) string {
	return fmt.Sprintf("%s%d-%x.pack", KeyPrefix, num, sum)
}

// Rollback forgets what was spooled since the spool was size bytes.
func (w *Writer) Rollback(size int64) error {
	w.w.Reset(w.f)
	if err := w.f.Truncate(size); err != nil {
		return fmt.Errorf("truncate spool %s: %w", w.path, err)
	}
	if _, err := w.f.Seek(size, io.SeekStart); err != nil {
		return err
	}
	w.size = size
	return nil
}

func (w *Writer) close() error {
	err := w.f.Close()
	if rerr := os.Remove(w.path); rerr != nil && !errors.Is(rerr, os.ErrNotExist) {
		err = errors.Join(err, rerr)
	}
	return err
}

// Release drops the spool: a pack object is never appended to.
func (s *Set) Release(a pack.Appender) error { return a.(*Writer).close() }

// Discard drops the spool after an error.
func (s *Set) Discard(a pack.Appender) { a.(*Writer).close() }

// Remember notes pack num's key, indexed by the caller.
func (s *Set) Remember(num int64, key string) { s.keys.Store(num, key) }

// Forget drops what is known of pack num, deleted by the caller.
func (s *Set) Forget(num int64) { s.keys.Delete(num) }

// Key returns pack num's object key.
func (s *Set) Key(ctx context.Context, num int64) (string, error) {
	if k, ok := s.keys.Load(num); ok {
		return k.(string), nil
	}
	key, err := s.index.Key(ctx, num)
	if err != nil {
		return "", err
	}
	s.keys.Store(num, key)
	return key, nil
}

// Read returns chunk id's payload at off/length in pack num, verified,
// from the chunk cache or else with a ranged GET (which it caches).
func (s *Set) Read(ctx context.Context, id object.ID, num, off, length int64) ([]byte, error) {
	if data, ok := s.cache.get(id); ok {
		account.Charge(ctx, s.total, account.ChunksRead, 1)
		return data, nil
	}
	key, err := s.Key(ctx, num)
	if err != nil {
		return nil, fmt.Errorf("chunk %s: %w", id, err)
	}
	if off < pack.MinOffset || length < 0 || length > pack.MaxChunkSize {
		return nil, fmt.Errorf("chunk %s in %s: invalid range %d+%d: %w", id, key, off, length, object.ErrCorrupt)
	}
	var data []byte
	if length > 0 {
		data, err = s.s3.ReadRange(ctx, key, off, length)
		if err != nil {
			if errors.Is(err, s3bucket.ErrNotFound) {
				return nil, fmt.Errorf("chunk %s: pack object %s is missing: %w", id, key, object.ErrCorrupt)
			}
			return nil, fmt.Errorf("chunk %s: %w", id, err)
		}
	}
	account.Charge(ctx, s.total, account.PackBytesRead, int64(len(data)))
	account.Charge(ctx, s.total, account.ChunksRead, 1)
	if got := object.Hash(object.KindChunk, data); got != id {
		return nil, fmt.Errorf("chunk %s in %s (bucket %s) at offset %d: content hashes to %s: %w", id, key, s.s3, off, got, object.ErrCorrupt)
	}
	s.cache.put(id, data)
	return data, nil
}

// ReadRange returns length bytes of pack num at off, as they are.
func (s *Set) ReadRange(ctx context.Context, num, off, length int64) ([]byte, error) {
	key, err := s.Key(ctx, num)
	if err != nil {
		return nil, err
	}
	data, err := s.s3.ReadRange(ctx, key, off, length)
	if errors.Is(err, s3bucket.ErrNotFound) {
		return nil, fmt.Errorf("pack object %s is missing: %w", key, object.ErrCorrupt)
	}
	return data, err
}

// Close has nothing to release.
func (s *Set) Close() error { return nil }

// CacheBytes is what the chunk cache holds.
func (s *Set) CacheBytes() int64 { return s.cache.bytes() }

// RemoveDeadSpools removes the spooled packs of processes that died before
// their batch flushed or aborted: their chunks were never indexed, so
// nothing needs them. Spools of live processes (another process on this
// directory) stay.
func RemoveDeadSpools(dir string) error {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	for _, e := range ents {
		pid, _, ok := strings.Cut(e.Name(), "-")
		n, err := strconv.Atoi(pid)
		if !ok || err != nil || n <= 0 {
			continue
		}
		if err := unix.Kill(n, 0); errors.Is(err, unix.ESRCH) {
			os.Remove(filepath.Join(dir, e.Name()))
		}
	}
	return nil
}
