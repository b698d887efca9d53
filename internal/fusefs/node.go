package fusefs

import (
	"context"
	"sync"
	"syscall"

	gofs "github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
	"golang.org/x/sys/unix"

	"layerfs.dev/layerfs/internal/overlay"
)

// node is the go-fuse inode of one overlay node.
type node struct {
	gofs.Inode
	m  *Server
	on *overlay.Node

	bmu   sync.Mutex
	upper int32 // passthrough registration of the upper file, 0 if none
	lower int32 // of the lower (cache) file
	// live counts the open passthrough handles backed by the upper [0]
	// and the lower [1] file: while one kind is open, the kernel inode
	// takes no backing file of the other kind.
	live [2]int
}

// stable returns the go-fuse identity of overlay node c: its inode number,
// and a generation that changes when its kernel inode is retired.
func (m *Server) stable(c *overlay.Node) gofs.StableAttr {
	gen := m.gen
	if v, ok := m.regens.Load(c.Ino()); ok {
		gen += v.(uint64)
	}
	return gofs.StableAttr{Mode: c.Mode(), Ino: c.Ino(), Gen: gen}
}

// retire gives overlay node c a new generation: the next lookup of it makes
// a new kernel inode, and the kernel drops its cached entry for the old one
// when it revalidates it.
func (m *Server) retire(c *overlay.Node) {
	m.regenMu.Lock()
	defer m.regenMu.Unlock()
	v, _ := m.regens.Load(c.Ino())
	n, _ := v.(uint64)
	m.regens.Store(c.Ino(), n+1)
}

var (
	_ gofs.NodeLookuper       = (*node)(nil)
	_ gofs.NodeGetattrer      = (*node)(nil)
	_ gofs.NodeSetattrer      = (*node)(nil)
	_ gofs.NodeReaddirer      = (*node)(nil)
	_ gofs.NodeMkdirer        = (*node)(nil)
	_ gofs.NodeMknoder        = (*node)(nil)
	_ gofs.NodeCreater        = (*node)(nil)
	_ gofs.NodeOpener         = (*node)(nil)
	_ gofs.NodeUnlinker       = (*node)(nil)
	_ gofs.NodeRmdirer        = (*node)(nil)
	_ gofs.NodeRenamer        = (*node)(nil)
	_ gofs.NodeLinker         = (*node)(nil)
	_ gofs.NodeSymlinker      = (*node)(nil)
	_ gofs.NodeReadlinker     = (*node)(nil)
	_ gofs.NodeGetxattrer     = (*node)(nil)
	_ gofs.NodeSetxattrer     = (*node)(nil)
	_ gofs.NodeListxattrer    = (*node)(nil)
	_ gofs.NodeRemovexattrer  = (*node)(nil)
	_ gofs.NodeStatfser       = (*node)(nil)
	_ gofs.NodeOnForgetter    = (*node)(nil)
	_ gofs.NodeFlusher        = (*node)(nil)
	_ gofs.NodeCopyFileRanger = (*node)(nil)
)

// nameMax is the longest name a path component may have (NAME_MAX). The
// kernel sends FUSE names up to 1024 bytes; every request that takes a
// name answers ENAMETOOLONG for a longer one before anything touches the
// upper layer, as a native file system does (a lookup must not say ENOENT,
// which the kernel would cache as a negative entry).
const nameMax = overlay.NameMax

func nameErrno(names ...string) syscall.Errno {
	for _, n := range names {
		if len(n) > nameMax {
			return syscall.ENAMETOOLONG
		}
	}
	return 0
}

func caller(ctx context.Context) overlay.Caller {
	if c, ok := ctx.(*fuse.Context); ok {
		return overlay.Caller{UID: c.Uid, GID: c.Gid}
	}
	return overlay.Caller{}
}

func fillAttr(a *overlay.Attr, out *fuse.Attr) {
	out.Ino = a.Ino
	out.Mode = a.Mode
	out.Nlink = a.Nlink
	out.Uid, out.Gid = a.UID, a.GID
	out.Size = uint64(a.Size)
	out.Blocks = uint64(a.Blocks)
	out.Rdev = uint32(a.Rdev)
	out.Blksize = 4096
	out.Atime, out.Atimensec = uint64(a.Atime/1e9), uint32(a.Atime%1e9)
	out.Mtime, out.Mtimensec = uint64(a.Mtime/1e9), uint32(a.Mtime%1e9)
	out.Ctime, out.Ctimensec = uint64(a.Ctime/1e9), uint32(a.Ctime%1e9)
}

