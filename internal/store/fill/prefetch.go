package fill

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"os"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"layerfs.dev/layerfs/internal/account"
	"layerfs.dev/layerfs/internal/store/cache"
	"layerfs.dev/layerfs/internal/store/object"
	"layerfs.dev/layerfs/wire/errclass"
)

// Prefetch puts the contents a commit needs in the cache ahead of its
// workspace's reads (a host of a fleet that never saw the commit, a cache
// evicted): the contents the cache lacks are located in the index in a
// few statements, their chunks sorted in pack order and read in spans of
// many chunks each (one pread, or one ranged GET of a pack object),
// several spans at a time, on threads whose CPU and I/O priority are the
// lowest (nice 19, the idle I/O class), and every chunk is checked against
// its ID before its bytes go into a content. A content is placed whole,
// as Materialize places it; a read of the workspace that needs a content
// first materializes it itself, and the spans wait while such reads run
// (foreground). What the fill queue holds (fill.go) is written first.

// Content names a file content: its object (a chunk or a manifest), its
// kind and its size.
type Content struct {
	ID   object.ID
	Kind object.Kind
	Size int64
}

// PrefetchStats tell what a Prefetch did.
type PrefetchStats struct {
	Contents  int           `json:"contents"`   // contents asked for
	Missing   int           `json:"missing"`    // of them, not in the cache
	Placed    int           `json:"placed"`     // placed by the prefetch
	Bytes     int64         `json:"bytes"`      // their bytes
	Reads     int           `json:"reads"`      // spans read (preads or ranged GETs)
	ReadBytes int64         `json:"read_bytes"` // bytes the spans read
	Took      time.Duration `json:"took_ns"`
}

// Span limits: a span holds chunks of one pack no further apart than
// maxGap and is at most maxSpan long (a chunk longer than that is a span
// of its own). A bucket's round trip costs more than its bytes, so its
// spans are longer and may read more bytes between chunks.
type spanLimits struct {
	maxSpan, maxGap int64
	workers         int
}

var (
	packSpans   = spanLimits{maxSpan: 4 << 20, maxGap: 64 << 10, workers: 2}
	bucketSpans = spanLimits{maxSpan: 8 << 20, maxGap: 1 << 20, workers: 8}
)

// Prefetch puts those of contents the cache lacks in it; see above. It
// returns when every content is placed or given up on (an error other
// than the context's is reported, and the contents that failed are left
// to Materialize).
func (fc *Cache) Prefetch(ctx context.Context, contents []Content) (PrefetchStats, error) {
	t0 := time.Now()
	p := &prefetch{fc: fc, uses: map[object.ID][]chunkUse{}, byID: map[object.ID]*want{}, limits: fc.spans, acct: account.From(ctx)}
	p.stats.Contents = len(contents)
	// What captures are writing into the cache is not missing.
	if err := fc.Wait(ctx); err != nil {
		return p.stats, fmt.Errorf("prefetch: %w", err)
	}
	p.missing(contents)
	if len(p.wants) == 0 {
		p.stats.Took = time.Since(t0)
		return p.stats, nil
	}
	defer fc.src.ReadLock()()
	err := p.resolve(ctx)
	if err == nil {
		err = p.fetch(ctx)
	}
	p.stats.Placed = int(p.placed.Load())
	p.stats.Bytes = p.bytes.Load()
	p.stats.Took = time.Since(t0)
	if err != nil {
		return p.stats, fmt.Errorf("prefetch: %w", err)
	}
	return p.stats, nil
}

// prefetch is one run of Prefetch.
type prefetch struct {
	fc     *Cache
	limits spanLimits
	wants  []*want
	byID   map[object.ID]*want
	uses   map[object.ID][]chunkUse // where each chunk needed goes
	locs   []chunkLoc               // the chunks needed, in pack order
	spans  []*span
	where  map[object.ID]locRef // each chunk's span
	stats  PrefetchStats

	placed atomic.Int64
	bytes  atomic.Int64
	mu     sync.Mutex // guards errs
	errs   []error
	// acct is the account of the request the prefetch is made for, if any
	// (a content it places for a workspace's read too: serve).
	acct *account.Account
}

