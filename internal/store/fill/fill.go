package fill

import (
	"context"
	"errors"
	"os"
	"sync"
	"sync/atomic"

	"golang.org/x/sys/unix"

	"layerfs.dev/layerfs/internal/account"
	"layerfs.dev/layerfs/internal/store/cache"
	"layerfs.dev/layerfs/internal/store/object"
	"layerfs.dev/layerfs/internal/writeruns"
)

// Capture is the fill of the cache behind one capture: it puts the
// contents the capture stores into the cache as well, from the bytes the
// capture read, so that a workspace opened on the
// commit reads them from the cache instead of through a first
// materialization: a content of one chunk from a copy of the capture's
// buffer, a larger one in runs as it is read, and, where the file system
// shares blocks (a reflink: XFS, btrfs), a clone of the captured file.
//
// The cache's writes are made behind the capture, not in it: a capture
// hands them to the DB's fill queue (at most fillQueueBytes of data held)
// and goes on; a batch's fill holds them until the batch is flushed (its
// syncs then carry none of them, and an aborted capture writes nothing),
// and the queue's workers write them at the lowest CPU and I/O priority.
// Making a file per content costs about what capturing it costs (an
// inode and a directory entry each), so a capture that waited for them
// would take twice as long. A content the queue has no room for is
// dropped and left to the fetch behind the capture (Behind: package
// store's Batch.FillBehind starts it when its fill dropped any), which
// reads it back from its pack once the queue is written (Wait).
//
// Filling is best effort: a content that cannot be placed (a full disk,
// an error) is left to Prefetch or Materialize, and nothing the fill does
// fails the capture. Only bytes the capture hashed to the content's ID
// are placed: a clone is kept only if the file is unchanged since it was
// read. A Capture is safe for concurrent use.
type Capture struct {
	fc      *Cache
	noClone atomic.Bool // a clone failed: this file system shares no blocks
	// cloneProbed: a first clone was tried, under probe.
	cloneProbed atomic.Bool
	probe       sync.Mutex
	full        atomic.Bool // the disk is full: place nothing more
	queued      sync.Map    // IDs Put queued: object.ID -> struct{}
	stats       fillCounters
	// hold keeps the fill's jobs (held, under the queue's lock) until
	// Release: a batch's, whose flush must not sync what they write.
	hold bool
	held []fillJob
}

type fillCounters struct {
	placed, bytes, cloned, skipped, dropped atomic.Int64
}

// Stats count what a Capture placed.
type Stats struct {
	Placed  int64 `json:"placed"`  // contents placed in the cache
	Bytes   int64 `json:"bytes"`   // their bytes
	Cloned  int64 `json:"cloned"`  // of them, placed by a reflink
	Skipped int64 `json:"skipped"` // contents the cache had already
	Dropped int64 `json:"dropped"` // contents the fill queue had no room for
}

// The fill queue's bounds: the data its jobs hold, and the open files
// its clones hold.
const (
	fillWorkers    = 2
	fillQueueBytes = 128 << 20
	fillQueueFiles = 256
)

// NewCapture returns a fill of the cache, or nil when the Store fills
// its cache on first read only (Config.NoFill); a nil *Capture
// places nothing.
func (fc *Cache) NewCapture() *Capture {
	if fc.noFill {
		return nil
	}
	return &Capture{fc: fc}
}

// NewHeldCapture is a batch's fill: its writes wait until the batch is
// flushed (Release), so that the flush's syncs (the pack's, the index's)
// carry none of them, and a capture's last bytes are not held up by
// them.
func (fc *Cache) NewHeldCapture() *Capture {
	f := fc.NewCapture()
	if f != nil {
		f.hold = true
	}
	return f
}

// Release hands what f held to the fill queue's workers.
func (f *Capture) Release() {
	if f != nil {
		f.fc.queue.release(f)
	}
}

// Discard drops what f held: its contents are left to the prefetch.
func (f *Capture) Discard() {
	if f != nil {
		f.fc.queue.discard(f)
	}
}

// Wait waits until the fill queue has written what captures gave it
// so far, or ctx ends.
func (fc *Cache) Wait(ctx context.Context) error { return fc.queue.wait(ctx) }