// child wraps an overlay node in a go-fuse inode (reusing the live one of
// the same inode number) and fills out.
func (n *node) child(ctx context.Context, c *overlay.Node, out *fuse.EntryOut) (*gofs.Inode, syscall.Errno) {
	a, err := n.m.ov.Getattr(ctx, c, nil)
	if err != nil {
		return nil, n.m.errno(err)
	}
	fillAttr(&a, &out.Attr)
	return n.NewInode(ctx, &node{m: n.m, on: c}, n.m.stable(c)), 0
}

func (n *node) Lookup(ctx context.Context, name string, out *fuse.EntryOut) (*gofs.Inode, syscall.Errno) {
	if errno := nameErrno(name); errno != 0 {
		return nil, errno
	}
	c, err := n.m.ov.Lookup(ctx, n.on, name)
	if err != nil {
		return nil, n.m.errno(err)
	}
	return n.child(ctx, c, out)
}

func (n *node) Getattr(ctx context.Context, fh gofs.FileHandle, out *fuse.AttrOut) syscall.Errno {
	var f *overlay.File
	if h, ok := fh.(*handle); ok {
		f = h.f
	}
	a, err := n.m.ov.Getattr(ctx, n.on, f)
	if err != nil {
		return n.m.errno(err)
	}
	fillAttr(&a, &out.Attr)
	return 0
}

func (n *node) Setattr(ctx context.Context, fh gofs.FileHandle, in *fuse.SetAttrIn, out *fuse.AttrOut) syscall.Errno {
	var s overlay.SetAttr
	if m, ok := in.GetMode(); ok {
		s.Valid |= overlay.SetMode
		s.Mode = m
	}
	if u, ok := in.GetUID(); ok {
		s.Valid |= overlay.SetUID
		s.UID = u
	}
	if g, ok := in.GetGID(); ok {
		s.Valid |= overlay.SetGID
		s.GID = g
	}
	if sz, ok := in.GetSize(); ok {
		s.Valid |= overlay.SetSize
		s.Size = int64(sz)
	}
	if in.Valid&fuse.FATTR_ATIME_NOW != 0 {
		s.Valid |= overlay.SetAtimeNow
	} else if t, ok := in.GetATime(); ok {
		s.Valid |= overlay.SetAtime
		s.Atime = t.UnixNano()
	}
	if in.Valid&fuse.FATTR_MTIME_NOW != 0 {
		s.Valid |= overlay.SetMtimeNow
	} else if t, ok := in.GetMTime(); ok {
		s.Valid |= overlay.SetMtime
		s.Mtime = t.UnixNano()
	}
	var f *overlay.File
	if h, ok := fh.(*handle); ok {
		f = h.f
	}
	a, err := n.m.ov.Setattr(ctx, n.on, s, f)
	if err != nil {
		return n.m.errno(err)
	}
	if in.Valid&fuse.FATTR_KILL_SUIDGID != 0 {
		if a, err = n.killSuid(ctx, a, f); err != nil {
			return n.m.errno(err)
		}
	}
	fillAttr(&a, &out.Attr)
	return 0
}

// killSuid clears set-user-ID and (with group execute) set-group-ID, as a
// write by an unprivileged caller must: with handle_killpriv_v2 the kernel
// leaves it to the file system, and passthrough writes reach the upper file
// as the daemon, which keeps them.
func (n *node) killSuid(ctx context.Context, a overlay.Attr, f *overlay.File) (overlay.Attr, error) {
	kill := a.Mode & syscall.S_ISUID
	if a.Mode&(syscall.S_ISGID|syscall.S_IXGRP) == syscall.S_ISGID|syscall.S_IXGRP {
		kill |= syscall.S_ISGID
	}
	if kill == 0 {
		return a, nil
	}
	return n.m.ov.Setattr(ctx, n.on, overlay.SetAttr{Valid: overlay.SetMode, Mode: a.Mode &^ kill & 07777}, f)
}

