package hostview

import (
	"context"
	"syscall"

	gofs "github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
	"golang.org/x/sys/unix"

	"layerfs.dev/layerfs/internal/dirfd"
)

// attrTarget is what a SETATTR changes: an open file, or an entry named
// by its directory (never following a symlink).
type attrTarget interface {
	chown(uid, gid int) error
	chmod(mode uint32) error
	truncate(size int64) error
	utimes(ts []unix.Timespec) error
	stat(st *unix.Stat_t) error
}

type fdTarget int

func (f fdTarget) chown(uid, gid int) error  { return unix.Fchown(int(f), uid, gid) }
func (f fdTarget) chmod(mode uint32) error   { return unix.Fchmod(int(f), mode) }
func (f fdTarget) truncate(size int64) error { return unix.Ftruncate(int(f), size) }
func (f fdTarget) utimes(ts []unix.Timespec) error {
	return unix.UtimesNanoAt(int(f), "", ts, unix.AT_EMPTY_PATH)
}
func (f fdTarget) stat(st *unix.Stat_t) error { return unix.Fstat(int(f), st) }

type atTarget dirfd.At

func (a atTarget) chown(uid, gid int) error {
	return unix.Fchownat(a.Dir, a.Name, uid, gid, unix.AT_SYMLINK_NOFOLLOW)
}
func (a atTarget) chmod(mode uint32) error {
	return unix.Fchmodat(a.Dir, a.Name, mode, unix.AT_SYMLINK_NOFOLLOW)
}
func (a atTarget) utimes(ts []unix.Timespec) error {
	return unix.UtimesNanoAt(a.Dir, a.Name, ts, unix.AT_SYMLINK_NOFOLLOW)
}
func (a atTarget) stat(st *unix.Stat_t) error { return dirfd.At(a).Lstat(st) }

// truncate opens a regular file for it, never a fifo's other end.
func (a atTarget) truncate(size int64) error {
	var st unix.Stat_t
	if err := a.stat(&st); err != nil {
		return err
	}
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFREG:
	case unix.S_IFDIR:
		return unix.EISDIR
	default:
		return unix.EINVAL
	}
	fd, err := unix.Openat(a.Dir, a.Name, unix.O_WRONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	return unix.Ftruncate(fd, size)
}

// Setattr changes owner (the ids translated: see the package doc), mode,
// size and times, in that order, so that a mode given with an owner is
// the one left.
func (n *node) Setattr(ctx context.Context, fh gofs.FileHandle, in *fuse.SetAttrIn, out *fuse.AttrOut) syscall.Errno {
	var t attrTarget
	if h, ok := fh.(*handle); ok {
		t = fdTarget(h.fd)
	} else {
		a, e := n.at("")
		if e != 0 {
			return e
		}
		defer unix.Close(a.Dir)
		t = atTarget(a)
	}
	uid, gid := -1, -1
	if u, ok := in.GetUID(); ok {
		uid = int(n.s.uids.inner(u))
	}
	if g, ok := in.GetGID(); ok {
		gid = int(n.s.gids.inner(g))
	}
	if uid >= 0 || gid >= 0 {
		if err := t.chown(uid, gid); err != nil {
			return errno(err)
		}
	}
	if m, ok := in.GetMode(); ok {
		if err := t.chmod(m & 0o7777); err != nil {
			return errno(err)
		}
	}
	if sz, ok := in.GetSize(); ok {
		if err := t.truncate(int64(sz)); err != nil {
			return errno(err)
		}
	}
	if ts, ok := times(in); ok {
		if err := t.utimes(ts); err != nil {
			return errno(err)
		}
	}
	var st unix.Stat_t
	if err := t.stat(&st); err != nil {
		return errno(err)
	}
	n.s.fill(&st, &out.Attr)
	return 0
}

// times are the access and modification times a SETATTR sets, for
// utimensat; false when it sets neither.
func times(in *fuse.SetAttrIn) ([]unix.Timespec, bool) {
	ts := []unix.Timespec{{Nsec: unix.UTIME_OMIT}, {Nsec: unix.UTIME_OMIT}}
	set := false
	if in.Valid&fuse.FATTR_ATIME_NOW != 0 {
		ts[0], set = unix.Timespec{Nsec: unix.UTIME_NOW}, true
	} else if t, ok := in.GetATime(); ok {
		ts[0], set = unix.NsecToTimespec(t.UnixNano()), true
	}
	if in.Valid&fuse.FATTR_MTIME_NOW != 0 {
		ts[1], set = unix.Timespec{Nsec: unix.UTIME_NOW}, true
	} else if t, ok := in.GetMTime(); ok {
		ts[1], set = unix.NsecToTimespec(t.UnixNano()), true
	}
	return ts, set
}
