package hostview

import (
	"context"
	"sync"
	"syscall"

	gofs "github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
	"golang.org/x/sys/unix"

	"layerfs.dev/layerfs/internal/dirfd"
)

func (n *node) Create(ctx context.Context, name string, flags uint32, mode uint32, out *fuse.EntryOut) (*gofs.Inode, gofs.FileHandle, uint32, syscall.Errno) {
	fd := -1
	oflags := openFlags(flags) | unix.O_CREAT
	ino, e := n.create(ctx, name, mode|unix.S_IFREG, out, func(dir int) (err error) {
		fd, err = unix.Openat(dir, name, oflags, mode&0o7777)
		return err
	})
	if e != 0 {
		if fd >= 0 {
			unix.Close(fd)
		}
		return nil, nil, 0, e
	}
	// The new inode is not in the view's tree until Create returns.
	rel, ok := n.rel()
	child := ino.Operations().(*node)
	h, fl, e := child.newHandle(ctx, fd, int(flags), join(rel, name), ok)
	if e != 0 {
		return nil, nil, 0, e
	}
	return ino, h, fl, 0
}

// openFlags are the flags the daemon opens an inner file with for an open
// of the view: never following a symlink (the kernel resolved the path),
// never the daemon's controlling terminal, and without O_DIRECT, whose
// alignment the FUSE requests need not keep.
func openFlags(flags uint32) int {
	return int(flags)&^(unix.O_CREAT|unix.O_EXCL|unix.O_NOCTTY|unix.O_DIRECT) | unix.O_NOFOLLOW | unix.O_CLOEXEC
}

func (n *node) Open(ctx context.Context, flags uint32) (gofs.FileHandle, uint32, syscall.Errno) {
	a, e := n.at("")
	if e != 0 {
		return nil, 0, e
	}
	fd, err := unix.Openat(a.Dir, a.Name, openFlags(flags), 0)
	unix.Close(a.Dir)
	if err != nil {
		return nil, 0, errno(err)
	}
	if c, ok := ctx.(*fuse.Context); ok && flags&unix.O_ACCMODE != unix.O_RDONLY && c.Uid != 0 {
		// A write by passthrough reaches the upper file as the daemon,
		// which keeps set-ID bits: an unprivileged writer loses them now.
		if err := killSuid(fd); err != nil {
			unix.Close(fd)
			return nil, 0, errno(err)
		}
	}
	rel, ok := n.rel()
	return n.newHandle(ctx, fd, int(flags), rel, ok)
}

func killSuid(fd int) error {
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return err
	}
	kill := st.Mode & unix.S_ISUID
	if st.Mode&(unix.S_ISGID|unix.S_IXGRP) == unix.S_ISGID|unix.S_IXGRP {
		kill |= unix.S_ISGID
	}
	if kill == 0 {
		return nil
	}
	return unix.Fchmod(fd, st.Mode&0o7777&^kill)
}

// newHandle wraps fd, the inner file at rel (if named) opened with flags,
// choosing how its data is served: by passthrough from its upper file
// where it has one (upperFile), else through the daemon. A kernel inode takes one of the
// two at a time, and one backing file: an open that cannot share the
// mode of the node's open files retires the node (see retire).
func (n *node) newHandle(ctx context.Context, fd, flags int, rel string, named bool) (*handle, uint32, syscall.Errno) {
	h := &handle{n: n, fd: fd}
	write := flags&unix.O_ACCMODE != unix.O_RDONLY
	c, ok := ctx.(*fuse.Context)
	ufd := -1
	if ok && named && n.s.passthrough.Load() {
		ufd = n.s.upperFile(rel, fd, write)
	}
	n.bmu.Lock()
	defer n.bmu.Unlock()
	if ufd >= 0 {
		var st unix.Stat_t
		err := unix.Fstat(ufd, &st)
		switch {
		case err != nil:
			unix.Close(ufd)
			h.close()
			return nil, 0, errno(err)
		case n.cached > 0, n.pt > 0 && (st.Dev != n.bdev || st.Ino != n.bino || write && !n.bwrite):
			unix.Close(ufd)
			return nil, 0, n.retire(h)
		case n.pt > 0:
			unix.Close(ufd) // the registered one is the same file
		default:
			id := n.s.register(ufd)
			if id == 0 {
				unix.Close(ufd)
				return n.cachedOpen(h)
			}
			n.backing, n.bfd, n.bwrite, n.bdev, n.bino = id, ufd, write, st.Dev, st.Ino
		}
		n.pt++
		h.pt = true
		n.s.pending.Store(c.Cancel, n.backing)
		n.s.handles.Store(h, struct{}{})
		return h, fuse.FOPEN_NOFLUSH, 0
	}
	if n.pt > 0 {
		return nil, 0, n.retire(h)
	}
	return n.cachedOpen(h)
}

// cachedOpen serves h's data through the daemon, the kernel caching it
// for the open's time (not beyond: a sandbox may change the file). Called
// with bmu held.
func (n *node) cachedOpen(h *handle) (*handle, uint32, syscall.Errno) {
	n.cached++
	n.s.handles.Store(h, struct{}{})
	return h, fuse.FOPEN_NOFLUSH, 0
}