func (n *node) Readdir(ctx context.Context) (gofs.DirStream, syscall.Errno) {
	l, err := n.m.ov.Readdir(ctx, n.on)
	if err != nil {
		return nil, n.m.errno(err)
	}
	ents := make([]fuse.DirEntry, len(l))
	for i, e := range l {
		ents[i] = fuse.DirEntry{Name: e.Name, Ino: e.Ino, Mode: e.Mode}
	}
	return gofs.NewListDirStream(ents), 0
}

func (n *node) Mkdir(ctx context.Context, name string, mode uint32, out *fuse.EntryOut) (*gofs.Inode, syscall.Errno) {
	if errno := nameErrno(name); errno != 0 {
		return nil, errno
	}
	c, err := n.m.ov.Mkdir(ctx, n.on, name, mode, caller(ctx))
	if err != nil {
		return nil, n.m.errno(err)
	}
	return n.child(ctx, c, out)
}

func (n *node) Mknod(ctx context.Context, name string, mode uint32, dev uint32, out *fuse.EntryOut) (*gofs.Inode, syscall.Errno) {
	if errno := nameErrno(name); errno != 0 {
		return nil, errno
	}
	c, err := n.m.ov.Mknod(ctx, n.on, name, mode, uint64(dev), caller(ctx))
	if err != nil {
		return nil, n.m.errno(err)
	}
	return n.child(ctx, c, out)
}

func (n *node) Symlink(ctx context.Context, target, name string, out *fuse.EntryOut) (*gofs.Inode, syscall.Errno) {
	if errno := nameErrno(name); errno != 0 {
		return nil, errno
	}
	c, err := n.m.ov.Symlink(ctx, n.on, name, target, caller(ctx))
	if err != nil {
		return nil, n.m.errno(err)
	}
	return n.child(ctx, c, out)
}

func (n *node) Link(ctx context.Context, target gofs.InodeEmbedder, name string, out *fuse.EntryOut) (*gofs.Inode, syscall.Errno) {
	if errno := nameErrno(name); errno != 0 {
		return nil, errno
	}
	t, ok := target.(*node)
	if !ok {
		return nil, syscall.EXDEV
	}
	if err := n.m.ov.Link(ctx, t.on, n.on, name); err != nil {
		return nil, n.m.errno(err)
	}
	return n.child(ctx, t.on, out)
}

func (n *node) Readlink(ctx context.Context) ([]byte, syscall.Errno) {
	s, err := n.m.ov.Readlink(ctx, n.on)
	if err != nil {
		return nil, n.m.errno(err)
	}
	return []byte(s), 0
}

func (n *node) Unlink(ctx context.Context, name string) syscall.Errno {
	if errno := nameErrno(name); errno != 0 {
		return errno
	}
	child := n.GetChild(name)
	if err := n.m.ov.Unlink(ctx, n.on, name); err != nil {
		return n.m.errno(err)
	}
	dropBacking(child)
	return 0
}

func (n *node) Rmdir(ctx context.Context, name string) syscall.Errno {
	if errno := nameErrno(name); errno != 0 {
		return errno
	}
	return n.m.errno(n.m.ov.Rmdir(ctx, n.on, name))
}

func (n *node) Rename(ctx context.Context, name string, newParent gofs.InodeEmbedder, newName string, flags uint32) syscall.Errno {
	if errno := nameErrno(name, newName); errno != 0 {
		return errno
	}
	np, ok := newParent.(*node)
	if !ok {
		return syscall.EXDEV
	}
	replaced := np.GetChild(newName)
	if err := n.m.ov.Rename(ctx, n.on, name, np.on, newName, flags); err != nil {
		return n.m.errno(err)
	}
	if flags&unix.RENAME_EXCHANGE == 0 {
		dropBacking(replaced)
	}
	return 0
}

// dropBacking gives up the passthrough registrations of an inode whose name
// went away: each holds its backing file open, so until the kernel forgets
// the inode (which may be long after) a removed file's space would not be
// freed. Open files keep their own reference; a later open registers again.
func dropBacking(in *gofs.Inode) {
	if in == nil {
		return
	}
	if c, ok := in.Operations().(*node); ok {
		c.OnForget()
	}
}

