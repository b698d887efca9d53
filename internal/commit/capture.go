package commit

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"sync"
	"sync/atomic"

	"golang.org/x/sys/unix"

	"layerfs.dev/layerfs/internal/dirfd"
	"layerfs.dev/layerfs/internal/store"
	"layerfs.dev/layerfs/wire/errclass"
)

// Writer stores new objects; *store.Batch implements it. PutChunk must not
// keep data after it returns: capture reuses its read buffers.
type Writer interface {
	PutChunk(id store.ID, data []byte) (added bool, err error)
	PutManifest(m *store.Manifest) (store.ID, error)
	PutTree(t *store.Tree) (store.ID, error)
}

// Reader reads stored objects; *store.DB implements it.
type Reader interface {
	Tree(ctx context.Context, id store.ID) (*store.Tree, error)
	Manifest(ctx context.Context, id store.ID) (*store.Manifest, error)
	Chunk(ctx context.Context, id store.ID) ([]byte, error)
}

// Progress counts work as it happens, for a progress display that polls it
// from another goroutine.
type Progress struct {
	Entries atomic.Int64 // entries captured or written
	Bytes   atomic.Int64 // file bytes read or written
}

// Options tune capture and checkout. The zero value (or nil) is ready to use.
type Options struct {
	Chunking Params    // zero value: DefaultParams
	Workers  int       // files read and hashed in parallel; 0: the Writer's Concurrency, else GOMAXPROCS
	Progress *Progress // optional live counters
}

// Stats tell what a Build or capture did.
type Stats struct {
	Changes   int64 `json:"changes"`    // changes applied
	Entries   int64 `json:"entries"`    // entries captured from the host
	Files     int64 `json:"files"`      // regular files whose content was read
	Bytes     int64 `json:"bytes"`      // file content bytes read
	Chunks    int64 `json:"chunks"`     // chunks stored (new or already present)
	NewChunks int64 `json:"new_chunks"` // chunks the store did not have
	NewBytes  int64 `json:"new_bytes"`  // payload bytes of the new chunks
	Trees     int64 `json:"trees"`      // trees written
	// Delta is the change of the tree's totals (files, dirs, logical bytes)
	// from the base to the result.
	Delta store.CommitStats `json:"delta"`
}

// ErrChanged is wrapped when a file changes while it is being captured
// (class busy: the capture may be tried again).
var ErrChanged = errclass.New(errclass.Busy, "file changed during capture")

// hostEntry turns an lstat result into an entry (without content and xattrs).
func hostEntry(name string, st *unix.Stat_t) (store.Entry, error) {
	e := store.Entry{
		Name:    name,
		Mode:    st.Mode & 0o7777,
		UID:     st.Uid,
		GID:     st.Gid,
		MtimeNs: st.Mtim.Sec*1e9 + st.Mtim.Nsec,
	}
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFREG:
		e.Type, e.Size = store.TypeFile, st.Size
	case unix.S_IFDIR:
		e.Type = store.TypeDir
	case unix.S_IFLNK:
		e.Type = store.TypeSymlink
	case unix.S_IFIFO:
		e.Type = store.TypeFIFO
	case unix.S_IFCHR:
		e.Type, e.Rdev = store.TypeChar, st.Rdev
	case unix.S_IFBLK:
		e.Type, e.Rdev = store.TypeBlock, st.Rdev
	case unix.S_IFSOCK:
		e.Type = store.TypeSocket
	default:
		return e, fmt.Errorf("unknown file type %#o", st.Mode&unix.S_IFMT)
	}
	return e, nil
}

// readXattrs returns every extended attribute of path (not following a
// final symlink) but those whose names start with a prefix of hide, sorted
// by name. A filesystem without xattr support has none; any other failure
// is an error, never a silent skip.
func readXattrs(path string, hide ...string) ([]store.Xattr, error) {
	var buf [1024]byte
	list := buf[:]
	n, err := unix.Llistxattr(path, list)
	if errors.Is(err, unix.ERANGE) {
		if n, err = unix.Llistxattr(path, nil); err == nil {
			list = make([]byte, n)
			n, err = unix.Llistxattr(path, list)
		}
	}
	if errors.Is(err, unix.ENOTSUP) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("list xattrs of %s: %w", path, err)
	}
	if n == 0 {
		return nil, nil
	}
	var xs []store.Xattr
	for _, name := range bytes.Split(list[:n], []byte{0}) {
		if len(name) == 0 || slices.ContainsFunc(hide, func(p string) bool { return bytes.HasPrefix(name, []byte(p)) }) {
			continue
		}
		v, err := getXattr(path, string(name))
		if err != nil {
			return nil, err
		}
		xs = append(xs, store.Xattr{Name: string(name), Value: v})
	}
	slices.SortFunc(xs, func(a, b store.Xattr) int {
		switch {
		case a.Name < b.Name:
			return -1
		case a.Name > b.Name:
			return 1
		}
		return 0
	})
	return xs, nil
}

