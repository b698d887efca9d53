package overlay

import (
	"context"
	"fmt"
	"os"
	"slices"
	"syscall"

	"golang.org/x/sys/unix"
)

// File is an open regular file of the merged view: either the upper file
// (read-write) or, for a file whose data is still the lower content, the
// Store's materialized copy (read-only, never changing). Either can back a
// FUSE passthrough open.
type File struct {
	n       *Node
	f       *os.File
	lowerFd bool
	write   bool
	closed  bool
}

// Node returns the node f is a handle of.
func (f *File) Node() *Node { return f.n }

// Fd returns the backing file descriptor.
func (f *File) Fd() int { return int(f.f.Fd()) }

// OSFile returns the backing file.
func (f *File) OSFile() *os.File { return f.f }

// Lower reports whether f reads the immutable lower content: its data may
// be cached by the kernel across opens.
func (f *File) Lower() bool { return f.lowerFd }

// BackingIno is the inode number of the backing file, which identifies
// which file a kernel passthrough registration refers to.
func (f *File) BackingIno() uint64 {
	var st unix.Stat_t
	if err := unix.Fstat(int(f.f.Fd()), &st); err != nil {
		return 0
	}
	return st.Ino
}

// Close releases the handle. Errors from closing a written file are
// reported.
func (f *File) Close() error {
	if f.closed {
		return os.ErrClosed
	}
	f.closed = true
	o := f.n.o
	o.mu.Lock()
	f.n.opens--
	if f.write {
		o.writers[f.n] = slices.DeleteFunc(o.writers[f.n], func(g *File) bool { return g == f })
		if len(o.writers[f.n]) == 0 {
			delete(o.writers, f.n)
		}
		// Writes since the last Changes may have reached the file without
		// the overlay seeing them (FUSE passthrough, a shared mmap): keep
		// it in the next commit, unless it is as that Changes listed it.
		// The kernel sends a closed file's release in the background,
		// after close(2) returned, so it may come after a commit that the
		// writer's exit preceded; it must not make that commit's file
		// dirty again. (The stamp is exact with fine timestamps; see
		// upperStamp. Without, a write in the clock tick of the listing
		// goes unseen, which only a write concurrent with a commit could
		// meet: execs do not run during commits.)
		if fdStamp(f.Fd()) != f.n.listed {
			o.touchNode(f.n)
		}
	}
	o.mu.Unlock()
	return f.f.Close()
}

// fdStamp is the stamp of an open upper file; zero, which no file's
// stamp equals, if it cannot be read.
func fdStamp(fd int) upperStamp {
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return upperStamp{}
	}
	return stampOf(&st)
}

// Writers is the number of files open for writing: each counts as
// changed until it is closed.
func (o *Overlay) Writers() int {
	o.mu.RLock()
	defer o.mu.RUnlock()
	return len(o.writers)
}

// ReadAt reads from the backing file.
func (f *File) ReadAt(p []byte, off int64) (int, error) { return f.f.ReadAt(p, off) }

// WriteAt writes to the upper file.
func (f *File) WriteAt(p []byte, off int64) (int, error) {
	if f.lowerFd {
		return 0, syscall.EBADF
	}
	return f.f.WriteAt(p, off)
}

// openedLocked wraps an open upper or lower file and does the accounting:
// open handles keep an unlinked node usable, and files open for writing
// stay in the dirty set (writes through passthrough or shared mmap never
// reach the overlay). Needs o.mu.
func (o *Overlay) openedLocked(n *Node, f *os.File, lower bool, flags int) *File {
	write := flags&unix.O_ACCMODE != unix.O_RDONLY || flags&unix.O_TRUNC != 0
	n.opens++
	h := &File{n: n, f: f, lowerFd: lower, write: write}
	if write {
		o.writers[n] = append(o.writers[n], h)
		o.touchNode(n)
	}
	return h
}

// Open opens the regular file n. A read-only open of a file whose data is
// in the lower opens the Store's cache file; opening it for writing copies
// the data up first, except with O_TRUNC, which needs no data at all.
func (o *Overlay) Open(ctx context.Context, n *Node, flags int) (*File, error) {
	if n.mode != syscall.S_IFREG {
		if n.mode == syscall.S_IFDIR {
			return nil, syscall.EISDIR
		}
		return nil, syscall.EINVAL
	}
	write := flags&unix.O_ACCMODE != unix.O_RDONLY
	trunc := flags&unix.O_TRUNC != 0 && write
	o.mu.RLock()
	state := n.state
	o.mu.RUnlock()
	if state != stateUpper && !write {
		f, err := o.openLower(ctx, n)
		if err != nil {
			return nil, fmt.Errorf("open lower content: %w", err)
		}
		o.mu.Lock()
		defer o.mu.Unlock()
		return o.openedLocked(n, f, true, flags), nil
	}
	if state != stateUpper {
		kind := copyData
		if trunc {
			kind = copyTrunc
		}
		f, err := o.copyUp(ctx, n, kind)
		if err != nil {
			return nil, err
		}
		if f != nil {
			o.mu.Lock()
			defer o.mu.Unlock()
			return o.openedLocked(n, f, false, flags), nil
		}
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	if !n.linked() {
		return nil, syscall.ENOENT
	}
	mode := unix.O_RDONLY
	if write {
		mode = unix.O_RDWR
	}
	a, err := o.nodeAt(n)
	if err != nil {
		return nil, err
	}
	fd, err := unix.Openat(a.dir, a.name, mode|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	a.close()
	if err != nil {
		return nil, err
	}
	f := os.NewFile(uintptr(fd), n.name)
	if trunc {
		if err := f.Truncate(0); err != nil {
			f.Close()
			return nil, err
		}
	}
	return o.openedLocked(n, f, false, flags), nil
}