// want is a content to place. A chunked one is written chunk by chunk
// into its cache file as its chunks come; left counts its extents with
// data not written yet, written which are.
type want struct {
	c       Content
	m       *object.Manifest // nil: a content of one chunk
	mu      sync.Mutex
	file    *cache.File // opened with its first chunk
	left    int
	written []bool // by extent
	dead    bool   // placed, or given up
}

// chunkUse is a chunk's place in a content: its extent and offset.
type chunkUse struct {
	w   *want
	ext int
	off int64
}

type chunkLoc struct {
	id             object.ID
	pack, off, len int64
}

// missing keeps the contents the cache lacks, each once.
func (p *prefetch) missing(contents []Content) {
	seen := make(map[object.ID]bool, len(contents))
	for _, c := range contents {
		if c.Size == 0 || c.ID.IsZero() || seen[c.ID] {
			continue
		}
		seen[c.ID] = true
		if _, err := os.Lstat(p.fc.dir.Path(c.ID)); err == nil {
			continue
		}
		w := &want{c: c}
		p.wants = append(p.wants, w)
		p.byID[c.ID] = w
	}
	p.stats.Missing = len(p.wants)
}

// resolve reads the manifests of the chunked contents and the locations
// of every chunk needed, a batch of IDs per statement, and sorts the
// chunks in pack order.
func (p *prefetch) resolve(ctx context.Context) error {
	var manifests []object.ID
	byID := map[object.ID]*want{}
	for _, w := range p.wants {
		switch w.c.Kind {
		case object.KindChunk:
			p.uses[w.c.ID] = append(p.uses[w.c.ID], chunkUse{w: w})
			w.left, w.written = 1, make([]bool, 1)
		case object.KindManifest:
			manifests = append(manifests, w.c.ID)
			byID[w.c.ID] = w
		default:
			return fmt.Errorf("content %s: object kind %s: %w", w.c.ID.Short(), w.c.Kind, object.ErrCorrupt)
		}
	}
	err := p.fc.src.Manifests(ctx, manifests, func(id object.ID, data []byte) error {
		w := byID[id]
		if w == nil {
			return nil
		}
		if got := object.Hash(object.KindManifest, data); got != w.c.ID {
			return fmt.Errorf("manifest %s in the objects table hashes to %s: %w", w.c.ID, got, object.ErrCorrupt)
		}
		m, err := object.DecodeManifest(data)
		if err != nil {
			return fmt.Errorf("manifest %s: %w", w.c.ID, err)
		}
		if m.Size != w.c.Size {
			return fmt.Errorf("manifest %s has %d bytes, the tree says %d: %w", w.c.ID, m.Size, w.c.Size, object.ErrCorrupt)
		}
		w.m = m
		w.written = make([]bool, len(m.Extents))
		var off int64
		for i, x := range m.Extents {
			if !x.Chunk.IsZero() {
				p.uses[x.Chunk] = append(p.uses[x.Chunk], chunkUse{w: w, ext: i, off: off})
				w.left++
			}
			off += x.Length
		}
		return nil
	})
	if err != nil {
		return err
	}
	for _, w := range byID {
		if w.m == nil {
			return fmt.Errorf("manifest %s: %w", w.c.ID, errclass.NotFound)
		}
	}
	ids := make([]object.ID, 0, len(p.uses))
	for id := range p.uses {
		ids = append(ids, id)
	}
	err = p.fc.src.Chunks(ctx, ids, func(id object.ID, num, off, n int64) error {
		p.locs = append(p.locs, chunkLoc{id: id, pack: num, off: off, len: n})
		return nil
	})
	if err != nil {
		return err
	}
	if len(p.locs) != len(ids) {
		return fmt.Errorf("%d of %d chunks are not indexed: %w", len(ids)-len(p.locs), len(ids), errclass.NotFound)
	}
	slices.SortFunc(p.locs, func(a, b chunkLoc) int {
		return cmp.Or(cmp.Compare(a.pack, b.pack), cmp.Compare(a.off, b.off))
	})
	return nil
}

