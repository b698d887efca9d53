package store

import (
	"errors"
	"os"
	"sync"
	"sync/atomic"

	"golang.org/x/sys/unix"

	"layerfs.dev/layerfs/internal/writeruns"
)

// A fill's writes run on fillWorkers goroutines of their own beside the
// capture that feeds them (a capture of files in the page cache keeps
// about one core busy: its walk and the batch's lock serialise it), with
// at most fillQueueBytes queued; past that, the capture writes itself.
const (
	fillWorkers    = 2
	fillQueueBytes = 64 << 20
)

// fillJob is a content (id and data) or a run of a FillWriter (w, data
// and off) to write; data is a buffer of the DB's pool, returned after.
type fillJob struct {
	fill *CacheFill
	id   ID
	w    *FillWriter
	data *[]byte
	off  int64
}

func (j fillJob) run() {
	if j.w != nil {
		j.w.writeRun(*j.data, j.off)
	} else {
		j.fill.put(j.id, *j.data)
	}
	j.fill.db.putBuffer(j.data)
}

// fillQueue runs fill jobs on up to fillWorkers goroutines, started as
// jobs come and ended when there are none.
type fillQueue struct {
	mu      sync.Mutex
	jobs    []fillJob
	bytes   int64 // of the jobs queued
	running int
	pending sync.WaitGroup // jobs not done
}

func (q *fillQueue) add(j fillJob) {
	q.pending.Add(1)
	n := int64(cap(*j.data)) // the memory it holds
	q.mu.Lock()
	if q.bytes+n > fillQueueBytes {
		q.mu.Unlock()
		j.run()
		q.pending.Done()
		return
	}
	q.jobs = append(q.jobs, j)
	q.bytes += n
	if q.running < fillWorkers {
		q.running++
		go q.work()
	}
	q.mu.Unlock()
}

func (q *fillQueue) work() {
	for {
		q.mu.Lock()
		if len(q.jobs) == 0 {
			q.running--
			q.mu.Unlock()
			return
		}
		j := q.jobs[0]
		q.jobs[0] = fillJob{}
		q.jobs = q.jobs[1:]
		q.bytes -= int64(cap(*j.data))
		q.mu.Unlock()
		j.run()
		q.pending.Done()
	}
}

func (q *fillQueue) wait() { q.pending.Wait() }

// CacheFill puts the contents a capture stores into the cache as well, as
// it reads them, so that a workspace opened on the commit reads them from
// the cache at once instead of through a first materialization. A capture
// holds every byte anyway: a content of one chunk is written from the
// capture's buffer, a larger one in runs as it is read, and where the file
// system can share blocks (a reflink: XFS, btrfs) the captured file is
// cloned instead, at no cost in disk.
//
// Filling is best effort: a content that cannot be placed (a full disk,
// an error) is left to Materialize, and nothing the fill does fails the
// capture. Only bytes the capture hashed to the content's ID are placed: a
// clone is kept only if the caller finds the file unchanged since it read
// it. A CacheFill is safe for concurrent use.
type CacheFill struct {
	db      *DB
	noClone atomic.Bool // a clone failed: this file system shares no blocks
	full    atomic.Bool // the disk is full: place nothing more
	queued  sync.Map    // IDs Put queued: ID -> struct{}
	queue   fillQueue
	stats   fillCounters
}

type fillCounters struct {
	placed, bytes, cloned, skipped atomic.Int64
}

// FillStats count what a CacheFill placed.
type FillStats struct {
	Placed  int64 `json:"placed"`  // contents placed in the cache
	Bytes   int64 `json:"bytes"`   // their bytes
	Cloned  int64 `json:"cloned"`  // of them, placed by a reflink
	Skipped int64 `json:"skipped"` // contents the cache already had
}

// NewCacheFill returns a fill of db's cache, or nil when the Store fills
// its cache on first read only (Options.NoCacheFill); a nil *CacheFill
// places nothing.
func (db *DB) NewCacheFill() *CacheFill {
	if db.opts.NoCacheFill {
		return nil
	}
	return &CacheFill{db: db}
}

// Stats tells what f placed so far.
func (f *CacheFill) Stats() FillStats {
	if f == nil {
		return FillStats{}
	}
	return FillStats{Placed: f.stats.placed.Load(), Bytes: f.stats.bytes.Load(),
		Cloned: f.stats.cloned.Load(), Skipped: f.stats.skipped.Load()}
}

