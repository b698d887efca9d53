package hostview

import (
	"context"
	"slices"
	"strings"
	"sync"
	"syscall"

	gofs "github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
	"golang.org/x/sys/unix"

	"layerfs.dev/layerfs/internal/dirfd"
	"layerfs.dev/layerfs/internal/fsids"
)

// node is the go-fuse inode of one file of the inner mount, named by its
// path there (the view's tree, which the kernel revalidates at every
// walk: nothing is cached).
type node struct {
	gofs.Inode
	s *Server

	bmu sync.Mutex
	// backing is the registered upper file while passthrough opens of the
	// node last (pt of them), bfd its descriptor and bwrite whether it was
	// opened for writing; cached counts the node's opens through the
	// daemon. The kernel inode takes one mode at a time.
	backing int32
	bfd     int
	bwrite  bool
	bdev    uint64
	bino    uint64
	pt      int
	cached  int
	// anon is a descriptor of a file that has no name (O_TMPFILE), for
	// the calls that name it: -1 for the others.
	anon int
}

func (s *Server) newNode() *node { return &node{s: s, bfd: -1, anon: -1} }

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
	_ gofs.NodeFlusher        = (*node)(nil)
	_ gofs.NodeCopyFileRanger = (*node)(nil)
	_ gofs.NodeTmpfiler       = (*node)(nil)
	_ gofs.NodeOnForgetter    = (*node)(nil)
)

// rel is the node's path below the inner root ("" for the root); false
// when the node has no name left in the view's tree.
func (n *node) rel() (string, bool) {
	var names []string
	p := n.EmbeddedInode()
	for !p.IsRoot() {
		name, parent := p.Parent()
		if parent == nil {
			return "", false
		}
		names = append(names, name)
		p = parent
	}
	slices.Reverse(names)
	return strings.Join(names, "/"), true
}

// at names the node's child name (the node itself for "") below the inner
// root, for the *at calls; the caller closes the At's Dir.
func (n *node) at(name string) (dirfd.At, syscall.Errno) {
	rel, ok := n.rel()
	if !ok {
		return dirfd.At{}, syscall.ESTALE
	}
	if name != "" {
		rel = join(rel, name)
	}
	if rel == "" {
		fd, err := unix.Dup(n.s.root)
		return dirfd.At{Dir: fd, Name: "."}, errno(err)
	}
	a, err := dirfd.Beneath(n.s.root, rel)
	return a, errno(err)
}

func join(dir, name string) string {
	if dir == "" {
		return name
	}
	return dir + "/" + name
}

// errno is err as an errno: the calls here fail with errnos only.
func errno(err error) syscall.Errno {
	if err == nil {
		return 0
	}
	return gofs.ToErrno(err)
}

// lstat stats a (closing its Dir) into out and returns the go-fuse
// identity of what it names.
func (n *node) lstat(a dirfd.At, out *fuse.Attr) (gofs.StableAttr, syscall.Errno) {
	defer unix.Close(a.Dir)
	var st unix.Stat_t
	if err := a.Lstat(&st); err != nil {
		return gofs.StableAttr{}, errno(err)
	}
	n.s.fill(&st, out)
	return n.s.stable(&st), 0
}

// child makes the go-fuse inode of the entry name, just made or found.
func (n *node) child(ctx context.Context, name string, out *fuse.EntryOut) (*gofs.Inode, syscall.Errno) {
	a, e := n.at(name)
	if e != 0 {
		return nil, e
	}
	sa, e := n.lstat(a, &out.Attr)
	if e != 0 {
		return nil, e
	}
	return n.NewInode(ctx, n.s.newNode(), sa), 0
}

func (n *node) Lookup(ctx context.Context, name string, out *fuse.EntryOut) (*gofs.Inode, syscall.Errno) {
	return n.child(ctx, name, out)
}

func (n *node) Getattr(ctx context.Context, fh gofs.FileHandle, out *fuse.AttrOut) syscall.Errno {
	if h, ok := fh.(*handle); ok {
		var st unix.Stat_t
		if err := unix.Fstat(h.fd, &st); err != nil {
			return errno(err)
		}
		n.s.fill(&st, &out.Attr)
		return 0
	}
	if n.anon >= 0 {
		var st unix.Stat_t
		if err := unix.Fstat(n.anon, &st); err != nil {
			return errno(err)
		}
		n.s.fill(&st, &out.Attr)
		return 0
	}
	a, e := n.at("")
	if e != 0 {
		return e
	}
	_, e = n.lstat(a, &out.Attr)
	return e
}

