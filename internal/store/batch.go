package store

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"

	"layerfs.dev/layerfs/internal/account"
	"layerfs.dev/layerfs/internal/store/pack"
	"layerfs.dev/layerfs/internal/store/sqltx"
)

// BatchStats count what a batch stored since it was created.
type BatchStats struct {
	NewChunks      int64 `json:"new_chunks"`
	NewChunkBytes  int64 `json:"new_chunk_bytes"` // payload bytes appended to packs
	ReusedChunks   int64 `json:"reused_chunks"`
	ReusedBytes    int64 `json:"reused_chunk_bytes"`
	NewObjects     int64 `json:"new_objects"` // manifests, trees and commits
	ReusedObjects  int64 `json:"reused_objects"`
	NewObjectBytes int64 `json:"new_object_bytes"`
	Flushes        int64 `json:"flushes"`
}

// Batch collects new objects and makes them durable together. PutChunk
// appends payloads to a pack file at once (buffered); index rows and
// manifests, trees and commits wait in memory until Flush, which fsyncs the
// pack and then commits every row in one SQLite transaction. Until Flush
// returns nothing of the batch is visible to readers; after it, everything
// is. A Batch may be reused after Flush; Abort ends it. A Batch is safe for
// concurrent use (capture hashes files on several goroutines).
//
// Objects should be put children first (chunks, then manifests, then the
// trees that name them, then the commit), as Fsck expects every object's
// references to resolve once the batch is flushed.
type Batch struct {
	db *DB

	mu      sync.Mutex
	done    bool
	active  bool          // holds db.gcMu shared and counts in db.batches
	w       pack.Appender // current pack writer, nil until a new chunk
	used    []packUse     // writers this unit appended to, in order
	chunks  []chunkRow    // index rows to insert at Flush
	objs    []objectRow   // objects to insert at Flush
	pending map[ID]bool   // ids put in this unit
	probe   dedupProbe    // dedup probes, open while active
	stats   BatchStats
	fill    *CacheFill // nil: the Store fills its cache on first read only
	behind  ID         // the tree to fetch what fill left out of (FillBehind)
	// acct is the account of the request that made the batch: what the
	// batch does is its work, whichever goroutine does it.
	acct *account.Account
}

type packUse struct {
	w     pack.Appender
	start int64 // pack size when this unit first appended, for rollback
}

type chunkRow struct {
	id       ID
	pack     int64
	off, len int64
}

type objectRow struct {
	id   ID
	kind Kind
	data []byte
}

// NewBatch starts a batch. Its first Put waits while GC runs in this
// process (GC in another process cannot run while this one has the store
// open). What the batch stores is counted in the account ctx carries
// (package account), whichever goroutine stores it; what its cache fill
// places behind it is not (CacheFill).
func (db *DB) NewBatch(ctx context.Context) (*Batch, error) {
	if err := db.check(); err != nil {
		return nil, err
	}
	a := account.From(ctx)
	b := &Batch{db: db, pending: map[ID]bool{}, fill: db.newHeldFill(), acct: a}
	return b, nil
}

// CacheFill is the fill of the Store's cache that captures into this
// batch use (nil where the Store does not fill its cache so).
func (b *Batch) CacheFill() *CacheFill { return b.fill }

// begin marks the batch active: GC waits for (in-process) or is refused
// by (other processes) batches holding unflushed work, because a chunk
// found by a dedup probe must not be collected before Flush references it.
func (b *Batch) begin(ctx context.Context) error {
	if b.done {
		return errors.New("batch already aborted")
	}
	if b.active {
		return nil
	}
	if err := b.db.check(); err != nil {
		return err
	}
	b.db.gcMu.RLock()
	b.db.batches.Add(1)
	b.active = true
	p, err := b.db.openProbe(ctx, b.acct)
	if err != nil {
		b.end()
		return fmt.Errorf("batch: %w", err)
	}
	b.probe = p
	return nil
}

// end releases what begin took; the unit's rows must be committed or
// dropped first.
func (b *Batch) end() {
	b.closeProbe()
	if b.active {
		b.active = false
		b.db.batches.Add(-1)
		b.db.gcMu.RUnlock()
	}
}