// retire gives the node's file a new kernel inode for the open h, which
// could not share this one's: the open answers ESTALE, on which the
// kernel walks the path again, revalidating its entries; the lookup then
// answers a new generation. The files open on the old inode keep it.
// Called with bmu held.
func (n *node) retire(h *handle) syscall.Errno {
	h.close()
	n.s.retire(n.StableAttr().Ino)
	return syscall.ESTALE
}

// upperFile opens rel's file in the overlay's upper directory, for
// reading and, with write, writing, when it is the file the inner
// descriptor fd has open and holds its data (no metacopy): the overlay's
// open made the copy-up a write needs. The two are one file when
// overlayfs reports the upper file's inode number (a file made in the
// upper) or the same size and times (a copy-up, reported by its origin's
// number); else, and where there is no upper file, -1.
func (s *Server) upperFile(rel string, fd int, write bool) int {
	a, err := dirfd.Beneath(s.upper, rel)
	if err != nil {
		return -1
	}
	defer unix.Close(a.Dir)
	mode := unix.O_RDONLY
	if write {
		mode = unix.O_RDWR
	}
	ufd, err := unix.Openat(a.Dir, a.Name, mode|unix.O_NOFOLLOW|unix.O_CLOEXEC|unix.O_NONBLOCK, 0)
	if err != nil {
		return -1
	}
	var o, u unix.Stat_t
	same := unix.Fstat(fd, &o) == nil && unix.Fstat(ufd, &u) == nil && u.Mode&unix.S_IFMT == unix.S_IFREG &&
		(o.Ino == u.Ino || o.Size == u.Size && o.Mtim == u.Mtim && o.Ctim == u.Ctim)
	if same {
		_, err := unix.Fgetxattr(ufd, "trusted.overlay.metacopy", nil)
		same = err == unix.ENODATA
	}
	if !same {
		unix.Close(ufd)
		return -1
	}
	return ufd
}

// handle is a file open in the view: fd, the inner file, serves what
// does not go by passthrough.
type handle struct {
	n    *node
	fd   int
	pt   bool // its data goes by passthrough
	once sync.Once
}

var (
	_ gofs.FileReader    = (*handle)(nil)
	_ gofs.FileWriter    = (*handle)(nil)
	_ gofs.FileReleaser  = (*handle)(nil)
	_ gofs.FileFsyncer   = (*handle)(nil)
	_ gofs.FileLseeker   = (*handle)(nil)
	_ gofs.FileAllocater = (*handle)(nil)
)

func (h *handle) Read(ctx context.Context, dest []byte, off int64) (fuse.ReadResult, syscall.Errno) {
	h.n.s.daemonIO.Add(1)
	return fuse.ReadResultFd(uintptr(h.fd), off, len(dest)), 0
}

func (h *handle) Write(ctx context.Context, data []byte, off int64) (uint32, syscall.Errno) {
	h.n.s.daemonIO.Add(1)
	n, err := unix.Pwrite(h.fd, data, off)
	return uint32(n), errno(err)
}

func (h *handle) Release(ctx context.Context) syscall.Errno {
	h.release()
	return 0
}

// release closes h and gives up its share of the node's mode: the last
// passthrough open unregisters the backing file, so that a file the
// sandbox removes is not held.
func (h *handle) release() {
	h.once.Do(func() {
		n := h.n
		n.bmu.Lock()
		if h.pt {
			if n.pt--; n.pt == 0 {
				n.s.unregister(n.backing)
				unix.Close(n.bfd)
				n.backing, n.bfd = 0, -1
			}
		} else {
			n.cached--
		}
		n.bmu.Unlock()
		n.s.handles.Delete(h)
		unix.Close(h.fd)
	})
}

// close closes h before it was counted.
func (h *handle) close() {
	h.once.Do(func() { unix.Close(h.fd) })
}

func (h *handle) Fsync(ctx context.Context, flags uint32) syscall.Errno {
	return errno(unix.Fsync(h.fd))
}

func (h *handle) Lseek(ctx context.Context, off uint64, whence uint32) (uint64, syscall.Errno) {
	n, err := unix.Seek(h.fd, int64(off), int(whence))
	return uint64(n), errno(err)
}

func (h *handle) Allocate(ctx context.Context, off, size uint64, mode uint32) syscall.Errno {
	return errno(unix.Fallocate(h.fd, mode, int64(off), int64(size)))
}

// CopyFileRange copies between the inner files in the kernel.
func (n *node) CopyFileRange(ctx context.Context, fhIn gofs.FileHandle, offIn uint64, out *gofs.Inode, fhOut gofs.FileHandle, offOut uint64, length uint64, flags uint64) (uint32, syscall.Errno) {
	hi, ok1 := fhIn.(*handle)
	ho, ok2 := fhOut.(*handle)
	if !ok1 || !ok2 {
		return 0, syscall.EBADF
	}
	length = min(length, 1<<30)
	ri, ro := int64(offIn), int64(offOut)
	w, err := unix.CopyFileRange(hi.fd, &ri, ho.fd, &ro, int(length), 0)
	return uint32(w), errno(err)
}
