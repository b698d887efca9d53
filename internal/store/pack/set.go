package pack

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"sync"

	"golang.org/x/sys/unix"

	"layerfs.dev/layerfs/internal/account"
	"layerfs.dev/layerfs/internal/store/object"
)

// maxIdle is how many writers a Set keeps open for the next batches.
const maxIdle = 2

// Set is the pack files of one directory: it hands out writers, one per
// pack at a time across every process, and caches read handles. It is
// safe for concurrent use.
type Set struct {
	dir     string
	maxSize int64
	direct  bool // try O_DIRECT appends
	total   *account.Account

	mu      sync.Mutex
	idle    []*Writer
	held    map[int64]bool // packs with a writer in this process
	readers map[int64]*os.File
}

// NewSet returns the packs of dir. A writer whose pack reaches maxSize is
// retired; direct asks for O_DIRECT appends where the file system has
// them. Reads are counted in total (the Store's totals) and in the account
// of the read's context.
func NewSet(dir string, maxSize int64, direct bool, total *account.Account) *Set {
	return &Set{
		dir:     dir,
		maxSize: maxSize,
		direct:  direct,
		total:   total,
		held:    map[int64]bool{},
		readers: map[int64]*os.File{},
	}
}

// Path is pack num's file.
func (s *Set) Path(num int64) string { return filepath.Join(s.dir, Name(num)) }

// List returns the pack numbers present in the directory, sorted.
func (s *Set) List() ([]int64, error) {
	ents, err := os.ReadDir(s.dir)
	if err != nil {
		return nil, err
	}
	var nums []int64
	for _, e := range ents {
		if n, ok := ParseName(e.Name()); ok && e.Type().IsRegular() {
			nums = append(nums, n)
		}
	}
	sort.Slice(nums, func(i, j int) bool { return nums[i] < nums[j] })
	return nums, nil
}

// Acquire returns a writer: an idle one of this process, else an existing
// pack with room that no one holds, else a new pack.
func (s *Set) Acquire(context.Context) (Appender, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if n := len(s.idle); n > 0 {
		w := s.idle[n-1]
		s.idle = s.idle[:n-1]
		return w, nil
	}
	nums, err := s.List()
	if err != nil {
		return nil, fmt.Errorf("list packs: %w", err)
	}
	for _, n := range nums {
		if s.held[n] {
			continue
		}
		w, err := s.tryOpen(n, false)
		if err != nil {
			return nil, err
		}
		if w != nil {
			return w, nil
		}
	}
	return s.createLocked(nums)
}

// Create returns a writer of a new pack, after every pack there is (GC
// copies live chunks into it).
func (s *Set) Create() (*Writer, error) {
	nums, err := s.List()
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.createLocked(nums)
}

// createLocked makes the first pack after nums that no one else made
// meanwhile; s.mu held.
func (s *Set) createLocked(nums []int64) (*Writer, error) {
	next := int64(1)
	if len(nums) > 0 {
		next = nums[len(nums)-1] + 1
	}
	for ; ; next++ {
		w, err := s.tryOpen(next, true)
		if err != nil {
			return nil, err
		}
		if w != nil {
			return w, nil
		}
	}
}

// tryOpen opens pack num and takes its flock; it returns nil, nil when the
// pack is taken, full or (for create) already exists. s.mu held.
func (s *Set) tryOpen(num int64, create bool) (*Writer, error) {
	path := s.Path(num)
	flags := os.O_RDWR
	if create {
		flags |= os.O_CREATE | os.O_EXCL
	}
	f, err := os.OpenFile(path, flags, 0o600)
	if err != nil {
		if errors.Is(err, fs.ErrExist) || errors.Is(err, fs.ErrNotExist) {
			return nil, nil
		}
		return nil, fmt.Errorf("open pack %s: %w", path, err)
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, unix.EWOULDBLOCK) {
			return nil, nil
		}
		return nil, fmt.Errorf("lock pack %s: %w", path, err)
	}
	// The file may have been deleted by GC between open and flock.
	var st1, st2 unix.Stat_t
	if unix.Fstat(int(f.Fd()), &st1) != nil || unix.Stat(path, &st2) != nil || st1.Ino != st2.Ino {
		f.Close()
		return nil, nil
	}
	if st1.Size >= s.maxSize {
		f.Close()
		return nil, nil
	}
	w, err := openWriter(num, path, f, st1.Size, s.direct)
	if err != nil {
		return nil, err
	}
	s.held[num] = true
	return w, nil
}