// caller is the ids of the request's caller as the inner mount takes them.
func (n *node) caller(ctx context.Context) (uid, gid uint32) {
	if c, ok := ctx.(*fuse.Context); ok {
		return n.s.uids.inner(c.Uid), n.s.gids.inner(c.Gid)
	}
	return n.s.uids.base, n.s.gids.base
}

// as runs fn as the caller: what makes a name in a directory of an
// id-mapped mount (a create, a link, a rename) needs ids that the mount
// maps, and a create takes them as its owner.
func (n *node) as(ctx context.Context, fn func() error) error {
	uid, gid := n.caller(ctx)
	return fsids.DoAs(uid, gid, fn)
}

// create runs make (a create of the entry name) as the caller, gives back
// the mode bits the daemon's umask took from mode, and returns the new
// entry's go-fuse inode.
func (n *node) create(ctx context.Context, name string, mode uint32, out *fuse.EntryOut, make func(dir int) error) (*gofs.Inode, syscall.Errno) {
	a, e := n.at(name)
	if e != 0 {
		return nil, e
	}
	defer unix.Close(a.Dir)
	if err := n.as(ctx, func() error { return make(a.Dir) }); err != nil {
		return nil, errno(err)
	}
	if lost := mode & 0o7777 & n.s.umask; lost != 0 && mode&unix.S_IFMT != unix.S_IFLNK {
		var st unix.Stat_t
		if err := a.Lstat(&st); err != nil {
			return nil, errno(err)
		}
		if err := unix.Fchmodat(a.Dir, a.Name, st.Mode&0o7777|lost, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			return nil, errno(err)
		}
	}
	return n.child(ctx, name, out)
}

func (n *node) Mkdir(ctx context.Context, name string, mode uint32, out *fuse.EntryOut) (*gofs.Inode, syscall.Errno) {
	return n.create(ctx, name, mode|unix.S_IFDIR, out, func(dir int) error { return unix.Mkdirat(dir, name, mode) })
}

func (n *node) Mknod(ctx context.Context, name string, mode, rdev uint32, out *fuse.EntryOut) (*gofs.Inode, syscall.Errno) {
	return n.create(ctx, name, mode, out, func(dir int) error { return unix.Mknodat(dir, name, mode, int(rdev)) })
}

func (n *node) Symlink(ctx context.Context, target, name string, out *fuse.EntryOut) (*gofs.Inode, syscall.Errno) {
	return n.create(ctx, name, unix.S_IFLNK, out, func(dir int) error { return unix.Symlinkat(target, dir, name) })
}

func (n *node) Link(ctx context.Context, target gofs.InodeEmbedder, name string, out *fuse.EntryOut) (*gofs.Inode, syscall.Errno) {
	t, ok := target.(*node)
	if !ok {
		return nil, syscall.EXDEV
	}
	if t.anon >= 0 { // a file made with O_TMPFILE gets its name
		to, e := n.at(name)
		if e != 0 {
			return nil, e
		}
		defer unix.Close(to.Dir)
		err := n.as(ctx, func() error { return unix.Linkat(t.anon, "", to.Dir, to.Name, unix.AT_EMPTY_PATH) })
		if err != nil {
			return nil, errno(err)
		}
		return n.child(ctx, name, out)
	}
	from, e := t.at("")
	if e != 0 {
		return nil, e
	}
	defer unix.Close(from.Dir)
	to, e := n.at(name)
	if e != 0 {
		return nil, e
	}
	defer unix.Close(to.Dir)
	if err := n.as(ctx, func() error { return unix.Linkat(from.Dir, from.Name, to.Dir, to.Name, 0) }); err != nil {
		return nil, errno(err)
	}
	return n.child(ctx, name, out)
}

// Tmpfile makes a file in the directory with no name, as the caller.
func (n *node) Tmpfile(ctx context.Context, flags uint32, mode uint32, out *fuse.EntryOut) (*gofs.Inode, gofs.FileHandle, uint32, syscall.Errno) {
	a, e := n.at("")
	if e != 0 {
		return nil, nil, 0, e
	}
	defer unix.Close(a.Dir)
	fd := -1
	err := n.as(ctx, func() (err error) {
		fd, err = unix.Openat(a.Dir, a.Name, openFlags(flags)|unix.O_TMPFILE, mode&0o7777)
		return err
	})
	if err != nil {
		return nil, nil, 0, errno(err)
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		unix.Close(fd)
		return nil, nil, 0, errno(err)
	}
	if lost := mode & 0o7777 & n.s.umask; lost != 0 {
		unix.Fchmod(fd, st.Mode&0o7777|lost)
		st.Mode |= lost
	}
	n.s.fill(&st, &out.Attr)
	c := n.s.newNode()
	if c.anon, err = unix.Dup(fd); err != nil {
		unix.Close(fd)
		return nil, nil, 0, errno(err)
	}
	ino := n.NewInode(ctx, c, n.s.stable(&st))
	h, fl, e := ino.Operations().(*node).newHandle(ctx, fd, int(flags), "", false)
	if e != 0 {
		return nil, nil, 0, e
	}
	return ino, h, fl, 0
}