func getXattr(path, name string) ([]byte, error) {
	buf := make([]byte, 256)
	for {
		n, err := unix.Lgetxattr(path, name, buf)
		if errors.Is(err, unix.ERANGE) {
			sz, err2 := unix.Lgetxattr(path, name, nil)
			if err2 != nil {
				return nil, fmt.Errorf("xattr %s of %s: %w", name, path, err2)
			}
			buf = make([]byte, sz+1)
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("xattr %s of %s: %w", name, path, err)
		}
		return buf[:n:n], nil
	}
}

// statEntry captures the metadata of a (tree path path): its lstat, xattrs
// and, for a symlink, its target. File content is left to a contentJob.
func statEntry(a dirfd.At, name, path string, hide []string) (store.Entry, *unix.Stat_t, error) {
	var st unix.Stat_t
	if err := a.Lstat(&st); err != nil {
		return store.Entry{}, nil, fmt.Errorf("lstat %s: %w", path, err)
	}
	e, err := hostEntry(name, &st)
	if err != nil {
		return e, nil, fmt.Errorf("%s: %w", path, err)
	}
	if e.Type == store.TypeSymlink {
		t, err := a.Readlink()
		if err != nil {
			return e, nil, fmt.Errorf("readlink %s: %w", path, err)
		}
		e.Target, e.Size = t, int64(len(t))
	}
	if e.Xattrs, err = readXattrs(a.Proc(), hide...); err != nil {
		return e, nil, fmt.Errorf("%s: %w", path, err)
	}
	return e, &st, nil
}

// openContent opens the regular file a for capture, without following a
// symlink put in its place.
func openContent(a dirfd.At, path string) (int, error) {
	flags := unix.O_RDONLY | unix.O_NOFOLLOW | unix.O_CLOEXEC | unix.O_NOCTTY | unix.O_NONBLOCK
	fd, err := unix.Openat(a.Dir, a.Name, flags|unix.O_NOATIME, 0)
	if errors.Is(err, unix.EPERM) { // O_NOATIME needs ownership or CAP_FOWNER
		fd, err = unix.Openat(a.Dir, a.Name, flags, 0)
	}
	if err != nil {
		return -1, fmt.Errorf("open %s: %w", path, err)
	}
	return fd, nil
}

// contents reads, chunks, hashes and stores regular files, several at a
// time. Writes to the Writer are serialised by mu.
type contents struct {
	ch      *Chunker
	w       Writer
	prog    *Progress
	mu      sync.Mutex // guards w and stats
	stats   *Stats
	jobs    chan contentJob
	wg      sync.WaitGroup
	errOnce sync.Once
	err     error
	cancel  context.CancelFunc
	bufs    sync.Pool
	// fill puts each content in the Store's cache as it is read (nil:
	// the Writer does not, and the cache fills on first read).
	fill *store.CacheFill
}

// contentJob is one file to capture: its descriptor, opened when it was
// found (so no host path is kept), closed by the job.
type contentJob struct {
	fd   int
	path string // its tree path, for messages
	st   unix.Stat_t
	e    *store.Entry // Object and ObjectKind are filled in
}

func newContents(ctx context.Context, ch *Chunker, w Writer, stats *Stats, prog *Progress, workers int) (*contents, context.Context) {
	ctx, cancel := context.WithCancel(ctx)
	c := &contents{ch: ch, w: w, prog: prog, stats: stats, jobs: make(chan contentJob, 4*workers), cancel: cancel}
	if f, ok := w.(interface{ CacheFill() *store.CacheFill }); ok {
		c.fill = f.CacheFill()
	}
	blockSize := 2<<20 + ch.p.Max
	c.bufs.New = func() any { b := make([]byte, blockSize); return &b }
	for range workers {
		c.wg.Add(1)
		go func() {
			defer c.wg.Done()
			for j := range c.jobs {
				if ctx.Err() != nil {
					unix.Close(j.fd)
					continue // drain
				}
				if err := c.capture(ctx, j); err != nil {
					c.fail(err)
				}
			}
		}()
	}
	return c, ctx
}

func (c *contents) fail(err error) {
	c.errOnce.Do(func() { c.err = err; c.cancel() })
}

// add queues the file a; it blocks while the workers are busy.
func (c *contents) add(ctx context.Context, a dirfd.At, path string, st *unix.Stat_t, e *store.Entry) error {
	if st.Size == 0 {
		e.Object, e.ObjectKind = store.ZeroID, 0
		c.mu.Lock()
		c.stats.Files++
		c.mu.Unlock()
		return nil
	}
	fd, err := openContent(a, path)
	if err != nil {
		return err
	}
	select {
	case c.jobs <- contentJob{fd: fd, path: path, st: *st, e: e}:
		return nil
	case <-ctx.Done():
		unix.Close(fd)
		return context.Cause(ctx)
	}
}