// Release returns a writer whose data is synced (or rolled back) for the
// next batch, or closes it when it is full.
func (s *Set) Release(a Appender) error {
	w := a.(*Writer)
	s.mu.Lock()
	defer s.mu.Unlock()
	if w.full || w.size >= s.maxSize || len(s.idle) >= maxIdle {
		delete(s.held, w.num)
		return w.close()
	}
	s.idle = append(s.idle, w)
	return nil
}

// Discard closes a writer after an error it could not roll back, or one
// that is done with (GC's).
func (s *Set) Discard(a Appender) {
	w := a.(*Writer)
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.held, w.num)
	w.close()
}

// DropIdle closes all idle writers (GC does this before it rewrites packs).
func (s *Set) DropIdle() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	var errs []error
	for _, w := range s.idle {
		delete(s.held, w.num)
		errs = append(errs, w.close())
	}
	s.idle = nil
	return errors.Join(errs...)
}

// Idle returns the writers kept for the next batches.
func (s *Set) Idle() []*Writer {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]*Writer(nil), s.idle...)
}

// reader returns a cached read-only handle on pack num.
func (s *Set) reader(num int64) (*os.File, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if f := s.readers[num]; f != nil {
		return f, nil
	}
	f, err := os.Open(s.Path(num))
	if err != nil {
		return nil, err
	}
	s.readers[num] = f
	return f, nil
}

// Remove deletes pack num, which no index row names any more.
func (s *Set) Remove(num int64) error {
	s.mu.Lock()
	if f := s.readers[num]; f != nil {
		f.Close()
		delete(s.readers, num)
	}
	s.mu.Unlock()
	if err := os.Remove(s.Path(num)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return nil
}

// Close closes the idle writers and the read handles.
func (s *Set) Close() error {
	var errs []error
	errs = append(errs, s.DropIdle())
	s.mu.Lock()
	defer s.mu.Unlock()
	for n, f := range s.readers {
		errs = append(errs, f.Close())
		delete(s.readers, n)
	}
	return errors.Join(errs...)
}

// Read reads and verifies the payload of chunk id at off/length in pack
// num.
func (s *Set) Read(ctx context.Context, id object.ID, num, off, length int64) ([]byte, error) {
	path := s.Path(num)
	f, err := s.reader(num)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("chunk %s: pack %s is missing: %w", id, path, object.ErrCorrupt)
		}
		return nil, fmt.Errorf("chunk %s: %w", id, err)
	}
	if off < 0 || length < 0 || length > MaxChunkSize {
		return nil, fmt.Errorf("chunk %s in %s: invalid range %d+%d: %w", id, path, off, length, object.ErrCorrupt)
	}
	data := make([]byte, length)
	n, err := f.ReadAt(data, off)
	account.Charge(ctx, s.total, account.PackBytesRead, int64(n))
	if err != nil {
		if errors.Is(err, io.EOF) {
			return nil, fmt.Errorf("chunk %s: range %d+%d beyond the end of %s: %w", id, off, length, path, object.ErrCorrupt)
		}
		return nil, fmt.Errorf("chunk %s: read %s: %w", id, path, err)
	}
	account.Charge(ctx, s.total, account.ChunksRead, 1)
	if got := object.Hash(object.KindChunk, data); got != id {
		return nil, fmt.Errorf("chunk %s at %s offset %d: content hashes to %s: %w", id, path, off, got, object.ErrCorrupt)
	}
	return data, nil
}

// ReadRange returns length bytes of pack num at off, as they are: a span
// of records, whose payloads the caller verifies.
func (s *Set) ReadRange(_ context.Context, num, off, length int64) ([]byte, error) {
	f, err := s.reader(num)
	if err != nil {
		return nil, err
	}
	data := make([]byte, length)
	if _, err := f.ReadAt(data, off); err != nil {
		return nil, fmt.Errorf("read %s: %w", f.Name(), err)
	}
	// The bytes go into the cache: the pack's pages need not stay too.
	unix.Fadvise(int(f.Fd()), off, length, unix.FADV_DONTNEED)
	return data, nil
}