// OnForget closes a nameless file's descriptor once the kernel forgets it.
func (n *node) OnForget() {
	if n.anon >= 0 {
		unix.Close(n.anon)
		n.anon = -1
	}
}

func (n *node) Readlink(ctx context.Context) ([]byte, syscall.Errno) {
	a, e := n.at("")
	if e != 0 {
		return nil, e
	}
	defer unix.Close(a.Dir)
	s, err := a.Readlink()
	return []byte(s), errno(err)
}

func (n *node) Unlink(ctx context.Context, name string) syscall.Errno {
	return n.remove(name, 0)
}

func (n *node) Rmdir(ctx context.Context, name string) syscall.Errno {
	return n.remove(name, unix.AT_REMOVEDIR)
}

func (n *node) remove(name string, flags int) syscall.Errno {
	a, e := n.at(name)
	if e != 0 {
		return e
	}
	defer unix.Close(a.Dir)
	return errno(unix.Unlinkat(a.Dir, a.Name, flags))
}

func (n *node) Rename(ctx context.Context, name string, newParent gofs.InodeEmbedder, newName string, flags uint32) syscall.Errno {
	np, ok := newParent.(*node)
	if !ok {
		return syscall.EXDEV
	}
	from, e := n.at(name)
	if e != 0 {
		return e
	}
	defer unix.Close(from.Dir)
	to, e := np.at(newName)
	if e != 0 {
		return e
	}
	defer unix.Close(to.Dir)
	return errno(n.as(ctx, func() error { return unix.Renameat2(from.Dir, from.Name, to.Dir, to.Name, uint(flags)) }))
}

func (n *node) Readdir(ctx context.Context) (gofs.DirStream, syscall.Errno) {
	a, e := n.at("")
	if e != 0 {
		return nil, e
	}
	defer unix.Close(a.Dir)
	fd, err := a.OpenDir(unix.O_RDONLY)
	if err != nil {
		return nil, errno(err)
	}
	return gofs.NewLoopbackDirStreamFd(fd)
}

func (n *node) Statfs(ctx context.Context, out *fuse.StatfsOut) syscall.Errno {
	var st syscall.Statfs_t
	if err := syscall.Fstatfs(n.s.root, &st); err != nil {
		return errno(err)
	}
	out.FromStatfsT(&st)
	return 0
}

// Flush answers ENOSYS: the kernel then sends no FLUSH on close. A write
// is in the inner mount's file when it returns.
func (n *node) Flush(ctx context.Context, f gofs.FileHandle) syscall.Errno {
	return syscall.ENOSYS
}

func (n *node) Getxattr(ctx context.Context, attr string, dest []byte) (uint32, syscall.Errno) {
	a, e := n.at("")
	if e != 0 {
		return 0, e
	}
	defer unix.Close(a.Dir)
	sz, err := unix.Lgetxattr(a.Proc(), attr, dest)
	return uint32(sz), errno(err)
}

func (n *node) Setxattr(ctx context.Context, attr string, data []byte, flags uint32) syscall.Errno {
	a, e := n.at("")
	if e != 0 {
		return e
	}
	defer unix.Close(a.Dir)
	return errno(unix.Lsetxattr(a.Proc(), attr, data, int(flags)))
}

func (n *node) Removexattr(ctx context.Context, attr string) syscall.Errno {
	a, e := n.at("")
	if e != 0 {
		return e
	}
	defer unix.Close(a.Dir)
	return errno(unix.Lremovexattr(a.Proc(), attr))
}

func (n *node) Listxattr(ctx context.Context, dest []byte) (uint32, syscall.Errno) {
	a, e := n.at("")
	if e != 0 {
		return 0, e
	}
	defer unix.Close(a.Dir)
	sz, err := a.Listxattr(dest)
	return uint32(sz), errno(err)
}
