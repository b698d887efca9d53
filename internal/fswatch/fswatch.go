package fswatch

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"strings"
	"sync"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"layerfs.dev/layerfs/internal/unixmode"
	"layerfs.dev/layerfs/wire/errclass"
)

// Event kinds.
const (
	Created  = "created"
	Modified = "modified"
	Removed  = "removed"
	Renamed  = "renamed"
	// Overflow: the kernel's queue overflowed and changes were lost; a
	// consumer that mirrors the tree should rescan it.
	Overflow = "overflow"
	// Dropped: the buffer was full and Count changes were not queued.
	Dropped = "dropped"
)

// Event is one change (or, for Overflow and Dropped, a loss of changes).
type Event struct {
	Kind    string
	Path    string // relative to the watched root, slash separated
	OldPath string // Renamed: the path before
	// Mode holds the type bits (fs.ModeDir, fs.ModeSymlink...) and Size the
	// size, read when the event is delivered (zero when the path is gone).
	Mode  fs.FileMode
	Size  int64
	Count int64     // Dropped: how many
	Time  time.Time // when the change was first seen
}

// Options configure Watch.
type Options struct {
	// Prefix restricts the watch to one directory of the tree ("" for all).
	Prefix string
	// MaxPending bounds the paths buffered for the consumer (DefaultMaxPending when 0).
	MaxPending int
}

// DefaultMaxPending is the default bound of the coalescing buffer.
const DefaultMaxPending = 8192

// ErrEnded is returned by Next when the watched directory is gone: the
// workspace was unmounted, or the prefix directory removed.
var ErrEnded = errclass.New(errclass.NotFound, "the watched tree is gone")

const watchMask = unix.IN_CREATE | unix.IN_DELETE | unix.IN_MODIFY | unix.IN_CLOSE_WRITE |
	unix.IN_MOVED_FROM | unix.IN_MOVED_TO | unix.IN_DELETE_SELF | unix.IN_MOVE_SELF |
	unix.IN_ONLYDIR | unix.IN_EXCL_UNLINK

// Watcher watches one tree. Next is for one consumer goroutine.
type Watcher struct {
	root   string
	prefix string
	max    int
	ino    *os.File // the inotify instance, non-blocking under Go's poller
	fd     int
	done   chan struct{}

	// Owned by the reader goroutine (and Watch before it starts).
	wds    map[int32]string // watch descriptor -> directory, relative to root
	rootWd int32
	move   *moveFrom // an IN_MOVED_FROM waiting for its IN_MOVED_TO

	mu    sync.Mutex
	pend  pending
	ended error
	wake  chan struct{} // one pending wake-up for Next
}

type moveFrom struct {
	cookie uint32
	path   string
	dir    bool
}

// Watch starts watching the tree at root (a directory path), below
// opts.Prefix. Changes made after Watch returns are reported.
func Watch(root string, opts Options) (*Watcher, error) {
	prefix := path.Clean(opts.Prefix)
	if prefix == "." || prefix == "/" {
		prefix = ""
	}
	if strings.HasPrefix(prefix, "/") || prefix == ".." || strings.HasPrefix(prefix, "../") {
		return nil, fmt.Errorf("watch prefix %q: want a relative path inside the tree", opts.Prefix)
	}
	if opts.MaxPending <= 0 {
		opts.MaxPending = DefaultMaxPending
	}
	fd, err := unix.InotifyInit1(unix.IN_CLOEXEC | unix.IN_NONBLOCK)
	if err != nil {
		return nil, fmt.Errorf("inotify: %w", err)
	}
	w := &Watcher{root: root, prefix: prefix, max: opts.MaxPending, fd: fd, ino: os.NewFile(uintptr(fd), "inotify"),
		done: make(chan struct{}), wds: map[int32]string{}, wake: make(chan struct{}, 1)}
	w.pend.byPath = map[string]*Event{}
	if err := w.addTree(prefix, false); err != nil {
		w.ino.Close()
		return nil, err
	}
	go w.read()
	return w, nil
}

// Close stops the watcher and releases its watches.
func (w *Watcher) Close() error {
	err := w.ino.Close()
	<-w.done
	return err
}