// Has reports whether the cache holds content id, and counts it as
// skipped if so.
func (f *CacheFill) Has(id ID) bool {
	if f == nil || f.full.Load() {
		return true // nothing to do either way
	}
	if _, err := os.Lstat(f.db.CachePath(id)); err == nil {
		f.stats.skipped.Add(1)
		return true
	}
	return false
}

// Put places data, the whole content named id (a content of one chunk:
// id is Hash(KindChunk, data)), from a copy: the caller may reuse data
// once Put returns. isNew says the Store did not hold the content before
// this capture, so neither can its cache (but for a file an aborted
// capture left, which the link then keeps).
func (f *CacheFill) Put(id ID, data []byte, isNew bool) {
	if f == nil || !isNew && f.Has(id) {
		return
	}
	if _, queued := f.queued.LoadOrStore(id, struct{}{}); queued {
		f.stats.skipped.Add(1) // a file of this capture with the same content
		return
	}
	buf := f.db.contentBuffer(len(data))
	*buf = append((*buf)[:0], data...)
	f.queue.add(fillJob{fill: f, id: id, data: buf})
}

// put writes a queued content.
func (f *CacheFill) put(id ID, data []byte) {
	c, err := f.start(id)
	if err != nil {
		return
	}
	defer c.abort()
	if _, err := c.f.Write(data); err != nil {
		f.failed(err)
		return
	}
	f.place(c, int64(len(data)), false)
}

// Wait waits until every content put so far is placed (or dropped).
func (f *CacheFill) Wait() {
	if f != nil {
		f.queue.wait()
	}
}

// Clone places the content id by cloning the open file src, whose bytes
// the caller read and hashed to id, when the file system can share
// blocks; unchanged is asked after the clone is made and must say whether
// src still holds the bytes that were hashed. It reports whether the
// content is in the cache now (false: write it instead, or leave it).
func (f *CacheFill) Clone(id ID, src int, unchanged func() bool) bool {
	if f == nil || f.noClone.Load() {
		return false
	}
	if f.Has(id) {
		return true
	}
	c := f.CloneFile(src)
	return c != nil && c.Place(id, unchanged)
}

// CloneFile clones the open file src into a cache file not yet placed,
// before the caller reads src; nil where the file system shares no
// blocks (and from then on, for every file of the fill).
func (f *CacheFill) CloneFile(src int) *FillClone {
	if f == nil || f.noClone.Load() || f.full.Load() {
		return nil
	}
	c, err := f.start(ZeroID)
	if err != nil {
		return nil
	}
	if err := unix.IoctlFileClone(int(c.f.Fd()), src); err != nil {
		// EXDEV (another file system), EOPNOTSUPP or EINVAL (no
		// reflinks here): none of the capture's files will clone.
		f.noClone.Store(true)
		c.abort()
		return nil
	}
	return &FillClone{fill: f, c: c}
}

// FillClone is a clone of a captured file, placed once the capture knows
// its content's ID.
type FillClone struct {
	fill *CacheFill
	c    *cacheFile
}

// Place puts the clone in the cache as the content id if unchanged says
// the file cloned still holds the bytes hashed to id, and reports whether
// the content is in the cache now.
func (c *FillClone) Place(id ID, unchanged func() bool) bool {
	if c == nil {
		return false
	}
	defer c.c.abort()
	if !unchanged() {
		return false
	}
	var st unix.Stat_t
	if err := unix.Fstat(int(c.c.f.Fd()), &st); err != nil {
		return false
	}
	c.c.path = c.fill.db.CachePath(id)
	return c.fill.place(c.c, st.Size, true)
}

// Abort drops the clone; it is a no-op after Place.
func (c *FillClone) Abort() {
	if c != nil {
		c.c.abort()
	}
}

// Start begins a content written as it is read (a chunked file, whose ID
// is known once it is read whole): Write and Skip in order, then Place or
// Abort. It returns nil, which takes writes and places nothing, when f is
// nil or the disk is full.
func (f *CacheFill) Start() *FillWriter {
	if f == nil || f.full.Load() {
		return nil
	}
	c, err := f.start(ZeroID)
	if err != nil {
		return nil
	}
	return &FillWriter{fill: f, c: c}
}

// FillWriter writes one content into the cache as a capture reads it, in
// runs of up to writeruns.Size (see package writeruns) written by the
// fill's workers.
type FillWriter struct {
	fill *CacheFill
	c    *cacheFile
	run  *[]byte // the run being gathered; nil: none
	off  int64   // the file offset where run starts
	runs sync.WaitGroup

	mu  sync.Mutex // guards err, which the workers set
	err error
}

