package cache

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sync"

	"golang.org/x/sys/unix"

	"layerfs.dev/layerfs/internal/store/object"
	"layerfs.dev/layerfs/wire/errclass"
)

// ErrClosed is a cache file started after the Store, and its cache,
// closed.
var ErrClosed = errclass.New(errclass.Unavailable, "store's cache closed")

// File is a cache file being written: an unnamed file (O_TMPFILE) in its
// place's directory, or, where the file system makes none, a temporary
// one beside it; linked into place whole by Place. It is written inside
// the write-back window (writeback.go), or fsynced where no window could
// be opened.
type File struct {
	d      *Dir
	f      *os.File
	path   string // its place
	named  bool   // a temporary file with a name, to remove
	window bool   // inside the window: abort or place must end it
}

// Create starts the cache file that goes to path (Path of its content).
// Write it through File, then Place or Abort it.
func (d *Dir) Create(path string) (*File, error) {
	dir := filepath.Dir(path)
	dfd, err := d.dirs.open(dir)
	if err != nil {
		return nil, err
	}
	c := &File{d: d, path: path, window: d.wb.begin() == nil}
	// Read-only from the start: written through this descriptor only.
	fd, err := unix.Openat(dfd, ".", unix.O_TMPFILE|unix.O_RDWR|unix.O_CLOEXEC, 0o444)
	if err == nil {
		c.f = os.NewFile(uintptr(fd), path)
		return c, nil
	}
	f, err := os.CreateTemp(dir, ".tmp-")
	if err == nil {
		err = f.Chmod(0o444)
	}
	if err != nil {
		if f != nil {
			f.Close()
			os.Remove(f.Name())
		}
		c.Abort()
		return nil, err
	}
	c.f, c.named = f, true
	return c, nil
}

// File is the file to write the content into (read-only to others).
func (c *File) File() *os.File { return c.f }

// SetPath changes where Place puts the file: a content whose ID is known
// only once it is written whole.
func (c *File) SetPath(path string) { c.path = path }

// Place links the file into place; a file already in place (another
// writer's) is kept and this one dropped, which placed reports. size is
// the content's, counted in Placed and against the bound.
func (c *File) Place(size int64) (placed bool, err error) {
	defer c.Abort()
	if !c.window {
		if err := c.f.Sync(); err != nil {
			return false, err
		}
	}
	if c.named {
		// link, not rename: a file already in place is never replaced.
		err = os.Link(c.f.Name(), c.path)
	} else {
		err = c.d.dirs.link(int(c.f.Fd()), c.path)
	}
	switch {
	case errors.Is(err, fs.ErrExist):
		return false, nil
	case err != nil:
		return false, fmt.Errorf("place cache file %s: %w", c.path, err)
	}
	// Its bytes were checked by the writer: trusted while unchanged.
	// Sealed, where the file system can, once no writer holds it.
	var st unix.Stat_t
	id, idErr := object.ParseID(filepath.Base(c.path))
	statErr := unix.Fstat(int(c.f.Fd()), &st)
	if c.d.verityErr == nil {
		name := c.f.Name()
		c.f.Close()
		c.f = nil
		if c.named {
			os.Remove(name)
		}
		c.d.seal(c.path, &st)
	}
	if idErr == nil && statErr == nil {
		c.d.written(id, &st)
	}
	c.d.placed.Add(size)
	c.d.bound.placed(size)
	return true, nil
}

// Abort drops the file unless it was placed; it is a no-op after Place.
func (c *File) Abort() {
	if c.f != nil {
		c.f.Close()
		if c.named {
			os.Remove(c.f.Name())
		}
		c.f = nil
	}
	if c.window {
		c.window = false
		c.d.wb.end()
	}
}

// dirs keeps a descriptor of each of the cache's directories written to,
// so that a cache file is made and linked without a walk of its path.
type dirs struct {
	mu     sync.Mutex
	fds    map[string]int // directory path -> O_PATH descriptor
	proc   bool           // link through /proc/self/fd: AT_EMPTY_PATH is refused
	closed bool
}

// open returns the descriptor of dir, made if missing.
func (d *dirs) open(dir string) (int, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return -1, ErrClosed
	}
	if fd, ok := d.fds[dir]; ok {
		return fd, nil
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return -1, err
	}
	fd, err := unix.Open(dir, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, fmt.Errorf("open %s: %w", dir, err)
	}
	if d.fds == nil {
		d.fds = map[string]int{}
	}
	d.fds[dir] = fd
	return fd, nil
}

// link gives the unnamed file fd the name path, in a directory opened
// before.
func (d *dirs) link(fd int, path string) error {
	dfd, err := d.open(filepath.Dir(path))
	if err != nil {
		return err
	}
	name := filepath.Base(path)
	d.mu.Lock()
	proc := d.proc
	d.mu.Unlock()
	if !proc {
		// AT_EMPTY_PATH needs CAP_DAC_READ_SEARCH.
		err = unix.Linkat(fd, "", dfd, name, unix.AT_EMPTY_PATH)
		if !errors.Is(err, unix.ENOENT) && !errors.Is(err, unix.EPERM) {
			return err
		}
		d.mu.Lock()
		d.proc = true
		d.mu.Unlock()
	}
	return unix.Linkat(unix.AT_FDCWD, fmt.Sprintf("/proc/self/fd/%d", fd), dfd, name, unix.AT_SYMLINK_FOLLOW)
}

// closeAll closes the descriptors.
func (d *dirs) closeAll() {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.closed = true
	for dir, fd := range d.fds {
		unix.Close(fd)
		delete(d.fds, dir)
	}
}