// PutChunk stores a chunk whose id the caller computed as
// Hash(KindChunk, data). If the store (or this batch) already has it,
// nothing is written and added is false. data may be reused by the caller
// once PutChunk returns.
func (b *Batch) PutChunk(id ID, data []byte) (added bool, err error) {
	if int64(len(data)) > pack.MaxChunkSize {
		return false, fmt.Errorf("put chunk %s: %d bytes is too large", id, len(data))
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	ok, err := b.stored(id, false)
	if err != nil {
		return false, fmt.Errorf("put chunk %s: %w", id, err)
	}
	if ok {
		b.reused(len(data))
		return false, nil
	}
	if b.w == nil {
		w, err := b.db.content.Acquire(context.Background())
		if err != nil {
			return false, fmt.Errorf("put chunk %s: %w", id, err)
		}
		b.w = w
		b.used = append(b.used, packUse{w: w, start: w.End()})
	}
	off, err := b.w.Append(id, data)
	if err != nil {
		return false, fmt.Errorf("put chunk %s: %w", id, err)
	}
	b.chunks = append(b.chunks, chunkRow{id: id, pack: b.w.Number(), off: off, len: int64(len(data))})
	b.pending[id] = true
	if b.w.End() >= b.db.opts.MaxPackSize {
		// Roll over: later chunks of this unit go to another pack.
		b.w.Retire()
		b.w = nil
	}
	b.stats.NewChunks++
	b.stats.NewChunkBytes += int64(len(data))
	b.db.countIn(b.acct, account.ChunksWritten, 1)
	b.db.countIn(b.acct, account.PackBytesWritten, int64(pack.HeaderSize+len(data)))
	return true, nil
}

// stored reports whether id (a chunk, or with objects another object) is
// stored or was put in this unit; it begins the batch if need be. It is
// called with b.mu held. A probe that waits on a round trip (a shared
// Store's) runs with b.mu released, so that the probes of the capture's
// workers overlap; the unit may be flushed meanwhile, so the batch is
// begun again after it.
func (b *Batch) stored(id ID, objects bool) (bool, error) {
	if err := b.begin(context.Background()); err != nil {
		return false, err
	}
	if b.pending[id] {
		return true, nil
	}
	p := b.probe
	if !p.concurrent() {
		return p.has(id, objects)
	}
	b.mu.Unlock()
	ok, err := p.has(id, objects)
	b.mu.Lock()
	if err != nil {
		return false, err
	}
	if err := b.begin(context.Background()); err != nil {
		return false, err
	}
	return ok || b.pending[id], nil
}

// Concurrency is how many captures should put into the batch at once: on
// a shared Store each new chunk waits for a probe's round trip, which
// more captures than cores overlap; 0 leaves it to the capture (its
// cores).
func (b *Batch) Concurrency() int {
	if b.db.d.Postgres {
		return sharedCaptures
	}
	return 0
}

// sharedCaptures is how many captures overlap their probes on a shared
// Store: enough to hide a round trip behind the hashing of the others,
// few enough that their read buffers stay small.
const sharedCaptures = 8

func (b *Batch) reused(n int) {
	b.stats.ReusedChunks++
	b.stats.ReusedBytes += int64(n)
	b.db.countIn(b.acct, account.ChunksReused, 1)
}

func (b *Batch) putObject(k Kind, data []byte) (ID, error) {
	id := Hash(k, data)
	b.mu.Lock()
	defer b.mu.Unlock()
	ok, err := b.stored(id, true)
	if err != nil {
		return id, err
	}
	if ok {
		b.stats.ReusedObjects++
		return id, nil
	}
	b.pending[id] = true
	b.objs = append(b.objs, objectRow{id: id, kind: k, data: data})
	b.stats.NewObjects++
	b.stats.NewObjectBytes += int64(len(data))
	return id, nil
}

// PutManifest stores a chunked file's manifest and returns its id. Its
// extents must add up to Size.
func (b *Batch) PutManifest(m *Manifest) (ID, error) {
	var sum int64
	for _, x := range m.Extents {
		if x.Length <= 0 {
			return ZeroID, fmt.Errorf("put manifest: extent length %d", x.Length)
		}
		sum += x.Length
	}
	if sum != m.Size {
		return ZeroID, fmt.Errorf("put manifest: extents add up to %d, size is %d", sum, m.Size)
	}
	id, err := b.putObject(KindManifest, m.Encode())
	if err != nil {
		return id, fmt.Errorf("put manifest %s: %w", id, err)
	}
	return id, nil
}

// PutTree validates and stores a directory and returns its id. The tree
// must not be modified afterwards (it is encoded at once, so changes would
// merely be lost; the rule keeps callers honest).
func (b *Batch) PutTree(t *Tree) (ID, error) {
	if err := t.Validate(); err != nil {
		return ZeroID, fmt.Errorf("put tree: %w", err)
	}
	id, err := b.putObject(KindTree, t.Encode())
	if err != nil {
		return id, fmt.Errorf("put tree %s: %w", id, err)
	}
	return id, nil
}

// PutCommit stores a commit and returns its id; it must be valid
// (Commit.Validate).
func (b *Batch) PutCommit(c *Commit) (ID, error) {
	if err := c.Validate(); err != nil {
		return ZeroID, fmt.Errorf("put commit: %w", err)
	}
	id, err := b.putObject(KindCommit, c.Encode())
	if err != nil {
		return id, fmt.Errorf("put commit %s: %w", id, err)
	}
	return id, nil
}

// FillBehind names root, the tree the batch's capture stores: once Flush
// has made the batch durable, the Store fetches into its cache, in the
// background, the contents of root the batch's fill left out (all of
// them where captures do not fill the cache), unless Options.NoPrefetch.
// A workspace opened on the capture's commit then finds its contents in
// the cache.
func (b *Batch) FillBehind(root ID) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.behind = root
}