// Write appends data.
func (w *FillWriter) Write(data []byte) {
	for w != nil && len(data) > 0 {
		if w.run == nil {
			w.run = w.fill.db.runBuffer()
			*w.run = (*w.run)[:0]
		}
		b := *w.run
		n := copy(b[len(b):cap(b)], data)
		*w.run, data = b[:len(b)+n], data[n:]
		if len(*w.run) == cap(*w.run) {
			w.flush()
		}
	}
}

// Skip leaves a hole of n bytes.
func (w *FillWriter) Skip(n int64) {
	if w != nil {
		w.flush()
		w.off += n
	}
}

// flush queues the run gathered.
func (w *FillWriter) flush() {
	if w.run == nil {
		return
	}
	run, off := w.run, w.off
	w.run, w.off = nil, off+int64(len(*run))
	if len(*run) == 0 {
		w.fill.db.putBuffer(run)
		return
	}
	w.runs.Add(1)
	w.fill.queue.add(fillJob{fill: w.fill, w: w, data: run, off: off})
}

// writeRun writes a queued run.
func (w *FillWriter) writeRun(run []byte, off int64) {
	defer w.runs.Done()
	w.mu.Lock()
	failed := w.err != nil
	w.mu.Unlock()
	if failed {
		return
	}
	if _, err := w.c.f.WriteAt(run, off); err != nil {
		w.mu.Lock()
		w.err = err
		w.mu.Unlock()
	}
}

// Place puts what was written in the cache as the content id of size
// bytes, once its runs are written.
func (w *FillWriter) Place(id ID, size int64) {
	if w == nil {
		return
	}
	defer w.Abort()
	w.flush()
	w.runs.Wait()
	err := w.err
	if err == nil {
		err = w.c.f.Truncate(size)
	}
	if err != nil {
		w.fill.failed(err)
		return
	}
	if _, err := os.Lstat(w.fill.db.CachePath(id)); err == nil {
		w.fill.stats.skipped.Add(1)
		return
	}
	w.c.path = w.fill.db.CachePath(id)
	w.fill.place(w.c, size, false)
}

// Abort drops what was written; it is a no-op after Place.
func (w *FillWriter) Abort() {
	if w == nil {
		return
	}
	if w.run != nil {
		w.fill.db.putBuffer(w.run)
		w.run = nil
	}
	w.runs.Wait()
	w.c.abort()
}

// start makes the cache file of id (ZeroID: named when placed).
func (f *CacheFill) start(id ID) (*cacheFile, error) {
	c, err := f.db.newCacheFile(f.db.CachePath(id))
	if err != nil {
		f.failed(err)
	}
	return c, err
}

func (f *CacheFill) place(c *cacheFile, size int64, cloned bool) bool {
	placed, err := c.place(size)
	if err != nil {
		f.failed(err)
		return false
	}
	if !placed {
		f.stats.skipped.Add(1)
		return true
	}
	f.stats.placed.Add(1)
	f.stats.bytes.Add(size)
	if cloned {
		f.stats.cloned.Add(1)
	}
	return true
}

// failed notes a fill's error: a full disk stops the fill, anything else
// costs the one content.
func (f *CacheFill) failed(err error) {
	if errors.Is(err, unix.ENOSPC) || errors.Is(err, unix.EDQUOT) {
		if !f.full.Swap(true) {
			f.db.log.Warn("the Store's cache is not filled by captures while the disk is full", "err", err)
		}
		return
	}
	f.db.log.Debug("fill the Store's cache", "err", err)
}

// Buffers of fill jobs come from two pools of the DB: runs of
// writeruns.Size, and small contents of up to smallContent bytes; a
// larger content of one chunk gets a buffer of its own.
const smallContent = 64 << 10

// runBuffer returns a buffer of writeruns.Size for a FillWriter's runs.
func (db *DB) runBuffer() *[]byte {
	if b, ok := db.runBufs.Get().(*[]byte); ok {
		return b
	}
	b := make([]byte, 0, writeruns.Size)
	return &b
}

// contentBuffer returns a buffer with room for n bytes.
func (db *DB) contentBuffer(n int) *[]byte {
	if n > smallContent {
		b := make([]byte, 0, n)
		return &b
	}
	if b, ok := db.smallBufs.Get().(*[]byte); ok {
		return b
	}
	b := make([]byte, 0, smallContent)
	return &b
}

// putBuffer returns a buffer to its pool.
func (db *DB) putBuffer(b *[]byte) {
	switch cap(*b) {
	case writeruns.Size:
		db.runBufs.Put(b)
	case smallContent:
		db.smallBufs.Put(b)
	}
}
