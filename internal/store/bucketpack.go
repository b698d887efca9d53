package store

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

	"layerfs.dev/layerfs/internal/s3bucket"
	"layerfs.dev/layerfs/internal/store/pack"
)

// A shared Store's packs are objects in a bucket, in the pack file format
// (package pack), named packs/<number>-<BLAKE3 of the pack's bytes>.pack:
// immutable, so an upload retried after a timeout writes the same object,
// and unique, so no two hosts can overwrite each other's, and GC deleting
// a dead pack can never delete a new one that happens to hold the same
// bytes. A writer spools its pack to spool/ in
// the host's directory and uploads it when its batch flushes; the packs
// table maps the pack's number (from a sequence, known when the first
// chunk is appended, as the chunk rows need it) to the object's key.
// Reads are ranged GETs of one chunk, verified, through the node-local
// chunk cache.

const spoolDir = "spool"

type bucketPacks struct {
	db     *DB
	bucket *s3bucket.Bucket
	cache  *chunkCache // nil when disabled
	keys   sync.Map    // pack number -> object key
}

func newBucketPacks(db *DB, b *s3bucket.Bucket, cache *chunkCache) *bucketPacks {
	return &bucketPacks{db: db, bucket: b, cache: cache}
}

// bucketWriter spools one pack; it serves one flush, then is dropped.
type bucketWriter struct {
	bucket *s3bucket.Bucket
	num    int64
	path   string
	f      *os.File
	w      *bufio.Writer
	size   int64
	key    string // set once uploaded
}

func (bp *bucketPacks) Acquire(ctx context.Context) (pack.Appender, error) {
	var num int64
	err := bp.db.withTx(ctx, txInsert, func(tx *tx) error {
		return tx.row(ctx, `SELECT nextval('pack_numbers')`).Scan(&num)
	})
	if err != nil {
		return nil, fmt.Errorf("number a new pack: %w", err)
	}
	// The spool is named by this process too, so that a later open can
	// tell the spools of dead processes (see removeDeadSpools).
	path := filepath.Join(bp.db.dir, spoolDir, fmt.Sprintf("%d-%s", os.Getpid(), pack.Name(num)))
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return nil, fmt.Errorf("spool pack: %w", err)
	}
	w := &bucketWriter{bucket: bp.bucket, num: num, path: path, f: f, w: bufio.NewWriterSize(f, 1<<20)}
	if _, err := w.w.WriteString(pack.Magic); err != nil {
		w.close()
		return nil, fmt.Errorf("spool pack %s: %w", path, err)
	}
	w.size = int64(len(pack.Magic))
	return w, nil
}

func (w *bucketWriter) Number() int64 { return w.num }
func (w *bucketWriter) End() int64    { return w.size }
func (w *bucketWriter) Retire()       {}

