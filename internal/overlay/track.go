package overlay

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"

	"layerfs.dev/layerfs/internal/dirfd"
	"layerfs.dev/layerfs/internal/store"
)

// UpperTracker keeps an UpperSummary of an upper directory up to date from
// the kernel's inotify events on the upper's own directories, so a summary
// after an exec costs in proportion to what the exec changed, not to what
// the upper holds (a full scan of an upper of 15,000 files took over
// 100 ms, paid by every exec).
//
// Both data paths write the upper through the VFS (kernel overlayfs, or
// the daemon's FUSE server and its passthrough files), so every create,
// remove, rename, write and attribute change of an upper entry is reported
// on the upper directory that holds it. Writes through a shared mapping
// are not reported, but they change no size, and a commit scans the upper
// itself. When the kernel's queue overflows, the next Summary scans the
// whole upper again.
type UpperTracker struct {
	set   *UpperTrackers
	dir   string
	lower Lower
	root  store.ID // the base tree, for copy-ups

	// Guarded by set.mu.
	watched map[string]int32 // upper-relative directory -> watch
	entries map[string]trackedEntry
	sum     UpperSummary
	disk    int64           // bytes the entries take on disk (st_blocks)
	dirty   map[string]bool // paths to stat again
	rescan  bool
	closed  bool
	base    *baseTrees // for copy-ups
}

// UpperTrackers share one inotify instance among the trackers of a daemon
// (the kernel allows a user 128 instances, a daemon may serve more
// workspaces).
type UpperTrackers struct {
	mu   sync.Mutex
	fd   int // inotify, non-blocking
	byWd map[int32]watch
}

type watch struct {
	t   *UpperTracker
	dir string
}

// trackedEntry is what one upper entry adds to the summary.
type trackedEntry struct {
	dir, file, whiteout, meta, copyUp bool
	size, disk                        int64
	ino                               uint64
}

const trackMask = unix.IN_CREATE | unix.IN_DELETE | unix.IN_MOVED_FROM | unix.IN_MOVED_TO |
	unix.IN_MODIFY | unix.IN_ATTRIB | unix.IN_CLOSE_WRITE | unix.IN_ONLYDIR | unix.IN_EXCL_UNLINK

// NewUpperTrackers makes an empty set of trackers.
func NewUpperTrackers() (*UpperTrackers, error) {
	fd, err := unix.InotifyInit1(unix.IN_NONBLOCK | unix.IN_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("upper trackers: %w", err)
	}
	return &UpperTrackers{fd: fd, byWd: map[int32]watch{}}, nil
}

// Close ends every tracker of the set.
func (s *UpperTrackers) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.fd < 0 {
		return nil
	}
	for _, w := range s.byWd {
		w.t.closed = true
	}
	clear(s.byWd)
	err := unix.Close(s.fd)
	s.fd = -1
	return err
}

// Track starts tracking the upper directory dir of a workspace over the
// base tree root, scanning it once.
func (s *UpperTrackers) Track(ctx context.Context, dir string, lower Lower, root store.ID) (*UpperTracker, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.fd < 0 {
		return nil, errors.New("upper trackers closed")
	}
	t := &UpperTracker{set: s, dir: dir, lower: lower, root: root}
	t.reset()
	up, err := dirfd.OpenRoot(dir)
	if err != nil {
		return nil, fmt.Errorf("track upper: %w", err)
	}
	defer unix.Close(up)
	if err := t.addTree(ctx, up, ""); err != nil {
		t.unwatch()
		return nil, fmt.Errorf("track upper %s: %w", dir, err)
	}
	return t, nil
}

// Close stops tracking.
func (t *UpperTracker) Close() {
	t.set.mu.Lock()
	defer t.set.mu.Unlock()
	t.unwatch()
	t.closed = true
}

// unwatch removes every watch of t.
func (t *UpperTracker) unwatch() {
	for _, wd := range t.watched {
		t.rmWatch(wd)
	}
	clear(t.watched)
}

func (t *UpperTracker) rmWatch(wd int32) {
	if t.set.fd >= 0 {
		unix.InotifyRmWatch(t.set.fd, uint32(wd))
	}
	delete(t.set.byWd, wd)
}

