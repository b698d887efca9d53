package overlay

import (
	"fmt"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// The upper layer is reached only relative to directory descriptors: the
// upper and work directories are opened once, and an upper entry is named
// by a descriptor of its parent directory (opened beneath the upper with
// openat2, RESOLVE_BENEATH and no symlinks) and its own name. No host path
// grows with the workspace's depth, so a workspace path of any depth works
// (a host path joining the upper directory with it would pass PATH_MAX),
// and nothing under the upper can be swapped for a symlink that leads the
// daemon out of it.

// at is an upper (or work) entry: a name in an open directory.
type at struct {
	dir  int    // an O_PATH directory descriptor
	name string // one path component, or "." for the directory itself
	own  bool   // dir was opened for this entry and is closed by close
}

func (a at) close() {
	if a.own {
		unix.Close(a.dir)
	}
}

// proc names the entry through /proc/self/fd for the calls that have no
// *at form (the l*xattr calls, truncate): a short path whatever the depth,
// whose last component is not followed by the l* calls.
func (a at) proc() string {
	return "/proc/self/fd/" + strconv.Itoa(a.dir) + "/" + a.name
}

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

// beneathHow opens a directory below the upper: no symlinks, no magic
// links, never above the starting directory.
var beneathHow = unix.OpenHow{
	Flags:   unix.O_PATH | unix.O_DIRECTORY | unix.O_CLOEXEC | unix.O_NOFOLLOW,
	Resolve: unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS | unix.RESOLVE_NO_XDEV,
}

// maxWalk is the longest path handed to one openat2: below PATH_MAX, so
// a deeper directory is reached in several steps.
const maxWalk = 3072

// openBeneath opens the directory rel (relative, slash-separated, "" for
// root itself) below root.
func openBeneath(root int, rel string) (int, error) {
	fd, own := root, false
	for rel != "" {
		step := rel
		if len(step) > maxWalk {
			i := strings.LastIndexByte(step[:maxWalk], '/')
			if i <= 0 {
				i = strings.IndexByte(step, '/') // a name is at most 255 bytes
			}
			step = step[:i]
		}
		rel = strings.TrimPrefix(rel[len(step):], "/")
		nfd, err := openat2(fd, step)
		if own {
			unix.Close(fd)
		}
		if err != nil {
			return -1, err
		}
		fd, own = nfd, true
	}
	if !own {
		return unix.Dup(root)
	}
	return fd, nil
}

func openat2(dir int, p string) (int, error) {
	for {
		fd, err := unix.Openat2(dir, p, &beneathHow)
		if err == unix.EINTR || err == unix.EAGAIN {
			continue // EAGAIN: a rename raced the RESOLVE_BENEATH walk
		}
		return fd, err
	}
}

// dirFd returns a descriptor of d's upper directory, and whether the caller
// must close it. Needs o.mu (d's path must not change meanwhile).
func (o *Overlay) dirFd(d *Node) (int, bool, error) {
	if d == o.root {
		return o.upperFd, false, nil
	}
	if !d.linked() {
		return -1, false, unix.ENOENT
	}
	fd, err := openBeneath(o.upperFd, o.dirPath(d))
	if err != nil {
		return -1, false, fmt.Errorf("open upper directory: %w", err)
	}
	return fd, true, nil
}

// childAt names d/name in the upper. Needs o.mu; the caller closes it.
func (o *Overlay) childAt(d *Node, name string) (at, error) {
	fd, own, err := o.dirFd(d)
	if err != nil {
		return at{}, err
	}
	return at{dir: fd, name: name, own: own}, nil
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
	return unix.Openat(a.dir, a.name, flags|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
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