func (n *node) Getxattr(ctx context.Context, attr string, dest []byte) (uint32, syscall.Errno) {
	v, err := n.m.ov.Getxattr(ctx, n.on, attr)
	if err != nil {
		return 0, n.m.errno(err)
	}
	if len(dest) < len(v) {
		return uint32(len(v)), syscall.ERANGE
	}
	return uint32(copy(dest, v)), 0
}

func (n *node) Setxattr(ctx context.Context, attr string, data []byte, flags uint32) syscall.Errno {
	return n.m.errno(n.m.ov.Setxattr(ctx, n.on, attr, data, int(flags)))
}

func (n *node) Removexattr(ctx context.Context, attr string) syscall.Errno {
	return n.m.errno(n.m.ov.Removexattr(ctx, n.on, attr))
}

func (n *node) Listxattr(ctx context.Context, dest []byte) (uint32, syscall.Errno) {
	names, err := n.m.ov.Listxattr(ctx, n.on)
	if err != nil {
		return 0, n.m.errno(err)
	}
	sz := 0
	for _, s := range names {
		sz += len(s) + 1
	}
	if len(dest) < sz {
		return uint32(sz), syscall.ERANGE
	}
	off := 0
	for _, s := range names {
		off += copy(dest[off:], s)
		dest[off] = 0
		off++
	}
	return uint32(sz), 0
}

func (n *node) Statfs(ctx context.Context, out *fuse.StatfsOut) syscall.Errno {
	st, err := n.m.ov.Statfs(ctx)
	if err != nil {
		return n.m.errno(err)
	}
	out.Blocks, out.Bfree, out.Bavail = st.Blocks, st.Bfree, st.Bavail
	out.Files, out.Ffree = st.Files, st.Ffree
	out.Bsize, out.Frsize = uint32(st.Bsize), uint32(st.Frsize)
	out.NameLen = uint32(st.Namelen)
	return 0
}

// Flush answers ENOSYS: the kernel then stops sending FLUSH on close for
// the whole mount (opens also carry FOPEN_NOFLUSH). Data is in the upper
// file as soon as a write returns; there is nothing to flush.
func (n *node) Flush(ctx context.Context, f gofs.FileHandle) syscall.Errno {
	return syscall.ENOSYS
}

// CopyFileRange copies between the backing files in the kernel of the
// upper file system, which clones extents where it can (reflinks), instead
// of the kernel's fallback of reading and writing through the mount.
func (n *node) CopyFileRange(ctx context.Context, fhIn gofs.FileHandle, offIn uint64, out *gofs.Inode, fhOut gofs.FileHandle, offOut uint64, length uint64, flags uint64) (uint32, syscall.Errno) {
	hi, ok1 := fhIn.(*handle)
	ho, ok2 := fhOut.(*handle)
	if !ok1 || !ok2 || ho.f.Lower() {
		return 0, syscall.EBADF
	}
	if length > 1<<30 {
		length = 1 << 30
	}
	ri, ro := int64(offIn), int64(offOut)
	w, err := unix.CopyFileRange(hi.f.Fd(), &ri, ho.f.Fd(), &ro, int(length), 0)
	if err != nil {
		return 0, n.m.errno(err)
	}
	return uint32(w), 0
}

func (n *node) OnForget() {
	n.bmu.Lock()
	defer n.bmu.Unlock()
	for _, id := range []*int32{&n.upper, &n.lower} {
		if *id != 0 {
			n.m.unregister(*id)
			*id = 0
		}
	}
}

func (n *node) Create(ctx context.Context, name string, flags uint32, mode uint32, out *fuse.EntryOut) (*gofs.Inode, gofs.FileHandle, uint32, syscall.Errno) {
	if errno := nameErrno(name); errno != 0 {
		return nil, nil, 0, errno
	}
	c, f, err := n.m.ov.Create(ctx, n.on, name, int(flags), mode, caller(ctx))
	if err != nil {
		return nil, nil, 0, n.m.errno(err)
	}
	a, err := n.m.ov.Getattr(ctx, c, f)
	if err != nil {
		f.Close()
		return nil, nil, 0, n.m.errno(err)
	}
	fillAttr(&a, &out.Attr)
	child := &node{m: n.m, on: c}
	ino := n.NewInode(ctx, child, n.m.stable(c))
	cn := ino.Operations().(*node)
	h, fl, errno := cn.newHandle(ctx, f)
	if errno != 0 {
		return nil, nil, 0, errno
	}
	return ino, h, fl, 0
}

