package overlay

import (
	"fmt"
	"sync"

	"golang.org/x/sys/unix"

	"layerfs.dev/layerfs/internal/dirfd"
)

// The upper layer is reached only relative to directory descriptors: the
// upper and work directories are opened once, and an upper entry is named
// by a descriptor of its parent directory (opened beneath the upper with
// dirfd.OpenBeneath: RESOLVE_BENEATH and no symlinks) and its own name. No host path
// grows with the workspace's depth, so a workspace path of any depth works
// (a host path joining the upper directory with it would pass PATH_MAX),
// and nothing under the upper can be swapped for a symlink that leads the
// daemon out of it.

// at is an upper (or work) entry: a name in an open directory.
type at struct {
	dir  int     // an O_PATH directory descriptor
	name string  // one path component, or "." for the directory itself
	held *heldFd // dir's entry in the descriptor cache, released by close
}

func (a at) close() {
	if a.held != nil {
		a.held.release()
	}
}

// dirFds caches O_PATH descriptors of upper directories, so that a run of
// operations in one directory opens it once. A descriptor follows its
// directory through renames; a removed directory's entry is dropped. The
// cache is small and bounded: an entry evicted (or dropped) while in use is
// closed by its last user.
type dirFds struct {
	mu sync.Mutex
	m  map[*Node]*heldFd
}

// maxDirFds bounds the cache per overlay (a daemon serves many workspaces
// under one descriptor limit).
const maxDirFds = 64

type heldFd struct {
	c    *dirFds
	fd   int
	refs int  // users; guarded by c.mu
	dead bool // out of the cache: closed when refs drops to 0
}

func (h *heldFd) release() {
	h.c.mu.Lock()
	h.refs--
	closeIt := h.dead && h.refs == 0
	h.c.mu.Unlock()
	if closeIt {
		unix.Close(h.fd)
	}
}

// get returns d's cached descriptor, held, or opens one with open.
func (c *dirFds) get(d *Node, open func() (int, error)) (*heldFd, error) {
	c.mu.Lock()
	if h := c.m[d]; h != nil {
		h.refs++
		c.mu.Unlock()
		return h, nil
	}
	c.mu.Unlock()
	fd, err := open()
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if h := c.m[d]; h != nil { // opened meanwhile by another caller
		unix.Close(fd)
		h.refs++
		return h, nil
	}
	if c.m == nil {
		c.m = map[*Node]*heldFd{}
	}
	if len(c.m) >= maxDirFds {
		for k := range c.m { // any one: map order is random
			c.dropLocked(k)
			break
		}
	}
	h := &heldFd{c: c, fd: fd, refs: 1}
	c.m[d] = h
	return h, nil
}

// drop forgets d's descriptor (its directory was removed).
func (c *dirFds) drop(d *Node) {
	c.mu.Lock()
	c.dropLocked(d)
	c.mu.Unlock()
}

func (c *dirFds) dropLocked(d *Node) {
	h := c.m[d]
	if h == nil {
		return
	}
	delete(c.m, d)
	h.dead = true
	if h.refs == 0 {
		unix.Close(h.fd)
	}
}

// closeAll drops every entry.
func (c *dirFds) closeAll() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for d := range c.m {
		c.dropLocked(d)
	}
}

// proc names the entry through /proc/self/fd for the calls that have no
// *at form (the l*xattr calls, truncate): a short path whatever the depth,
// whose last component is not followed by the l* calls.
func (a at) proc() string { return a.entry().Proc() }

func (a at) entry() dirfd.At { return dirfd.At{Dir: a.dir, Name: a.name} }

// openRoots opens the upper and work directories as the descriptors every
// upper and work entry is relative to.
func (o *Overlay) openRoots(readOnly bool) error {
	fd, err := unix.Open(o.upperDir, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("open upper dir: %w", err)
	}
	o.upperFd, o.workFd = fd, -1
	if !readOnly {
		if o.workFd, err = unix.Open(o.workDir, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0); err != nil {
			unix.Close(fd)
			return fmt.Errorf("open work dir: %w", err)
		}
	}
	return nil
}

// childAt names d/name in the upper: d's upper directory, from the cache
// or opened beneath the upper. Needs o.mu (d's path must not change
// meanwhile); the caller closes it.
func (o *Overlay) childAt(d *Node, name string) (at, error) {
	if d == o.root {
		return at{dir: o.upperFd, name: name}, nil
	}
	if !d.linked() {
		return at{}, unix.ENOENT
	}
	h, err := o.dirFds.get(d, func() (int, error) { return dirfd.OpenBeneath(o.upperFd, o.dirPath(d)) })
	if err != nil {
		return at{}, fmt.Errorf("open upper directory: %w", err)
	}
	return at{dir: h.fd, name: name, held: h}, nil
}

// nodeAt names n's upper entry (the root's is "." in the upper). Needs
// o.mu; n must be linked; the caller closes it.
func (o *Overlay) nodeAt(n *Node) (at, error) {
	if n == o.root {
		return at{dir: o.upperFd, name: "."}, nil
	}
	return o.childAt(n.parent, n.name)
}

// workAt names a scratch entry of the work directory.
func (o *Overlay) workAt(name string) at { return at{dir: o.workFd, name: name} }

// openDirAt opens the directory a as a descriptor of its own.
func openDirAt(a at, flags int) (int, error) {
	return dirfd.At{Dir: a.dir, Name: a.name}.OpenDir(flags)
}

// removeAt removes a, a file or an empty directory.
func removeAt(a at) error {
	err := unix.Unlinkat(a.dir, a.name, 0)
	if err == unix.EISDIR {
		err = unix.Unlinkat(a.dir, a.name, unix.AT_REMOVEDIR)
	}
	return err
}

// keepTimes records the atime and mtime of d's upper directory and returns
// what puts them back: placing a copied-up entry in it changes nothing in
// the merged directory, so its times must not change (kernel overlayfs
// does the same). Needs o.mu.
func (o *Overlay) keepTimes(d *Node) (restore func(), err error) {
	e, err := o.nodeAt(d)
	if err != nil {
		return nil, err
	}
	var st unix.Stat_t
	if err := unix.Fstatat(e.dir, e.name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		e.close()
		return nil, err
	}
	return func() {
		unix.UtimesNanoAt(e.dir, e.name, []unix.Timespec{st.Atim, st.Mtim}, unix.AT_SYMLINK_NOFOLLOW)
		e.close()
	}, nil
}