func (w *bucketWriter) Append(id ID, data []byte) (int64, error) {
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
func (w *bucketWriter) Sync() error {
	ctx := context.Background()
	b := w.bucket
	if err := w.w.Flush(); err != nil {
		return fmt.Errorf("spool pack %s: %w", w.path, err)
	}
	h := blake3.New()
	if _, err := io.Copy(h, io.NewSectionReader(w.f, 0, w.size)); err != nil {
		return fmt.Errorf("hash pack %s: %w", w.path, err)
	}
	key := packObjectKey(w.num, h.Sum(nil))
	if err := b.Put(ctx, key, w.f, w.size); err != nil {
		return fmt.Errorf("upload pack %d: %w", w.num, err)
	}
	w.key = key
	return nil
}

// packObjectKey names pack num with the hash of its bytes.
func packObjectKey(num int64, sum []byte) string {
	return fmt.Sprintf("%s%d-%x.pack", packKeyPrefix, num, sum)
}

// packKeyPrefix is where pack objects are, in the bucket.
const packKeyPrefix = "packs/"

func (w *bucketWriter) Rollback(size int64) error {
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

func (w *bucketWriter) close() error {
	err := w.f.Close()
	if rerr := os.Remove(w.path); rerr != nil && !errors.Is(rerr, os.ErrNotExist) {
		err = errors.Join(err, rerr)
	}
	return err
}

// Release drops the spool: a pack object is never appended to.
func (bp *bucketPacks) Release(a pack.Appender) error { return a.(*bucketWriter).close() }
func (bp *bucketPacks) Discard(a pack.Appender)       { a.(*bucketWriter).close() }

// record indexes the unit's uploaded packs in the flush's transaction,
// whose chunk rows name them.
func (bp *bucketPacks) record(ctx context.Context, tx *tx, used []packUse) error {
	seen := map[*bucketWriter]bool{}
	for _, u := range used {
		w := u.w.(*bucketWriter)
		if seen[w] {
			continue
		}
		seen[w] = true
		if _, err := tx.exec(ctx, `INSERT OR IGNORE INTO packs(num, key, size, created) VALUES (?, ?, ?, ?)`,
			w.num, w.key, w.size, nowNs()); err != nil {
			return fmt.Errorf("index pack %d: %w", w.num, err)
		}
		bp.keys.Store(w.num, w.key)
	}
	return nil
}

// packKey returns pack num's object key.
func (bp *bucketPacks) packKey(ctx context.Context, num int64) (string, error) {
	if k, ok := bp.keys.Load(num); ok {
		return k.(string), nil
	}
	key, err := readOne(ctx, bp.db, func(s scanner) (string, error) {
		var k string
		return k, s.Scan(&k)
	}, `SELECT key FROM packs WHERE num = ?`, num)
	if errors.Is(err, ErrNotFound) {
		return "", fmt.Errorf("pack %d is not indexed: %w", num, ErrCorrupt)
	}
	if err != nil {
		return "", fmt.Errorf("pack %d: %w", num, err)
	}
	bp.keys.Store(num, key)
	return key, nil
}

func (bp *bucketPacks) Read(ctx context.Context, id ID, num, off, length int64) ([]byte, error) {
	if data, ok := bp.cache.get(id); ok {
		bp.db.ctr.read.Chunks.Add(1)
		return data, nil
	}
	key, err := bp.packKey(ctx, num)
	if err != nil {
		return nil, fmt.Errorf("chunk %s: %w", id, err)
	}
	if off < pack.MinOffset || length < 0 || length > pack.MaxChunkSize {
		return nil, fmt.Errorf("chunk %s in %s: invalid range %d+%d: %w", id, key, off, length, ErrCorrupt)
	}
	var data []byte
	if length > 0 {
		data, err = bp.bucket.ReadRange(ctx, key, off, length)
		if err != nil {
			if errors.Is(err, s3bucket.ErrNotFound) {
				return nil, fmt.Errorf("chunk %s: pack object %s is missing: %w", id, key, ErrCorrupt)
			}
			return nil, fmt.Errorf("chunk %s: %w", id, err)
		}
	}
	bp.db.ctr.read.Bytes.Add(int64(len(data)))
	bp.db.ctr.read.Chunks.Add(1)
	if got := Hash(KindChunk, data); got != id {
		return nil, fmt.Errorf("chunk %s in %s (bucket %s) at offset %d: content hashes to %s: %w", id, key, bp.bucket, off, got, ErrCorrupt)
	}
	bp.cache.put(id, data)
	return data, nil
}

func (bp *bucketPacks) ReadRange(ctx context.Context, num, off, length int64) ([]byte, error) {
	key, err := bp.packKey(ctx, num)
	if err != nil {
		return nil, err
	}
	data, err := bp.bucket.ReadRange(ctx, key, off, length)
	if errors.Is(err, s3bucket.ErrNotFound) {
		return nil, fmt.Errorf("pack object %s is missing: %w", key, ErrCorrupt)
	}
	return data, err
}

func (bp *bucketPacks) Close() error { return nil }

// removeDeadSpools removes the spooled packs of processes that died before
// their batch flushed or aborted: their chunks were never indexed, so
// nothing needs them. Spools of live processes (another process on this
// directory) stay.
func removeDeadSpools(dir string) error {
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