// wait stops the workers and returns the first error.
func (c *contents) wait() error {
	close(c.jobs)
	c.wg.Wait()
	c.cancel()
	return c.err
}

func (c *contents) put(data []byte) (id store.ID, added bool, err error) {
	id = store.Hash(store.KindChunk, data)
	added, err = c.putHashed(id, data)
	return id, added, err
}

func (c *contents) putHashed(id store.ID, data []byte) (bool, error) {
	added, err := c.w.PutChunk(id, data)
	if err != nil {
		return false, err
	}
	c.mu.Lock()
	c.stats.Chunks++
	if added {
		c.stats.NewChunks++
		c.stats.NewBytes += int64(len(data))
	}
	c.mu.Unlock()
	return added, nil
}

// capture stores one file's content. A file no larger than one maximum
// chunk is one chunk; a larger one is cut into chunks listed by a manifest,
// with its runs of zeros (holes or written zeros alike) kept as zero-id
// extents.
func (c *contents) capture(ctx context.Context, j contentJob) (err error) {
	fd := j.fd
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return fmt.Errorf("stat %s: %w", j.path, err)
	}
	if st.Ino != j.st.Ino || st.Dev != j.st.Dev || st.Size != j.st.Size || st.Mtim != j.st.Mtim {
		return fmt.Errorf("%s: %w", j.path, ErrChanged)
	}
	size := st.Size
	if size <= int64(c.ch.p.Max) {
		bp := c.bufs.Get().(*[]byte)
		defer c.bufs.Put(bp)
		buf := *bp
		if err := preadFull(fd, buf[:size], 0, j.path); err != nil {
			return err
		}
		id, added, err := c.put(buf[:size])
		if err != nil {
			return fmt.Errorf("store %s: %w", j.path, err)
		}
		if !c.fill.Clone(id, fd, unchanged(&st)) {
			c.fill.Put(id, buf[:size], added)
		}
		j.e.Object, j.e.ObjectKind = id, store.KindChunk
		c.account(size)
		return nil
	}
	// Holes read as zeros, and runs of zeros become holes again, so the
	// manifest depends on the bytes only: a sparse file and a written one
	// with the same content are the same object.
	m := &store.Manifest{Size: size}
	// The cache's copy: written as the file is read, or a clone of it
	// afterwards where the file system shares blocks.
	var fw *store.FillWriter
	if !c.fill.CanClone(fd) {
		fw = c.fill.Start()
	}
	if err := c.chunkRange(fd, j.path, 0, size, m, fw); err != nil {
		fw.Abort()
		return err
	}
	id, err := func() (store.ID, error) {
		c.mu.Lock()
		defer c.mu.Unlock()
		return c.w.PutManifest(m)
	}()
	if err != nil {
		fw.Abort()
		return fmt.Errorf("store manifest of %s: %w", j.path, err)
	}
	if fw != nil {
		fw.Place(id, size)
	} else {
		// A first clone that fails leaves its content to the commit's
		// prefetch, and the next large files are written as read.
		c.fill.Clone(id, fd, unchanged(&st))
	}
	j.e.Object, j.e.ObjectKind = id, store.KindManifest
	c.account(size)
	return nil
}

// unchanged tells whether the file fd (the one captured, or a duplicate
// of it) still has the identity, size and times of st: the bytes read
// from it since are those it holds.
func unchanged(st *unix.Stat_t) func(fd int) bool {
	return func(fd int) bool {
		var now unix.Stat_t
		return unix.Fstat(fd, &now) == nil && now.Ino == st.Ino && now.Dev == st.Dev &&
			now.Size == st.Size && now.Mtim == st.Mtim && now.Ctim == st.Ctim
	}
}

func (c *contents) account(size int64) {
	c.mu.Lock()
	c.stats.Files++
	c.stats.Bytes += size
	c.mu.Unlock()
	if c.prog != nil {
		c.prog.Bytes.Add(size)
	}
}

// block is one read buffer's worth of chunks on their way through the
// pipeline of chunkRange.
type block struct {
	buf    *[]byte
	chunks [][]byte
	ids    []store.ID
	ext    []int // index of each chunk's extent in the manifest
}

// minZeroRun is the smallest all-zero chunk stored as a hole: a page, so
// that small runs of zeros inside data stay data.
const minZeroRun = 4096

var zeroChunk = make([]byte, 1<<20)