// Stats tells what f placed so far.
func (f *Capture) Stats() Stats {
	if f == nil {
		return Stats{}
	}
	return Stats{Placed: f.stats.placed.Load(), Bytes: f.stats.bytes.Load(),
		Cloned: f.stats.cloned.Load(), Skipped: f.stats.skipped.Load(), Dropped: f.stats.dropped.Load()}
}

// Wait waits until every content f was given is placed or dropped.
func (f *Capture) Wait() {
	if f != nil {
		f.fc.queue.wait(context.Background())
	}
}

// has reports whether the cache holds content id, and counts it as
// skipped if so.
func (f *Capture) has(id object.ID) bool {
	if _, err := os.Lstat(f.fc.dir.Path(id)); err == nil {
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
func (f *Capture) Put(id object.ID, data []byte, isNew bool) {
	if f == nil || !isNew && f.has(id) {
		return
	}
	if f.full.Load() {
		f.dropped()
		return
	}
	if _, queued := f.queued.LoadOrStore(id, struct{}{}); queued {
		f.stats.skipped.Add(1) // a file of this capture with the same content
		return
	}
	buf := f.fc.contentBuffer(len(data))
	*buf = append((*buf)[:0], data...)
	if !f.fc.queue.add(fillJob{fill: f, id: id, data: buf}) {
		f.fc.putBuffer(buf)
		f.dropped()
	}
}

// put writes a queued content.
func (f *Capture) put(id object.ID, data []byte) {
	c, err := f.start(id)
	if err != nil {
		f.dropped()
		return
	}
	defer c.Abort()
	if _, err := c.File().Write(data); err != nil {
		f.failed(err)
		f.dropped()
		return
	}
	if !f.place(c, int64(len(data)), false) {
		f.dropped()
	}
}

// Clone places the content id by cloning the open file src, whose bytes
// the caller read and hashed to id, when the file system can share
// blocks. unchanged is asked once the clone is made (maybe after Clone
// returns: src is duplicated) and must say whether the file still holds
// the bytes that were hashed. It reports whether the content is, or will
// be, placed so (false: Put it instead, or leave it).
func (f *Capture) Clone(id object.ID, src int, unchanged func(fd int) bool) bool {
	if f == nil || f.noClone.Load() || f.full.Load() {
		return false
	}
	if f.has(id) {
		return true
	}
	fd, err := unix.FcntlInt(uintptr(src), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		return false
	}
	j := fillJob{fill: f, id: id, src: fd, unchanged: unchanged}
	if !f.cloneProbed.Load() {
		// The first clone, here: whether the file system shares blocks
		// decides how every other content of the capture is placed.
		f.probe.Lock()
		defer f.probe.Unlock()
		if !f.cloneProbed.Load() {
			j.clone()
			f.cloneProbed.Store(true)
			return !f.noClone.Load()
		}
	}
	if f.noClone.Load() { // found out meanwhile
		unix.Close(fd)
		return false
	}
	if !f.fc.queue.add(j) {
		j.clone() // no room in the queue: here
	}
	return !f.noClone.Load()
}

// CanClone reports whether Clone can place contents of the capture, which
// reads the open file src: before any clone was tried, a clone of src
// tells (and is dropped).
func (f *Capture) CanClone(src int) bool {
	if f == nil || f.noClone.Load() {
		return false
	}
	if !f.cloneProbed.Load() {
		f.probe.Lock()
		defer f.probe.Unlock()
		if !f.cloneProbed.Load() {
			if c, err := f.start(object.ZeroID); err == nil {
				if unix.IoctlFileClone(int(c.File().Fd()), src) != nil {
					f.noClone.Store(true)
				}
				c.Abort()
			}
			f.cloneProbed.Store(true)
		}
	}
	return !f.noClone.Load()
}

// clone is a Clone's job. A content it cannot place counts as dropped,
// unless it is the first clone (whose caller puts the content instead).
func (j fillJob) clone() {
	defer unix.Close(j.src)
	f := j.fill
	if !j.cloneTry() && f.cloneProbed.Load() {
		f.dropped()
	}
}

// cloneTry clones and places, and reports whether the content is placed.
func (j fillJob) cloneTry() bool {
	f := j.fill
	c, err := f.start(j.id)
	if err != nil {
		return false
	}
	defer c.Abort()
	if err := unix.IoctlFileClone(int(c.File().Fd()), j.src); err != nil {
		// EXDEV (another file system), EOPNOTSUPP or EINVAL (no
		// reflinks here): none of the capture's files will clone.
		f.noClone.Store(true)
		return false
	}
	if !j.unchanged(j.src) {
		return false
	}
	var st unix.Stat_t
	if err := unix.Fstat(int(c.File().Fd()), &st); err != nil {
		return false
	}
	return f.place(c, st.Size, true)
}

// Start begins a content written as it is read (a chunked file, whose ID
// is known once it is read whole): Write and Skip in order, then Place or
// Abort. It returns nil, which takes writes and places nothing, when f is
// nil or the disk is full.
func (f *Capture) Start() *Writer {
	if f == nil {
		return nil
	}
	var c *cache.File
	var err error
	if f.full.Load() {
		err = unix.ENOSPC
	} else {
		c, err = f.start(object.ZeroID)
	}
	if err != nil {
		f.dropped()
		return nil
	}
	return &Writer{fill: f, c: c}
}

// Writer writes one content into the cache as a capture reads it, in
// runs of up to writeruns.Size (see package writeruns) written by the
// fill queue; the last of them to be written places the content.
type Writer struct {
	fill *Capture
	run  *[]byte // the run being gathered; nil: none
	off  int64   // the file offset where run starts

	mu      sync.Mutex  // guards the rest, which the queue's workers share
	c       *cache.File // nil once placed or given up
	pending int         // runs queued, not written
	sealed  bool        // Place or Abort was called
	id      object.ID
	size    int64
	failed  error
}

// Write appends data.
func (w *Writer) Write(data []byte) {
	for w != nil && len(data) > 0 {
		if w.run == nil {
			w.run = w.fill.fc.runBuffer()
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
func (w *Writer) Skip(n int64) {
	if w != nil {
		w.flush()
		w.off += n
	}
}

// flush queues the run gathered; a run the queue has no room for gives
// the content up.
func (w *Writer) flush() {
	if w.run == nil {
		return
	}
	run, off := w.run, w.off
	w.run, w.off = nil, off+int64(len(*run))
	if len(*run) == 0 {
		w.fill.fc.putBuffer(run)
		return
	}
	w.mu.Lock()
	w.pending++
	w.mu.Unlock()
	if !w.fill.fc.queue.add(fillJob{fill: w.fill, w: w, data: run, off: off}) {
		w.fill.fc.putBuffer(run)
		w.ran(errFillDropped)
	}
}

var (
	errFillDropped = errors.New("no room in the fill queue")
	errFillAborted = errors.New("capture aborted")
)

// writeRun writes a queued run.
func (w *Writer) writeRun(run []byte, off int64) {
	w.mu.Lock()
	c, failed := w.c, w.failed
	w.mu.Unlock()
	var err error
	if c != nil && failed == nil {
		_, err = c.File().WriteAt(run, off)
	}
	w.ran(err)
}

// ran notes a run written (or not: err), and places the content once it
// is sealed and its last run is written.
func (w *Writer) ran(err error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.pending--
	if err != nil && w.failed == nil {
		w.failed = err
	}
	w.finishLocked()
}

// Place puts what was written in the cache as the content id of size
// bytes, once its runs are written (maybe after Place returns).
func (w *Writer) Place(id object.ID, size int64) {
	if w == nil {
		return
	}
	w.flush()
	w.mu.Lock()
	defer w.mu.Unlock()
	w.sealed, w.id, w.size = true, id, size
	w.finishLocked()
}

// Abort drops what was written (instead of Place).
func (w *Writer) Abort() {
	if w == nil {
		return
	}
	if w.run != nil {
		w.fill.fc.putBuffer(w.run)
		w.run = nil
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	w.sealed = true
	if w.failed == nil {
		w.failed = errFillAborted
	}
	w.finishLocked()
}

// finishLocked places or drops the content once it is sealed and nothing
// is left to write; w.mu held.
func (w *Writer) finishLocked() {
	if !w.sealed || w.pending > 0 || w.c == nil {
		return
	}
	c := w.c
	w.c = nil
	defer c.Abort()
	f := w.fill
	err := w.failed
	switch {
	case errors.Is(err, errFillAborted):
		return
	case errors.Is(err, errFillDropped):
		f.dropped()
		return
	}
	if err == nil {
		err = c.File().Truncate(w.size)
	}
	if err != nil {
		f.failed(err)
		f.dropped()
		return
	}
	if f.has(w.id) {
		return
	}
	c.SetPath(f.fc.dir.Path(w.id))
	if !f.place(c, w.size, false) {
		f.dropped()
	}
}

// start makes the cache file of id (ZeroID: named when placed).
func (f *Capture) start(id object.ID) (*cache.File, error) {
	c, err := f.fc.dir.Create(f.fc.dir.Path(id))
	if err != nil {
		f.failed(err)
	}
	return c, err
}

func (f *Capture) place(c *cache.File, size int64, cloned bool) bool {
	placed, err := c.Place(size)
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
	// Placed behind the capture, after its request may have answered: in
	// the totals only, so that a receipt does not depend on the queue.
	f.fc.total.Add(account.CacheBytes, size)
	if cloned {
		f.stats.cloned.Add(1)
	}
	return true
}

// dropped counts a content left out for want of room.
func (f *Capture) dropped() {
	f.stats.dropped.Add(1)
}

// failed notes a fill's error: a full disk stops the fill, anything else
// costs the one content.
func (f *Capture) failed(err error) {
	if errors.Is(err, unix.ENOSPC) || errors.Is(err, unix.EDQUOT) {
		if !f.full.Swap(true) {
			f.fc.log.Warn("the Store's cache is not filled by captures while the disk is full", "err", err)
		}
		return
	}
	f.fc.log.Debug("fill the Store's cache", "err", err)
}

// fillJob is a content (id and data), a run of a Writer (w, data and
// off) or a clone (id, src and unchanged) to write; data is a buffer of
// the DB's pool, returned after.
type fillJob struct {
	fill      *Capture
	id        object.ID
	w         *Writer
	data      *[]byte
	off       int64
	src       int // a clone's file, closed after
	unchanged func(fd int) bool
}

func (j fillJob) run() {
	switch {
	case j.w != nil:
		j.w.writeRun(*j.data, j.off)
	case j.data != nil:
		j.fill.put(j.id, *j.data)
	default:
		j.clone()
		return
	}
	j.fill.fc.putBuffer(j.data)
}

// isContent reports whether j writes a whole content from its data.
func (j fillJob) isContent() bool { return j.w == nil && j.data != nil }

// drop gives the job up: its content is left out of the cache.
func (j fillJob) drop() {
	switch {
	case j.w != nil:
		j.w.ran(errFillAborted)
	case j.data == nil:
		unix.Close(j.src)
	}
	if j.data != nil {
		j.fill.fc.putBuffer(j.data)
	}
	if j.w == nil {
		j.fill.dropped()
	}
}

// bytes is the memory the job holds.
func (j fillJob) bytes() int64 {
	if j.data == nil {
		return 0
	}
	return int64(cap(*j.data))
}

// fillQueue runs fill jobs on up to fillWorkers goroutines, started as
// jobs come and ended when there are none, each on a thread of the lowest
// priority.
type fillQueue struct {
	mu   sync.Mutex
	jobs []fillJob
	// contents are the queued jobs of whole contents, by ID: a read that
	// needs one takes it out and writes it at once (serve); the worker
	// that comes to a job taken so skips it.
	contents map[object.ID]fillJob
	bytes    int64 // held by the jobs queued
	files    int   // clones queued
	running  int
	idle     *sync.Cond // signalled when the queue empties and its workers end
}

// add queues j and reports whether there was room.
func (q *fillQueue) add(j fillJob) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	clone := j.data == nil
	if q.bytes+j.bytes() > fillQueueBytes || clone && q.files >= fillQueueFiles {
		return false
	}
	q.bytes += j.bytes()
	if clone {
		q.files++
	}
	if j.isContent() {
		if q.contents == nil {
			q.contents = map[object.ID]fillJob{}
		}
		q.contents[j.id] = j
	}
	if j.fill.hold {
		j.fill.held = append(j.fill.held, j)
		return true
	}
	q.jobs = append(q.jobs, j)
	q.startLocked()
	return true
}

// startLocked starts workers for the jobs queued; q.mu held.
func (q *fillQueue) startLocked() {
	for q.running < min(fillWorkers, len(q.jobs)) {
		q.running++
		go q.work()
	}
}

// release queues what f held.
func (q *fillQueue) release(f *Capture) {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.jobs = append(q.jobs, f.held...)
	f.held = nil
	q.startLocked()
}

// discard drops what f held.
func (q *fillQueue) discard(f *Capture) {
	q.mu.Lock()
	held := f.held
	f.held = nil
	var drop []fillJob
	for _, j := range held {
		q.bytes -= j.bytes()
		if j.data == nil {
			q.files--
		}
		if q.take(j) {
			drop = append(drop, j)
		}
	}
	q.mu.Unlock()
	for _, j := range drop {
		j.drop()
	}
}

// take reports whether the job j is still its worker's to run (not a
// content a read took) and takes it out of contents; q.mu held.
func (q *fillQueue) take(j fillJob) bool {
	if !j.isContent() {
		return true
	}
	if got, ok := q.contents[j.id]; !ok || got.data != j.data {
		return false
	}
	delete(q.contents, j.id)
	return true
}

// serve writes the content id now if a job of the queue holds it, and
// reports whether it is in the cache.
func (q *fillQueue) serve(id object.ID) bool {
	q.mu.Lock()
	j, ok := q.contents[id]
	if ok {
		delete(q.contents, id)
	}
	q.mu.Unlock()
	if !ok {
		return false
	}
	j.fill.put(j.id, *j.data)
	j.fill.fc.putBuffer(j.data)
	_, err := os.Lstat(j.fill.fc.dir.Path(id))
	return err == nil
}

func (q *fillQueue) work() { lowPriority(q.jobsLoop) }

// jobsLoop runs jobs until there are none.
func (q *fillQueue) jobsLoop() {
	for {
		q.mu.Lock()
		if len(q.jobs) == 0 {
			q.running--
			if q.running == 0 && q.idle != nil {
				q.idle.Broadcast()
			}
			q.mu.Unlock()
			return
		}
		j := q.jobs[0]
		q.jobs[0] = fillJob{}
		q.jobs = q.jobs[1:]
		q.bytes -= j.bytes()
		if j.data == nil {
			q.files--
		}
		mine := q.take(j)
		q.mu.Unlock()
		if mine {
			j.run()
		}
	}
}

// wait waits until the queue is empty and its workers ended, or ctx ends.
func (q *fillQueue) wait(ctx context.Context) error {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.idle == nil {
		q.idle = sync.NewCond(&q.mu)
	}
	stop := context.AfterFunc(ctx, func() {
		q.mu.Lock()
		defer q.mu.Unlock()
		q.idle.Broadcast()
	})
	defer stop()
	for q.running > 0 || len(q.jobs) > 0 {
		if err := ctx.Err(); err != nil {
			return err
		}
		q.idle.Wait()
	}
	return nil
}

// Buffers of fill jobs come from pools of the DB: runs of writeruns.Size,
// and contents of one chunk in classes of up to 4, 16 and 64 KiB (the
// queue's bound counts what they hold); a larger content of one chunk
// gets a buffer of its own.
var contentClasses = [...]int{4 << 10, 16 << 10, 64 << 10}

// runBuffer returns a buffer of writeruns.Size for a Writer's runs.
func (fc *Cache) runBuffer() *[]byte {
	if b, ok := fc.runBufs.Get().(*[]byte); ok {
		return b
	}
	b := make([]byte, 0, writeruns.Size)
	return &b
}

// contentBuffer returns a buffer with room for n bytes.
func (fc *Cache) contentBuffer(n int) *[]byte {
	for i, c := range contentClasses {
		if n <= c {
			if b, ok := fc.contentBufs[i].Get().(*[]byte); ok {
				return b
			}
			b := make([]byte, 0, c)
			return &b
		}
	}
	b := make([]byte, 0, n)
	return &b
}

// putBuffer returns a buffer to its pool.
func (fc *Cache) putBuffer(b *[]byte) {
	if cap(*b) == writeruns.Size {
		fc.runBufs.Put(b)
		return
	}
	for i, c := range contentClasses {
		if cap(*b) == c {
			fc.contentBufs[i].Put(b)
		}
	}
}
