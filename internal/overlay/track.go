package overlay

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"slices"
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
// after an exec costs in proportion to the directories the exec changed,
// not to what the upper holds (a full scan would be paid by every exec).
//
// Both data paths write the upper through the VFS (kernel overlayfs, or
// the daemon's FUSE server and its passthrough files), so every create,
// remove, rename, write and attribute change of an upper entry is reported
// on the upper directory that holds it. Writes through a shared mapping
// are not reported, but they change no size, and a commit scans the upper
// itself.
//
// Each directory's watch is one-shot: its first event says the directory
// changed and removes the watch, so a directory costs the writers one
// event per exec however many of its files they create or write, where a
// lasting watch would cost three (CREATE, MODIFY, CLOSE_WRITE) for every
// file created. The next Summary arms the watch again and compares the
// directory's entries with what it knew of them, stat by stat.
type UpperTracker struct {
	set   *UpperTrackers
	dir   string
	lower Lower
	root  store.ID // the base tree, for copy-ups

	// Guarded by set.mu.
	watched  map[string]int32           // upper-relative directory -> its armed watch
	entries  map[string]trackedEntry    // upper-relative path -> what it counts
	children map[string]map[string]bool // directory -> the names of its entries
	fired    map[string]bool            // directories whose watch fired
	sum      UpperSummary
	disk     int64 // bytes the entries take on disk (st_blocks)
	rescan   bool
	closed   bool
	base     *baseTrees // for copy-ups
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

// trackedEntry is what one upper entry adds to the summary, and the stat
// that tells whether it changed.
type trackedEntry struct {
	dir, file, whiteout, meta, copyUp bool
	size, disk                        int64
	ino                               uint64
	ctime                             unix.Timespec
}

const trackMask = unix.IN_CREATE | unix.IN_DELETE | unix.IN_MOVED_FROM | unix.IN_MOVED_TO |
	unix.IN_MODIFY | unix.IN_ATTRIB | unix.IN_CLOSE_WRITE | unix.IN_ONLYDIR | unix.IN_EXCL_UNLINK |
	unix.IN_ONESHOT

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
	for dir, wd := range t.watched {
		t.rmWatch(wd, dir)
	}
	clear(t.watched)
}

// rmWatch removes the watch wd of directory dir, unless the watch now
// serves another path: a directory moved and found at its new path before
// its old one was forgotten keeps its watch (the kernel gives one inode
// one watch per instance).
func (t *UpperTracker) rmWatch(wd int32, dir string) {
	if w, ok := t.set.byWd[wd]; !ok || w.t != t || w.dir != dir {
		return
	}
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

// update applies the events queued since the last update; up is the
// upper directory, every entry is reached from it (see dirfd).
func (t *UpperTracker) update(ctx context.Context, up int) error {
	if err := t.set.drain(); err != nil {
		return err
	}
	// Parents first: a directory its parent's rescan found gone or made
	// anew needs no rescan of its own.
	dirs := slices.SortedFunc(maps.Keys(t.fired), func(a, b string) int {
		return cmp.Or(cmp.Compare(strings.Count(a, "/"), strings.Count(b, "/")), cmp.Compare(a, b))
	})
	for _, dir := range dirs {
		if t.rescan {
			break
		}
		delete(t.fired, dir)
		if err := t.rescanDir(ctx, up, dir); err != nil {
			t.rescan = true // the directories not rescanned are forgotten
			return err
		}
	}
	if t.rescan {
		t.unwatch()
		t.reset()
		return t.addTree(ctx, up, "")
	}
	return nil
}

func (t *UpperTracker) reset() {
	t.watched, t.children, t.fired = map[string]int32{}, map[string]map[string]bool{}, map[string]bool{}
	t.entries, t.base = map[string]trackedEntry{}, newBaseTrees(t.lower, t.root)
	t.sum, t.disk, t.rescan = UpperSummary{}, 0, false
}

// drain reads every queued event and marks the directory of its watch.
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
				// The one-shot watch fired, or the directory went.
				delete(s.byWd, ev.Wd)
				if w.t.watched[w.dir] == ev.Wd {
					delete(w.t.watched, w.dir)
				}
				continue
			}
			w.t.fired[w.dir] = true
		}
	}
}

// rescanDir scans the upper directory dir again (scanDir), once sure it
// is the directory the tracker knows there.
func (t *UpperTracker) rescanDir(ctx context.Context, up int, dir string) error {
	old, known := t.entries[dir]
	if dir != "" && (!known || !old.dir) {
		return nil // gone: its parent's rescan forgot it
	}
	dfd, err := dirfd.OpenBeneath(up, dir)
	if gone(err) {
		return nil // its parent fired too, and forgets it
	}
	if err != nil {
		return fmt.Errorf("track upper %s: open %s: %w", t.dir, dir, err)
	}
	defer unix.Close(dfd)
	var st unix.Stat_t
	if err := unix.Fstat(dfd, &st); err != nil {
		return fmt.Errorf("track upper %s: %w", t.dir, err)
	}
	if dir != "" {
		if old.ino != st.Ino {
			// Made anew, which its parent's rescan would have found
			// first: with no event of its parent's, start over.
			t.rescan = true
			return nil
		}
		t.disk += st.Blocks*512 - old.disk // a directory's size moves with its entries
		old.disk = st.Blocks * 512
		t.entries[dir] = old
	}
	return t.scanDir(ctx, up, dfd, dir)
}