// allZero reports whether data holds only zero bytes (true when empty).
func allZero(data []byte) bool {
	if len(data) > 0 && (data[0] != 0 || data[len(data)-1] != 0) {
		return false
	}
	for len(data) > 0 {
		n := min(len(data), len(zeroChunk))
		if !bytes.Equal(data[:n], zeroChunk[:n]) {
			return false
		}
		data = data[n:]
	}
	return true
}

// isHole reports whether a cut chunk (found all zeros by the chunker when
// zero) is stored as a hole: at least a page of zeros.
func isHole(chunk []byte, zero bool) bool {
	return len(chunk) >= minZeroRun && (zero || allZero(chunk))
}

// addHole appends a hole of k bytes to m, merged into the hole before it
// when that is its last extent (*lastHole: the index of the last hole).
func addHole(m *store.Manifest, lastHole *int, k int) {
	if n := len(m.Extents); n > 0 && n-1 == *lastHole {
		m.Extents[n-1].Length += int64(k)
		return
	}
	*lastHole = len(m.Extents)
	m.Extents = append(m.Extents, store.Extent{Length: int64(k)})
}

// chunkRange cuts the bytes [off, end) of fd into chunks and appends their
// extents to m. It runs as a three-stage pipeline over read blocks, so a
// large file keeps both cores busy: this goroutine reads and cuts, a second
// hashes, a third stores the chunks in order and recycles the buffers. An
// unfinished chunk at the end of a block is carried over to the next. A
// chunk of at least a page of zeros (what dd from /dev/zero or a
// preallocated file holds) becomes a hole, as if the file were sparse
// there: it is neither hashed nor stored, and a checkout leaves it
// unallocated; its bytes read back the same.
// fw, unless nil, receives the file's data and holes in order (the
// Store's cache's copy).
func (c *contents) chunkRange(fd int, path string, off, end int64, m *store.Manifest, fw *store.FillWriter) (err error) {
	toHash := make(chan *block, 2)
	toPut := make(chan *block, 2)
	putErr := make(chan error, 1)
	go func() {
		for b := range toHash {
			for i, data := range b.chunks {
				b.ids[i] = store.Hash(store.KindChunk, data)
			}
			toPut <- b
		}
		close(toPut)
	}()
	go func() {
		var perr error
		for b := range toPut {
			for i, data := range b.chunks {
				if perr == nil {
					if _, e := c.putHashed(b.ids[i], data); e != nil {
						perr = fmt.Errorf("store chunk of %s: %w", path, e)
					}
				}
			}
			c.bufs.Put(b.buf)
			b.buf, b.chunks = nil, nil
		}
		putErr <- perr
	}()
	var sent []*block
	defer func() {
		close(toHash)
		if perr := <-putErr; err == nil {
			err = perr
		}
		if err == nil {
			for _, b := range sent {
				for i, id := range b.ids {
					m.Extents[b.ext[i]].Chunk = id
				}
			}
		}
	}()
	bp := c.bufs.Get().(*[]byte)
	carry := 0
	lastHole := -1 // index of the last extent when it is a hole
	for off < end || carry > 0 {
		buf := *bp
		n := int(min(int64(len(buf)-carry), end-off))
		if err := preadFull(fd, buf[carry:carry+n], off, path); err != nil {
			c.bufs.Put(bp)
			return err
		}
		off += int64(n)
		data := buf[:carry+n]
		last := off >= end
		b := &block{buf: bp}
		for len(data) > 0 {
			if !last && len(data) < c.ch.p.Max {
				break
			}
			k, zero := c.ch.cut(data)
			if isHole(data[:k], zero) {
				// Chunk ids are filled in later, so a hole is told from a
				// chunk by where it was added, not by its id.
				addHole(m, &lastHole, k)
				fw.Skip(int64(k))
			} else {
				fw.Write(data[:k])
				b.chunks = append(b.chunks, data[:k])
				b.ext = append(b.ext, len(m.Extents))
				m.Extents = append(m.Extents, store.Extent{Length: int64(k)})
			}
			data = data[k:]
		}
		b.ids = make([]store.ID, len(b.chunks))
		// The unfinished tail moves to the next buffer; this one travels
		// down the pipeline and back to the pool.
		bp = c.bufs.Get().(*[]byte)
		carry = copy(*bp, data)
		sent = append(sent, b)
		toHash <- b
	}
	c.bufs.Put(bp)
	return nil
}

func preadFull(fd int, b []byte, off int64, path string) error {
	for len(b) > 0 {
		n, err := unix.Pread(fd, b, off)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return fmt.Errorf("read %s: %w", path, err)
		}
		if n == 0 {
			return fmt.Errorf("read %s: %w (%w)", path, ErrChanged, io.ErrUnexpectedEOF)
		}
		b, off = b[n:], off+int64(n)
	}
	return nil
}