// fetchBehind starts the fetch FillBehind asked for, if the fill left
// anything out; b.mu held.
func (b *Batch) fetchBehind() {
	root := b.behind
	b.behind = ZeroID
	if root.IsZero() || b.db.opts.NoPrefetch || b.fill != nil && b.fill.Stats().Dropped == 0 {
		return
	}
	b.db.fc.Behind(root)
}

// Flush makes everything put since the last Flush durable and visible:
// pack data is fsynced, then all index rows and objects are inserted in
// one transaction. On error nothing of the unit becomes visible and the
// pack bytes it appended are truncated away; the batch may be retried from
// scratch or aborted.
func (b *Batch) Flush(ctx context.Context) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.done {
		return errors.New("flush: batch already aborted")
	}
	if !b.active {
		b.fill.Release()
		b.fetchBehind()
		return nil
	}
	err := b.flush(ctx)
	if err != nil {
		b.rollback()
		b.fill.Discard()
	} else {
		b.releaseWriters()
		b.stats.Flushes++
		b.fill.Release() // the cache's copies, once the contents are durable
		b.fetchBehind()
	}
	b.reset()
	b.end()
	if err != nil {
		return fmt.Errorf("flush: %w", err)
	}
	return nil
}

func (b *Batch) flush(ctx context.Context) error {
	// Leave the probes' read snapshot before waiting for the write lock: a
	// checkpoint in another process may hold that lock while it waits for
	// old snapshots to end.
	b.closeProbe()
	// The packs' fsync (mostly the device flushing its cache, whatever the
	// size), or their upload to a bucket, runs while the rows
	// are inserted; the transaction waits for it before it commits, so no
	// committed row ever points at data that is not durable.
	synced := make(chan error, 1)
	go func() {
		for _, u := range b.used {
			if err := u.w.Sync(); err != nil {
				synced <- err
				return
			}
			b.db.countIn(b.acct, account.PackSyncs, 1)
		}
		synced <- nil
	}()
	if len(b.chunks) == 0 && len(b.objs) == 0 {
		return <-synced
	}
	waited := false
	err := b.db.withTx(ctx, txInsert, func(tx *tx) error {
		if err := b.insert(ctx, tx); err != nil {
			return err
		}
		waited = true
		if err := <-synced; err != nil {
			return err
		}
		return b.db.recordPacks(ctx, tx, b.used)
	})
	if !waited {
		<-synced // never leave a sync running under a rollback
	}
	return err
}