// Summary returns what the upper holds now, and the bytes it takes on
// disk (its directory included).
func (t *UpperTracker) Summary(ctx context.Context) (UpperSummary, int64, error) {
	s := t.set
	s.mu.Lock()
	defer s.mu.Unlock()
	if t.closed {
		return UpperSummary{}, 0, errors.New("upper tracker closed")
	}
	up, err := dirfd.OpenRoot(t.dir)
	if err != nil {
		return t.sum, t.disk, fmt.Errorf("track upper: %w", err)
	}
	defer unix.Close(up)
	err = t.update(ctx, up)
	var st unix.Stat_t
	if err == nil {
		err = unix.Fstat(up, &st)
	}
	return t.sum, t.disk + st.Blocks*512, err
}

// update applies the queued events; up is the upper directory, every
// entry is reached from it (see dirfd).
func (t *UpperTracker) update(ctx context.Context, up int) error {
	if err := t.set.drain(); err != nil {
		return err
	}
	if t.rescan {
		t.unwatch()
		t.reset()
		return t.addTree(ctx, up, "")
	}
	for p := range t.dirty {
		if err := t.restat(ctx, up, p); err != nil {
			return err
		}
	}
	clear(t.dirty)
	return nil
}

func (t *UpperTracker) reset() {
	t.watched = map[string]int32{}
	t.entries, t.dirty, t.base = map[string]trackedEntry{}, map[string]bool{}, newBaseTrees(t.lower, t.root)
	t.sum, t.disk, t.rescan = UpperSummary{}, 0, false
}

// drain reads every queued event and hands it to the tracker of its watch.
func (s *UpperTrackers) drain() error {
	var buf [64 << 10]byte
	for {
		n, err := unix.Read(s.fd, buf[:])
		if errors.Is(err, unix.EAGAIN) {
			return nil
		}
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return fmt.Errorf("upper trackers: %w", err)
		}
		for off := 0; off+unix.SizeofInotifyEvent <= n; {
			ev := (*unix.InotifyEvent)(unsafe.Pointer(&buf[off]))
			name := string(buf[off+unix.SizeofInotifyEvent : off+unix.SizeofInotifyEvent+int(ev.Len)])
			off += unix.SizeofInotifyEvent + int(ev.Len)
			if ev.Mask&unix.IN_Q_OVERFLOW != 0 {
				for _, w := range s.byWd {
					w.t.rescan = true
				}
				continue
			}
			w, ok := s.byWd[ev.Wd]
			if !ok {
				continue // a watch already dropped
			}
			if ev.Mask&unix.IN_IGNORED != 0 {
				delete(s.byWd, ev.Wd)
				if w.t.watched[w.dir] == ev.Wd {
					delete(w.t.watched, w.dir)
				}
				continue
			}
			w.t.event(w.dir, ev.Mask, strings.TrimRight(name, "\x00"))
		}
	}
}

func (t *UpperTracker) event(dir string, mask uint32, name string) {
	if name == "" {
		return // the directory itself: its own changes change no count
	}
	p := join(dir, name)
	if mask&unix.IN_MOVED_FROM != 0 && mask&unix.IN_ISDIR != 0 {
		// The subtree's watches now name the wrong paths: forget them
		// and the entries below; the name is stated again (gone).
		t.forgetBelow(p)
	}
	t.dirty[p] = true
	if dir != "" {
		t.dirty[dir] = true // a directory's size on disk moves with its entries
	}
}

// forgetBelow drops the watches and entries below p (a directory that
// moved away or went).
func (t *UpperTracker) forgetBelow(p string) {
	prefix := p + "/"
	for d, wd := range t.watched {
		if d == p || strings.HasPrefix(d, prefix) {
			t.rmWatch(wd)
			delete(t.watched, d)
		}
	}
	for q, e := range t.entries {
		if strings.HasPrefix(q, prefix) {
			t.account(e, -1)
			delete(t.entries, q)
		}
	}
}

// restat brings p's entry up to date: gone, changed, or new (a new
// directory is watched and scanned).
func (t *UpperTracker) restat(ctx context.Context, up int, p string) error {
	var st unix.Stat_t
	a, err := dirfd.Beneath(up, p)
	if err == nil {
		defer unix.Close(a.Dir)
		err = a.Lstat(&st)
	}
	old, had := t.entries[p]
	// ELOOP: a directory on the way is now a symlink, which the upper's
	// entries are never reached through.
	if errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ENOTDIR) || errors.Is(err, unix.ELOOP) {
		if had {
			t.account(old, -1)
			delete(t.entries, p)
			if old.dir {
				t.forgetBelow(p)
			}
		}
		return nil
	}
	if err != nil {
		return fmt.Errorf("track upper %s: %w", t.dir, err)
	}
	if _, watched := t.watched[p]; had && old.dir && watched && old.ino == st.Ino && st.Mode&syscall.S_IFMT == syscall.S_IFDIR {
		// A directory's own changes change no count but its size on
		// disk. (One removed and made again may have the same inode
		// number, but its watch is gone: the kernel dropped it with the
		// old directory.)
		t.disk += st.Blocks*512 - old.disk
		old.disk = st.Blocks * 512
		t.entries[p] = old
		return nil
	}
	if had {
		t.account(old, -1)
		delete(t.entries, p)
		if old.dir {
			t.forgetBelow(p)
		}
	}
	return t.add(ctx, up, a, p, &st)
}