// span is a run of chunks of one pack read at once. Its bytes stay until
// its chunks are written (or the prefetch ends).
type span struct {
	pack, off, end int64
	locs           []chunkLoc
	ready          chan struct{} // closed once read: buf or err set
	mu             sync.RWMutex  // guards buf, which a foreground read may use
	buf            []byte
	bad            []bool // by loc: the chunk's bytes do not hash to its object.ID
	err            error
	left           atomic.Int64 // locs not written yet
}

// locRef is a chunk's place in a span.
type locRef struct {
	s *span
	i int
}

// data returns the verified bytes of the span's i'th chunk, if the span
// was read and still holds them.
func (s *span) data(i int) ([]byte, bool) {
	select {
	case <-s.ready:
	default:
		return nil, false
	}
	if s.err != nil || s.bad[i] {
		return nil, false
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.buf == nil {
		return nil, false
	}
	l := s.locs[i]
	return s.buf[l.off-s.off : l.off-s.off+l.len], true
}

// firstSpan is the longest first span: spans grow from it (doubling, up
// to maxSpan), so that the first contents, which a workspace opened now
// reads first, arrive before the later ones are read.
const firstSpan = 256 << 10

// cut cuts the sorted chunks into spans.
func (p *prefetch) cut() {
	limit := int64(firstSpan)
	for _, l := range p.locs {
		if n := len(p.spans); n > 0 {
			s := p.spans[n-1]
			if s.pack == l.pack && l.off >= s.end && l.off-s.end <= p.limits.maxGap && l.off+l.len-s.off <= limit {
				s.end = l.off + l.len
				s.locs = append(s.locs, l)
				continue
			}
			limit = min(2*limit, p.limits.maxSpan)
		}
		p.spans = append(p.spans, &span{pack: l.pack, off: l.off, end: l.off + l.len, locs: []chunkLoc{l}, ready: make(chan struct{})})
	}
	p.where = make(map[object.ID]locRef, len(p.locs))
	for _, s := range p.spans {
		s.left.Store(int64(len(s.locs)))
		s.bad = make([]bool, len(s.locs))
		for i, l := range s.locs {
			p.where[l.id] = locRef{s, i}
		}
	}
}

// Writers and the spans ahead of them: the contents are written in pack
// order by writeWorkers threads, while the span readers read at most
// spansAhead spans past the first not written.
const (
	writeWorkers = 2
	writeBatch   = 16
)

// fetch reads the spans and writes the contents: readers read spans in
// order, writers take the chunks in pack order as their spans arrive. A
// foreground read of a content whose chunks are read meanwhile is served
// from them (serve).
func (p *prefetch) fetch(ctx context.Context) error {
	p.cut()
	p.stats.Reads = len(p.spans)
	for _, s := range p.spans {
		p.stats.ReadBytes += s.end - s.off
	}
	p.fc.prefetches.add(p)
	defer p.fc.prefetches.remove(p)
	parent := ctx
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	ahead := make(chan struct{}, 2*p.limits.workers) // a token per span held
	var nextSpan, nextLoc atomic.Int64
	var wg sync.WaitGroup
	for range min(p.limits.workers, len(p.spans)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			lowPriority(func() { p.readSpans(ctx, &nextSpan, ahead) })
		}()
	}
	var writers sync.WaitGroup
	for range writeWorkers {
		writers.Add(1)
		go func() {
			defer writers.Done()
			lowPriority(func() { p.writeChunks(ctx, &nextLoc, ahead) })
		}()
	}
	writers.Wait()
	cancel() // readers waiting for a token
	wg.Wait()
	for _, w := range p.wants {
		w.mu.Lock()
		if w.file != nil {
			w.file.Abort()
			w.file = nil
		}
		w.dead = true
		w.mu.Unlock()
	}
	if err := parent.Err(); err != nil {
		return err
	}
	return errors.Join(p.errs...)
}

// readSpans reads spans from next on. A token of ahead is taken before a
// span is claimed, so that the spans holding tokens are always the first
// ones not written, which the writers wait for.
func (p *prefetch) readSpans(ctx context.Context, next *atomic.Int64, ahead chan struct{}) {
	for {
		select {
		case ahead <- struct{}{}:
		case <-ctx.Done():
			return
		}
		i := int(next.Add(1)) - 1
		if i >= len(p.spans) {
			<-ahead
			return
		}
		s := p.spans[i]
		p.fc.fg.yield(ctx)
		p.read(ctx, s)
		close(s.ready)
	}
}