func (n *node) Open(ctx context.Context, flags uint32) (gofs.FileHandle, uint32, syscall.Errno) {
	f, err := n.m.ov.Open(ctx, n.on, int(flags))
	if err != nil {
		return nil, 0, n.m.errno(err)
	}
	if flags&syscall.O_ACCMODE != syscall.O_RDONLY && caller(ctx).UID != 0 {
		// Writes will bypass the daemon: kill set-ID bits now.
		a, err := n.m.ov.Getattr(ctx, n.on, f)
		if err == nil {
			_, err = n.killSuid(ctx, a, f)
		}
		if err != nil {
			f.Close()
			return nil, 0, n.m.errno(err)
		}
	}
	return n.newHandle(ctx, f)
}

// newHandle wraps an open overlay file, registering its backing file for
// passthrough. The registration of a node's upper or lower file is made
// once and kept until the kernel forgets the node, so re-opens cost no
// ioctl; the wrapper around the bridge puts the id in the OPEN reply.
//
// A kernel inode has one backing file while any passthrough open of it
// lasts: a reader of committed content holds the Store's cache file as
// the backing, and a writer (whose open copied the file up) needs the
// upper file, which the kernel would refuse with EIO. Then the node's
// kernel inode is retired instead: the open answers ESTALE, on which the
// kernel walks the path again revalidating every entry, the lookup gives
// the node a new generation and so a new kernel inode, and the open is
// made on that one. The reader keeps the old inode and the bytes it opened.
func (n *node) newHandle(ctx context.Context, f *overlay.File) (*handle, uint32, syscall.Errno) {
	h := &handle{m: n.m, n: n, f: f, slot: -1}
	flags := uint32(fuse.FOPEN_NOFLUSH)
	if n.m.passthrough.Load() {
		n.bmu.Lock()
		slot, id := 0, &n.upper
		if f.Lower() {
			slot, id = 1, &n.lower
		}
		if n.live[1-slot] > 0 {
			n.bmu.Unlock()
			n.m.retire(n.on)
			f.Close()
			return nil, 0, syscall.ESTALE
		}
		if *id == 0 {
			*id = n.m.register(f.Fd())
		}
		reg := *id
		if reg != 0 {
			if c, ok := ctx.(*fuse.Context); ok {
				n.live[slot]++
				n.bmu.Unlock()
				n.m.pending.Store(c.Cancel, reg)
				h.passthrough, h.slot = true, slot
				return h, flags, 0
			}
		}
		n.bmu.Unlock()
	}
	if f.Lower() {
		flags |= fuse.FOPEN_KEEP_CACHE // immutable content
	}
	return h, flags, 0
}

// handle is an open file.
type handle struct {
	m           *Server
	n           *node
	f           *overlay.File
	passthrough bool
	slot        int // node.live index when passthrough
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
	return fuse.ReadResultFd(uintptr(h.f.Fd()), off, len(dest)), 0
}

func (h *handle) Write(ctx context.Context, data []byte, off int64) (uint32, syscall.Errno) {
	n, err := h.f.WriteAt(data, off)
	return uint32(n), h.m.errno(err)
}

func (h *handle) Release(ctx context.Context) syscall.Errno {
	if h.passthrough {
		h.n.bmu.Lock()
		h.n.live[h.slot]--
		h.n.bmu.Unlock()
	}
	return h.m.errno(h.f.Close())
}

func (h *handle) Fsync(ctx context.Context, flags uint32) syscall.Errno {
	if h.f.Lower() || h.m.noSync {
		return 0 // immutable, already durable in the Store; or durable at commit
	}
	return h.m.errno(unix.Fsync(h.f.Fd()))
}

func (h *handle) Lseek(ctx context.Context, off uint64, whence uint32) (uint64, syscall.Errno) {
	n, err := unix.Seek(h.f.Fd(), int64(off), int(whence))
	return uint64(n), h.m.errno(err)
}

func (h *handle) Allocate(ctx context.Context, off, size uint64, mode uint32) syscall.Errno {
	if h.f.Lower() {
		return syscall.EBADF
	}
	return h.m.errno(unix.Fallocate(h.f.Fd(), mode, int64(off), int64(size)))
}