// insert writes the unit's index rows and objects.
func (b *Batch) insert(ctx context.Context, tx *tx) error {
	// OR IGNORE: another batch may have stored the same chunk since our
	// probe; its copy wins and ours becomes dead pack bytes.
	err := insertRows(ctx, tx, `INSERT OR IGNORE INTO chunks(id, pack, off, len) VALUES `, "(?, ?, ?, ?)",
		len(b.chunks), func(i int, args []any) []any {
			c := &b.chunks[i]
			return append(args, c.id[:], c.pack, c.off, c.len)
		})
	if err != nil {
		return fmt.Errorf("index chunks: %w", err)
	}
	err = insertRows(ctx, tx, `INSERT OR IGNORE INTO objects(id, kind, data) VALUES `, "(?, ?, ?)",
		len(b.objs), func(i int, args []any) []any {
			o := &b.objs[i]
			return append(args, o.id[:], int64(o.kind), o.data)
		})
	if err != nil {
		return fmt.Errorf("store objects: %w", err)
	}
	return nil
}

// rowsPerInsert rows go in one INSERT statement: per-statement overhead
// (database/sql and the driver) dominated one-row inserts.
const rowsPerInsert = 128

// insertRows inserts n rows with multi-row INSERT statements, prepared once
// per statement size; row appends row i's values to args.
func insertRows(ctx context.Context, tx *tx, head, tuple string, n int, row func(i int, args []any) []any) error {
	var s *sqltx.Stmt
	size := 0
	defer func() {
		if s != nil {
			s.Close()
		}
	}()
	args := make([]any, 0, rowsPerInsert*4)
	for i := 0; i < n; i += rowsPerInsert {
		k := min(rowsPerInsert, n-i)
		if k != size {
			if s != nil {
				s.Close()
			}
			var err error
			s, err = tx.Prepare(ctx, head+strings.Repeat(tuple+", ", k-1)+tuple)
			if err != nil {
				return err
			}
			size = k
		}
		args = args[:0]
		for j := i; j < i+k; j++ {
			args = row(j, args)
		}
		if _, err := s.Exec(ctx, args...); err != nil {
			return err
		}
	}
	return nil
}

// rollback truncates what this unit appended and returns the writers.
func (b *Batch) rollback() {
	// Roll back in reverse so a writer used twice ends at its first start.
	for i := len(b.used) - 1; i >= 0; i-- {
		u := b.used[i]
		if err := u.w.Rollback(u.start); err != nil {
			b.db.log.Warn("batch rollback", "err", err)
			b.db.content.Discard(u.w)
			b.used[i].w = nil
		}
	}
	b.releaseWriters()
}

func (b *Batch) releaseWriters() {
	seen := map[pack.Appender]bool{}
	for _, u := range b.used {
		if u.w == nil || seen[u.w] {
			continue
		}
		seen[u.w] = true
		if err := b.db.content.Release(u.w); err != nil {
			b.db.log.Warn("release pack", "pack", u.w.Number(), "err", err)
		}
	}
	b.used = nil
	b.w = nil
}

func (b *Batch) reset() {
	b.chunks = b.chunks[:0]
	b.objs = nil
	clear(b.pending)
}

// Abort discards everything put since the last Flush (nothing of it ever
// becomes visible; appended pack bytes are truncated) and ends the batch.
// Abort after Flush just ends it. It is safe to call more than once.
func (b *Batch) Abort() {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.done {
		return
	}
	b.done = true
	b.fill.Discard()
	if b.active {
		b.rollback()
		b.reset()
		b.end()
	}
}

func (b *Batch) closeProbe() {
	if b.probe != nil {
		b.probe.close()
		b.probe = nil
	}
}

// Stats returns what the batch stored so far.
func (b *Batch) Stats() BatchStats {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.stats
}