// scanDir arms the watch of the upper directory dir (open as dfd) and
// brings the entries in it up to date: gone, changed, or new (a new
// directory is watched and scanned).
func (t *UpperTracker) scanDir(ctx context.Context, up, dfd int, dir string) error {
	here := dirfd.At{Dir: dfd, Name: "."}
	if err := t.arm(here, dir); err != nil {
		return err
	}
	names, err := dirNames(here)
	if errors.Is(err, unix.ENOENT) {
		return nil // gone since it was opened; its parent's watch says so
	}
	if err != nil {
		return fmt.Errorf("track upper %s: %w", t.dir, err)
	}
	seen := make(map[string]bool, len(names))
	for _, name := range names {
		if err := ctx.Err(); err != nil {
			return err
		}
		p, a := join(dir, name), dirfd.At{Dir: dfd, Name: name}
		var st unix.Stat_t
		if err := a.Lstat(&st); err != nil {
			if errors.Is(err, unix.ENOENT) {
				continue // removed since the listing: forgotten below
			}
			return fmt.Errorf("track upper %s: %w", t.dir, err)
		}
		seen[name] = true
		e, had := t.entries[p]
		switch {
		case had && e.ino == st.Ino && e.dir && st.Mode&syscall.S_IFMT == syscall.S_IFDIR && t.following(p):
			// The same directory: its own watch follows its entries.
			t.disk += st.Blocks*512 - e.disk
			e.disk = st.Blocks * 512
			t.entries[p] = e
			continue
		case had && e.ino == st.Ino && e.ctime == st.Ctim && e.disk == st.Blocks*512 && (!e.file || e.size == st.Size):
			continue // unchanged
		case had:
			t.remove(p)
		}
		if err := t.add(ctx, up, a, p, &st); err != nil {
			return err
		}
	}
	for name := range t.children[dir] {
		if !seen[name] {
			t.remove(join(dir, name))
		}
	}
	return nil
}

// following reports whether the directory p is watched, or fired and is
// still to be rescanned. One that is neither lost its watch with its
// inode: it was removed, and the directory there now is another that
// took the same inode number.
func (t *UpperTracker) following(p string) bool {
	_, armed := t.watched[p]
	return armed || t.fired[p]
}

// arm watches the directory dir (at here) for its next change.
func (t *UpperTracker) arm(here dirfd.At, dir string) error {
	// The watch is added through the descriptor's /proc link: a short
	// path however deep the directory is.
	wd, err := unix.InotifyAddWatch(t.set.fd, here.Proc(), trackMask)
	if err != nil {
		return fmt.Errorf("track upper %s: watch %s: %w", t.dir, dir, err)
	}
	t.set.byWd[int32(wd)], t.watched[dir] = watch{t, dir}, int32(wd)
	return nil
}

// remove uncounts the entry p and, for a directory, everything below it.
func (t *UpperTracker) remove(p string) {
	e, ok := t.entries[p]
	if !ok {
		return
	}
	t.account(e, -1)
	delete(t.entries, p)
	dir, name := dirfd.Split(p)
	delete(t.children[dir], name)
	if e.dir {
		if wd, ok := t.watched[p]; ok {
			t.rmWatch(wd, p)
			delete(t.watched, p)
		}
		for name := range t.children[p] {
			t.remove(join(p, name))
		}
		delete(t.children, p)
	}
}

// add counts the entry p (at a, stat st) and, for a directory, everything
// in it.
func (t *UpperTracker) add(ctx context.Context, up int, a dirfd.At, p string, st *unix.Stat_t) error {
	e := trackedEntry{ino: st.Ino, disk: st.Blocks * 512, ctime: st.Ctim}
	switch {
	case isWhiteout(st):
		e.whiteout = true
	case st.Mode&syscall.S_IFMT == syscall.S_IFDIR:
		e.dir = true
	case st.Mode&syscall.S_IFMT == syscall.S_IFREG:
		e.file, e.size = true, st.Size
		var err error
		if e.meta, err = dataInLower(a); err != nil && !notSupported(err) && !errors.Is(err, unix.ENOENT) {
			return fmt.Errorf("track upper %s: %w", t.dir, err)
		}
		if !e.meta {
			if e.copyUp, err = t.base.hasFile(ctx, p); err != nil {
				return fmt.Errorf("track upper %s: %w", t.dir, err)
			}
		}
	}
	t.entries[p] = e
	dir, name := dirfd.Split(p)
	if t.children[dir] == nil {
		t.children[dir] = map[string]bool{}
	}
	t.children[dir][name] = true
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
	if gone(err) {
		return nil // gone already; its parent's watch says so
	}
	if err != nil {
		return fmt.Errorf("track upper %s: open %s: %w", t.dir, rel, err)
	}
	defer unix.Close(dfd)
	return t.scanDir(ctx, up, dfd, rel)
}

// gone reports whether err says a directory below the upper is no longer
// there: missing, or a symlink or file now on the way (which the upper's
// entries are never reached through).
func gone(err error) bool {
	return errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ENOTDIR) || errors.Is(err, unix.ELOOP)
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