// read reads one span and checks its chunks.
func (p *prefetch) read(ctx context.Context, s *span) {
	buf, err := p.fc.src.ReadRange(ctx, s.pack, s.off, s.end-s.off)
	if err != nil {
		s.err = fmt.Errorf("read pack %d at %d+%d: %w", s.pack, s.off, s.end-s.off, err)
		p.fail(s.err)
		return
	}
	account.Charge(ctx, p.fc.total, account.PackBytesRead, int64(len(buf)))
	for i, l := range s.locs {
		data := buf[l.off-s.off : l.off-s.off+l.len]
		if got := object.Hash(object.KindChunk, data); got != l.id {
			p.fail(fmt.Errorf("chunk %s in pack %d at offset %d hashes to %s: %w", l.id, l.pack, l.off, got, object.ErrCorrupt))
			s.bad[i] = true
			continue
		}
		account.Charge(ctx, p.fc.total, account.ChunksRead, 1)
	}
	s.mu.Lock()
	s.buf = buf
	s.mu.Unlock()
}

// writeChunks writes the chunks, in pack order, writeBatch at a time,
// into their contents.
func (p *prefetch) writeChunks(ctx context.Context, next *atomic.Int64, ahead chan struct{}) {
	for {
		from := int(next.Add(writeBatch)) - writeBatch
		if from >= len(p.locs) || ctx.Err() != nil {
			return
		}
		for _, l := range p.locs[from:min(from+writeBatch, len(p.locs))] {
			r := p.where[l.id]
			select {
			case <-r.s.ready:
			case <-ctx.Done():
				return
			}
			if data, ok := r.s.data(r.i); ok {
				for _, u := range p.uses[l.id] {
					if err := p.write(u, data); err != nil {
						p.fail(err)
					}
				}
			} else {
				p.drop(l.id)
			}
			if r.s.left.Add(-1) == 0 {
				r.s.mu.Lock()
				r.s.buf = nil
				r.s.mu.Unlock()
				<-ahead
			}
		}
	}
}

func (p *prefetch) fail(err error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.errs) < 8 {
		p.errs = append(p.errs, err)
	}
}

// drop gives up the contents chunk id was to go into.
func (p *prefetch) drop(id object.ID) {
	for _, u := range p.uses[id] {
		u.w.mu.Lock()
		u.w.dead = true
		if u.w.file != nil {
			u.w.file.Abort()
			u.w.file = nil
		}
		u.w.mu.Unlock()
	}
}

// write puts a verified chunk at its place in a content, and places the
// content once it has all its data.
func (p *prefetch) write(u chunkUse, data []byte) error {
	w := u.w
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.dead || w.written[u.ext] {
		return nil
	}
	if w.file == nil {
		// A content a read of the workspace materialized meanwhile is
		// found at Place, which keeps the file in place.
		f, err := p.fc.dir.Create(p.fc.dir.Path(w.c.ID))
		if err != nil {
			w.dead = true
			return fmt.Errorf("content %s: %w", w.c.ID.Short(), err)
		}
		w.file = f
	}
	fail := func(err error) error {
		w.dead = true
		w.file.Abort()
		w.file = nil
		return fmt.Errorf("content %s: %w", w.c.ID.Short(), err)
	}
	if _, err := w.file.File().WriteAt(data, u.off); err != nil {
		return fail(err)
	}
	w.written[u.ext] = true
	if w.left--; w.left > 0 {
		return nil
	}
	if w.m == nil && int64(len(data)) != w.c.Size {
		return fail(fmt.Errorf("chunk has %d bytes, the tree says %d: %w", len(data), w.c.Size, object.ErrCorrupt))
	}
	// Truncate sets the size where a chunked content ends in a hole; a
	// content of one chunk has its size from its one write.
	if w.m != nil {
		if err := w.file.File().Truncate(w.c.Size); err != nil {
			return fail(err)
		}
	}
	placed, err := w.file.Place(w.c.Size)
	w.file, w.dead = nil, true
	if err != nil {
		return fmt.Errorf("content %s: %w", w.c.ID.Short(), err)
	}
	if placed {
		p.placed.Add(1)
		p.bytes.Add(w.c.Size)
		p.fc.countIn(p.acct, account.CacheBytes, w.c.Size)
	}
	return nil
}