// add counts the entry p (at a, stat st) and, for a directory, everything
// in it.
func (t *UpperTracker) add(ctx context.Context, up int, a dirfd.At, p string, st *unix.Stat_t) error {
	e := trackedEntry{ino: st.Ino, disk: st.Blocks * 512}
	switch {
	case isWhiteout(st):
		e.whiteout = true
	case st.Mode&syscall.S_IFMT == syscall.S_IFDIR:
		e.dir = true
	case st.Mode&syscall.S_IFMT == syscall.S_IFREG:
		e.file, e.size = true, st.Size
		var err error
		if e.meta, err = dataInLower(a.Proc()); err != nil && !notSupported(err) && !errors.Is(err, unix.ENOENT) {
			return fmt.Errorf("track upper %s: %w", t.dir, err)
		}
		if !e.meta {
			if e.copyUp, err = t.base.hasFile(ctx, p); err != nil {
				return fmt.Errorf("track upper %s: %w", t.dir, err)
			}
		}
	}
	t.entries[p] = e
	t.account(e, 1)
	if e.dir {
		return t.addTree(ctx, up, p)
	}
	return nil
}

// addTree watches directory rel and counts what it holds, recursively.
// The watch comes first, so nothing made during the scan goes unseen.
func (t *UpperTracker) addTree(ctx context.Context, up int, rel string) error {
	dfd, err := dirfd.OpenBeneath(up, rel)
	if errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ENOTDIR) || errors.Is(err, unix.ELOOP) {
		return nil // gone already; its parent's event says so
	}
	if err != nil {
		return fmt.Errorf("track upper %s: open %s: %w", t.dir, rel, err)
	}
	defer unix.Close(dfd)
	// The watch is added through the descriptor's /proc link: a short
	// path however deep the directory is.
	here := dirfd.At{Dir: dfd, Name: "."}
	wd, err := unix.InotifyAddWatch(t.set.fd, here.Proc(), trackMask)
	if err != nil {
		return fmt.Errorf("track upper %s: watch %s: %w", t.dir, rel, err)
	}
	t.set.byWd[int32(wd)], t.watched[rel] = watch{t, rel}, int32(wd)
	names, err := dirNames(here)
	if err != nil {
		if errors.Is(err, unix.ENOENT) {
			return nil
		}
		return fmt.Errorf("track upper %s: %w", t.dir, err)
	}
	for _, name := range names {
		if err := ctx.Err(); err != nil {
			return err
		}
		p := join(rel, name)
		if _, ok := t.entries[p]; ok {
			continue
		}
		var st unix.Stat_t
		a := dirfd.At{Dir: dfd, Name: name}
		if err := a.Lstat(&st); err != nil {
			if errors.Is(err, unix.ENOENT) {
				continue
			}
			return fmt.Errorf("track upper %s: %w", t.dir, err)
		}
		if err := t.add(ctx, up, a, p, &st); err != nil {
			return err
		}
	}
	return nil
}

func (t *UpperTracker) account(e trackedEntry, sign int64) {
	t.disk += sign * e.disk
	switch {
	case e.whiteout:
		t.sum.Whiteouts += sign
	case e.dir:
		t.sum.Dirs += sign
	case e.file:
		t.sum.Files += sign
		if e.meta {
			t.sum.Metacopies += sign
		} else {
			t.sum.Bytes += sign * e.size
		}
		if e.copyUp {
			t.sum.CopyUps += sign
		}
	}
}

func dirNames(dir dirfd.At) ([]string, error) {
	fd, err := dir.OpenDir(unix.O_RDONLY)
	if err != nil {
		return nil, err
	}
	f := os.NewFile(uintptr(fd), dir.Name)
	defer f.Close()
	return f.Readdirnames(-1)
}