// Next returns the changes buffered since the last call, waiting for one
// when there is none, until ctx ends or the tree is gone (ErrEnded).
func (w *Watcher) Next(ctx context.Context) ([]Event, error) {
	for {
		w.mu.Lock()
		batch := w.pend.take()
		ended := w.ended
		w.mu.Unlock()
		if len(batch) > 0 {
			w.describe(batch)
			return batch, nil
		}
		if ended != nil {
			return nil, ended
		}
		select {
		case <-w.wake:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// describe fills type and size, read now through the tree.
func (w *Watcher) describe(batch []Event) {
	for i := range batch {
		ev := &batch[i]
		if ev.Kind == Removed || ev.Kind == Overflow || ev.Kind == Dropped {
			continue
		}
		var st unix.Stat_t
		if err := w.statBeneath(ev.Path, &st); err != nil {
			continue // gone again, or unreadable: the event still stands
		}
		ev.Mode = unixmode.Type(st.Mode)
		if st.Mode&unix.S_IFMT != unix.S_IFDIR {
			ev.Size = st.Size
		}
	}
}

func (w *Watcher) push(ev Event) {
	ev.Time = time.Now()
	w.mu.Lock()
	w.pend.add(ev, w.max)
	w.mu.Unlock()
	w.signal()
}

func (w *Watcher) signal() {
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

func (w *Watcher) end(err error) {
	w.mu.Lock()
	if w.ended == nil {
		w.ended = err
	}
	w.mu.Unlock()
	w.signal()
}

// read drains the inotify queue until the instance is closed or the
// watched directory goes away.
func (w *Watcher) read() {
	defer close(w.done)
	buf := make([]byte, 64<<10)
	for {
		// A rename's two halves are queued one after the other, and a read
		// may come between them: give a lone IN_MOVED_FROM a moment for its
		// IN_MOVED_TO before it counts as a move out of the tree.
		deadline := time.Time{}
		if w.move != nil {
			deadline = time.Now().Add(moveWait)
		}
		_ = w.ino.SetReadDeadline(deadline)
		n, err := w.ino.Read(buf)
		if errors.Is(err, os.ErrDeadlineExceeded) {
			w.flushMove()
			continue
		}
		if err != nil {
			w.end(fmt.Errorf("%w (%w)", ErrEnded, err))
			return
		}
		if done := w.handle(buf[:n]); done {
			w.end(ErrEnded)
			return
		}
	}
}

// handle turns one read of raw events into Events; true when the watched
// root went away.
func (w *Watcher) handle(b []byte) bool {
	for len(b) >= unix.SizeofInotifyEvent {
		raw := (*unix.InotifyEvent)(unsafe.Pointer(&b[0]))
		end := unix.SizeofInotifyEvent + int(raw.Len)
		if end > len(b) {
			break
		}
		name := strings.TrimRight(string(b[unix.SizeofInotifyEvent:end]), "\x00")
		b = b[end:]
		if w.event(raw.Wd, raw.Mask, raw.Cookie, name) {
			return true
		}
	}
	return false
}

// moveWait is how long a lone IN_MOVED_FROM waits for its IN_MOVED_TO.
const moveWait = 20 * time.Millisecond

func (w *Watcher) event(wd int32, mask, cookie uint32, name string) bool {
	if mask&unix.IN_Q_OVERFLOW != 0 {
		w.push(Event{Kind: Overflow})
		return false
	}
	dir, ok := w.wds[wd]
	if mask&unix.IN_IGNORED != 0 {
		delete(w.wds, wd)
		return wd == w.rootWd
	}
	if !ok {
		return false // a watch removed meanwhile
	}
	if mask&(unix.IN_DELETE_SELF|unix.IN_MOVE_SELF) != 0 {
		return wd == w.rootWd
	}
	if mask&unix.IN_UNMOUNT != 0 || name == "" {
		return false
	}
	p := path.Join(dir, name)
	isDir := mask&unix.IN_ISDIR != 0
	if mask&unix.IN_MOVED_TO == 0 {
		w.flushMove()
	}
	switch {
	case mask&unix.IN_CREATE != 0:
		w.push(Event{Kind: Created, Path: p, Mode: dirBit(isDir)})
		if isDir {
			w.addTree(p, true)
		}
	case mask&unix.IN_DELETE != 0:
		w.push(Event{Kind: Removed, Path: p, Mode: dirBit(isDir)})
	case mask&(unix.IN_MODIFY|unix.IN_CLOSE_WRITE) != 0:
		w.push(Event{Kind: Modified, Path: p})
	case mask&unix.IN_MOVED_FROM != 0:
		w.move = &moveFrom{cookie: cookie, path: p, dir: isDir}
	case mask&unix.IN_MOVED_TO != 0:
		if m := w.move; m != nil && m.cookie == cookie {
			w.move = nil
			w.push(Event{Kind: Renamed, Path: p, OldPath: m.path, Mode: dirBit(isDir)})
			if isDir {
				w.renameDirs(m.path, p)
			}
			return false
		}
		w.flushMove()
		w.push(Event{Kind: Created, Path: p, Mode: dirBit(isDir)})
		if isDir {
			w.addTree(p, true)
		}
	}
	return false
}

// flushMove reports a rename out of the tree as a removal.
func (w *Watcher) flushMove() {
	m := w.move
	if m == nil {
		return
	}
	w.move = nil
	w.push(Event{Kind: Removed, Path: m.path, Mode: dirBit(m.dir)})
	if m.dir {
		for wd, d := range w.wds {
			if d == m.path || strings.HasPrefix(d, m.path+"/") {
				unix.InotifyRmWatch(w.fd, uint32(wd))
				delete(w.wds, wd)
			}
		}
	}
}

// renameDirs moves the watched directories below from to below to.
func (w *Watcher) renameDirs(from, to string) {
	for wd, d := range w.wds {
		switch {
		case d == from:
			w.wds[wd] = to
		case strings.HasPrefix(d, from+"/"):
			w.wds[wd] = to + d[len(from):]
		}
	}
}

// addTree watches the directory rel and every directory below it. With
// report (a directory that just appeared), what is already inside is
// reported as created: it may have been made before the watch was in place.
func (w *Watcher) addTree(rel string, report bool) error {
	rootFd, err := unix.Open(w.root, unix.O_DIRECTORY|unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("watch %s: %w", w.root, err)
	}
	defer unix.Close(rootFd)
	fd := rootFd
	if rel != "" {
		how := unix.OpenHow{Flags: unix.O_DIRECTORY | unix.O_RDONLY | unix.O_CLOEXEC,
			Resolve: unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS}
		if fd, err = unix.Openat2(rootFd, rel, &how); err != nil {
			return fmt.Errorf("watch %q: %w", rel, err)
		}
		defer unix.Close(fd)
	}
	return w.addDir(fd, rel, report, rel == w.prefix && !report)
}

func (w *Watcher) addDir(fd int, rel string, report, isRoot bool) error {
	wd, err := unix.InotifyAddWatch(w.fd, fmt.Sprintf("/proc/self/fd/%d", fd), watchMask)
	if err != nil {
		return fmt.Errorf("watch %q: %w", rel, err)
	}
	w.wds[int32(wd)] = rel
	if isRoot {
		w.rootWd = int32(wd)
	}
	// The caller closes fd; d.Close closes the dup (close-on-exec, like
	// every descriptor here, so no child of the daemon inherits it).
	dup, err := unix.FcntlInt(uintptr(fd), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		return err
	}
	d := os.NewFile(uintptr(dup), rel)
	defer d.Close()
	entries, err := d.ReadDir(-1)
	if err != nil {
		return nil // removed meanwhile: its watch goes too
	}
	for _, e := range entries {
		p := path.Join(rel, e.Name())
		if report {
			w.push(Event{Kind: Created, Path: p, Mode: e.Type() & fs.ModeType})
		}
		if !e.IsDir() {
			continue
		}
		sub, err := unix.Openat(fd, e.Name(), unix.O_DIRECTORY|unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if err != nil {
			continue // replaced or removed meanwhile
		}
		err = w.addDir(sub, p, report, false)
		unix.Close(sub)
		if err != nil {
			return err
		}
	}
	return nil
}

// statBeneath stats rel below the root without following symlinks.
func (w *Watcher) statBeneath(rel string, st *unix.Stat_t) error {
	rootFd, err := unix.Open(w.root, unix.O_DIRECTORY|unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(rootFd)
	how := unix.OpenHow{Flags: unix.O_PATH | unix.O_NOFOLLOW | unix.O_CLOEXEC,
		Resolve: unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS}
	fd, err := unix.Openat2(rootFd, rel, &how)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	return unix.Fstatat(fd, "", st, unix.AT_EMPTY_PATH|unix.AT_SYMLINK_NOFOLLOW)
}

func dirBit(dir bool) fs.FileMode {
	if dir {
		return fs.ModeDir
	}
	return 0
}