// serve places the content id now, for a read of a workspace, if this
// prefetch wants it and holds every chunk of it (read, not yet written),
// and reports whether the content is in the cache.
func (p *prefetch) serve(id object.ID) bool {
	w := p.byID[id]
	if w == nil {
		return false
	}
	// Every chunk first: a content is written whole or not at all here.
	type part struct {
		u    chunkUse
		data []byte
	}
	var parts []part
	add := func(chunk object.ID, ext int, off int64) bool {
		r, ok := p.where[chunk]
		if !ok {
			return false
		}
		data, ok := r.s.data(r.i)
		parts = append(parts, part{chunkUse{w: w, ext: ext, off: off}, data})
		return ok
	}
	if w.m == nil {
		if !add(w.c.ID, 0, 0) {
			return false
		}
	} else {
		var off int64
		for i, x := range w.m.Extents {
			if !x.Chunk.IsZero() && !add(x.Chunk, i, off) {
				return false
			}
			off += x.Length
		}
	}
	for _, pt := range parts {
		if err := p.write(pt.u, pt.data); err != nil {
			return false
		}
	}
	_, err := os.Lstat(p.fc.dir.Path(id))
	return err == nil
}

// prefetches are the prefetches running, which Materialize asks first.
type prefetches struct {
	mu  sync.Mutex
	all []*prefetch
}

func (ps *prefetches) add(p *prefetch) {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	ps.all = append(ps.all, p)
}

func (ps *prefetches) remove(p *prefetch) {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	ps.all = slices.DeleteFunc(ps.all, func(q *prefetch) bool { return q == p })
}

// serve places content id from the chunks a running prefetch read, and
// reports whether it did (or the content is in the cache anyway).
func (ps *prefetches) serve(id object.ID) bool {
	ps.mu.Lock()
	all := slices.Clone(ps.all)
	ps.mu.Unlock()
	for _, p := range all {
		if p.serve(id) {
			return true
		}
	}
	return false
}

// lowPriority runs fn on a thread of its own given the lowest CPU priority
// and the idle I/O class, so that what fn reads and writes waits for the
// workspaces' own work; the thread gets its priorities back before it
// serves other goroutines again. The thread is not left to end with fn's
// goroutine: a child process started from it with a parent-death signal
// (the sandbox's spawner) would die with it. Best effort.
func lowPriority(fn func()) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	tid := unix.Gettid()
	const ioprioWhoProcess, ioprioClassIdle, ioprioClassShift = 1, 3, 13
	raw, nerr := unix.Getpriority(unix.PRIO_PROCESS, tid)
	io, _, ierr := unix.Syscall(unix.SYS_IOPRIO_GET, ioprioWhoProcess, uintptr(tid), 0)
	if nerr != nil || ierr != 0 {
		fn() // priorities that could not be given back are not taken
		return
	}
	unix.Setpriority(unix.PRIO_PROCESS, tid, 19)
	unix.Syscall(unix.SYS_IOPRIO_SET, ioprioWhoProcess, uintptr(tid), ioprioClassIdle<<ioprioClassShift)
	defer func() {
		// getpriority's system call answers 20 - nice.
		unix.Setpriority(unix.PRIO_PROCESS, tid, 20-raw)
		unix.Syscall(unix.SYS_IOPRIO_SET, ioprioWhoProcess, uintptr(tid), io)
	}()
	fn()
}

// foreground counts the materializations a workspace's reads are waiting
// for, which a prefetch lets go first.
type foreground struct{ n atomic.Int64 }

func (f *foreground) begin() { f.n.Add(1) }
func (f *foreground) end()   { f.n.Add(-1) }

// yield waits while foreground reads are under way, up to a bound: a
// materialization can itself wait for what holds up a prefetch (a gc
// waiting for the read lock the prefetch holds), so the prefetch never
// waits for it without end.
func (f *foreground) yield(ctx context.Context) {
	for i := 0; i < 50 && f.n.Load() > 0 && ctx.Err() == nil; i++ {
		time.Sleep(time.Millisecond)
	}
}
