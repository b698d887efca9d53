package overlay

import (
	"context"
	"os"
	"syscall"

	"golang.org/x/sys/unix"

	"layerfs.dev/layerfs/internal/store"
)

// lowerHas returns d's lower entry called name, if d merges a lower tree.
// Needs o.mu.
func lowerHas(d *Node, name string) *store.Entry {
	if d.dir.lowerTree == nil {
		return nil
	}
	e, _ := d.dir.lowerTree.Find(name)
	return e
}

// prepareCreate checks that name can be created in d and gives d an upper
// directory. Needs o.mu.
func (o *Overlay) prepareCreate(d *Node, name string) error {
	if err := validName(name); err != nil {
		return err
	}
	if !d.linked() {
		return syscall.ENOENT
	}
	if d.dir.children[name] != nil {
		return syscall.EEXIST
	}
	return o.copyUpDirLocked(d)
}

// ownNew gives a new upper inode the caller's ownership and the exact mode
// (the daemon's umask must not apply; the kernel applied the caller's).
// Files in a set-group-ID directory keep the group the file system gave
// them. Needs o.mu.
func (o *Overlay) ownNew(dfd int, e at, fd int, mode uint32, c Caller, symlink bool) error {
	if c.UID != 0 || c.GID != 0 {
		gid := int(c.GID)
		var st unix.Stat_t
		if err := unix.Fstat(dfd, &st); err == nil && st.Mode&syscall.S_ISGID != 0 {
			gid = -1
		}
		var err error
		if fd >= 0 {
			err = unix.Fchown(fd, int(c.UID), gid)
		} else {
			err = unix.Fchownat(e.dir, e.name, int(c.UID), gid, unix.AT_SYMLINK_NOFOLLOW)
		}
		if err != nil {
			return err
		}
	}
	if symlink || mode&o.umask == 0 && mode&(syscall.S_ISUID|syscall.S_ISGID) == 0 {
		return nil
	}
	if fd >= 0 {
		return unix.Fchmod(fd, mode&07777)
	}
	return unix.Fchmodat(e.dir, e.name, mode&07777, 0)
}

// bindLocked records a new node at d/name, replacing a whiteout. Needs o.mu.
func (o *Overlay) bindLocked(d *Node, name string, n *Node) {
	o.touch(d, name, false)
	o.touchMeta(d)
	n.parent, n.name = d, name
	d.dir.children[name] = n
	delete(d.dir.whiteouts, name)
	d.dir.listing = nil
	if n.IsDir() {
		d.dir.subdirs++
	}
}

// placeNew makes a new upper entry at d/name with mk, which creates it at
// the entry it is given, and the directory d's upper descriptor. Over a
// whiteout the entry is made in the work dir and renamed over it, so the
// name is never without one or the other. Needs o.mu.
func (o *Overlay) placeNew(d *Node, name string, isDir bool, mk func(dfd int, e at) error) error {
	dst, err := o.childAt(d, name)
	if err != nil {
		return err
	}
	defer dst.close()
	if _, wh := d.dir.whiteouts[name]; !wh {
		return mk(dst.dir, dst)
	}
	tmp := o.workAt(o.tmpName())
	if err := mk(dst.dir, tmp); err != nil {
		return err
	}
	flags := uint(0)
	if isDir {
		flags = unix.RENAME_EXCHANGE // a directory cannot replace a non-directory
	}
	if err := unix.Renameat2(tmp.dir, tmp.name, dst.dir, dst.name, flags); err != nil {
		removeAt(tmp)
		return err
	}
	if isDir {
		removeAt(tmp) // the whiteout
	}
	return nil
}

// placeOwned makes a new upper entry at d/name with mk, as placeNew does,
// and gives it the caller's ownership and mode (see ownNew); an entry that
// cannot be given them is removed. Needs o.mu.
func (o *Overlay) placeOwned(d *Node, name string, isDir bool, mode uint32, c Caller, symlink bool, mk func(e at) error) error {
	return o.placeNew(d, name, isDir, func(dfd int, e at) error {
		if err := mk(e); err != nil {
			return err
		}
		if err := o.ownNew(dfd, e, -1, mode, c, symlink); err != nil {
			removeAt(e)
			return err
		}
		return nil
	})
}

// Create makes and opens a regular file d/name.
func (o *Overlay) Create(ctx context.Context, d *Node, name string, flags int, mode uint32, c Caller) (*Node, *File, error) {
	if err := o.ensureLoaded(ctx, d); err != nil {
		return nil, nil, err
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	if err := o.prepareCreate(d, name); err != nil {
		return nil, nil, err
	}
	var f *os.File
	err := o.placeNew(d, name, false, func(dfd int, e at) error {
		fd, err := unix.Openat(e.dir, e.name, unix.O_CREAT|unix.O_EXCL|unix.O_RDWR|unix.O_CLOEXEC|unix.O_NOFOLLOW, mode&07777)
		if err != nil {
			return err
		}
		f = os.NewFile(uintptr(fd), name)
		if err := o.ownNew(dfd, e, fd, mode, c, false); err != nil {
			f.Close()
			removeAt(e)
			return err
		}
		return nil
	})
	if err != nil {
		return nil, nil, err
	}
	n := o.newNode(syscall.S_IFREG, stateUpper)
	o.bindLocked(d, name, n)
	file := o.openedLocked(n, f, false, flags)
	return n, file, nil
}

// Mkdir makes directory d/name.
func (o *Overlay) Mkdir(ctx context.Context, d *Node, name string, mode uint32, c Caller) (*Node, error) {
	if err := o.ensureLoaded(ctx, d); err != nil {
		return nil, err
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	if err := o.prepareCreate(d, name); err != nil {
		return nil, err
	}
	// A new directory where the lower has one must not show its entries.
	opaque := false
	if e := lowerHas(d, name); e != nil && e.Type == store.TypeDir {
		opaque = true
	}
	err := o.placeOwned(d, name, true, mode, c, false, func(e at) error {
		if err := unix.Mkdirat(e.dir, e.name, mode&07777); err != nil {
			return err
		}
		if opaque {
			if err := unix.Lsetxattr(e.proc(), xattrOpaque, []byte("y"), 0); err != nil {
				removeAt(e)
				return err
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	n := o.newNode(syscall.S_IFDIR, stateUpper)
	n.dir = &dirState{loaded: true, resolved: true, opaque: opaque,
		children: map[string]*Node{}, whiteouts: map[string]struct{}{}}
	o.bindLocked(d, name, n)
	return n, nil
}

// Mknod makes a fifo, socket or device node d/name.
func (o *Overlay) Mknod(ctx context.Context, d *Node, name string, mode uint32, rdev uint64, c Caller) (*Node, error) {
	if mode&syscall.S_IFMT == syscall.S_IFREG || mode&syscall.S_IFMT == 0 {
		n, f, err := o.Create(ctx, d, name, os.O_RDONLY, mode, c)
		if err != nil {
			return nil, err
		}
		return n, f.Close()
	}
	if mode&syscall.S_IFMT == syscall.S_IFDIR {
		return nil, syscall.EINVAL
	}
	return o.makeNode(ctx, d, name, mode, mode, c, false, func(e at) error {
		return unix.Mknodat(e.dir, e.name, mode, int(rdev))
	})
}

// Symlink makes symlink d/name pointing at target.
func (o *Overlay) Symlink(ctx context.Context, d *Node, name, target string, c Caller) (*Node, error) {
	return o.makeNode(ctx, d, name, syscall.S_IFLNK, 0o777, c, true, func(e at) error {
		return unix.Symlinkat(target, e.dir, e.name)
	})
}

// makeNode makes d/name with mk, a new upper entry that is neither a
// directory nor a regular file, owned by the caller (mode and symlink as
// ownNew takes them), and binds a new node of mode typ to it.
func (o *Overlay) makeNode(ctx context.Context, d *Node, name string, typ, mode uint32, c Caller, symlink bool, mk func(e at) error) (*Node, error) {
	if err := o.ensureLoaded(ctx, d); err != nil {
		return nil, err
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	if err := o.prepareCreate(d, name); err != nil {
		return nil, err
	}
	if err := o.placeOwned(d, name, false, mode, c, symlink, mk); err != nil {
		return nil, err
	}
	n := o.newNode(typ, stateUpper)
	o.bindLocked(d, name, n)
	return n, nil
}

// Link makes d/name another name of the non-directory n.
func (o *Overlay) Link(ctx context.Context, n *Node, d *Node, name string) error {
	if n.mode == syscall.S_IFDIR {
		return syscall.EPERM
	}
	if err := o.ensureLoaded(ctx, d); err != nil {
		return err
	}
	if _, err := o.copyUp(ctx, n, copyMeta); err != nil {
		return err
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	if err := o.prepareCreate(d, name); err != nil {
		return err
	}
	if !n.linked() {
		return syscall.ENOENT
	}
	src, err := o.nodeAt(n)
	if err != nil {
		return err
	}
	defer src.close()
	if err := o.placeNew(d, name, false, func(_ int, e at) error {
		return unix.Linkat(src.dir, src.name, e.dir, e.name, 0)
	}); err != nil {
		return err
	}
	o.touch(d, name, false)
	o.touchMeta(d)
	d.dir.children[name] = n
	delete(d.dir.whiteouts, name)
	d.dir.listing = nil
	n.aliases = append(n.aliases, alias{d, name})
	o.byUpper[n.backing] = n
	o.touchNode(n) // the link count of every name changed
	return nil
}

// removeUpperLocked removes d/name's upper entry (if any) and leaves a
// whiteout when the lower has the name. Directories must be empty in the
// merged view; their upper may still hold whiteouts. Needs o.mu.
func (o *Overlay) removeUpperLocked(d *Node, name string, c *Node) error {
	needWh := lowerHas(d, name) != nil
	hasUpper := c.state != stateLower
	if !hasUpper {
		if !needWh {
			return nil
		}
		if err := o.copyUpDirLocked(d); err != nil {
			return err
		}
	}
	e, err := o.childAt(d, name)
	if err != nil {
		return err
	}
	defer e.close()
	if c.mode == syscall.S_IFDIR && hasUpper {
		if err := o.emptyUpperDirLocked(c, e); err != nil {
			return err
		}
	}
	switch {
	case hasUpper && needWh:
		// Replace the entry by a whiteout in one step.
		tmp := o.workAt(o.tmpName())
		if err := mkWhiteout(tmp); err != nil {
			return err
		}
		flags := uint(0)
		if c.mode == syscall.S_IFDIR {
			flags = unix.RENAME_EXCHANGE
		}
		if err := unix.Renameat2(tmp.dir, tmp.name, e.dir, e.name, flags); err != nil {
			removeAt(tmp)
			return err
		}
		if c.mode == syscall.S_IFDIR {
			if err := unix.Unlinkat(tmp.dir, tmp.name, unix.AT_REMOVEDIR); err != nil {
				return err
			}
		}
	case hasUpper:
		flags := 0
		if c.mode == syscall.S_IFDIR {
			flags = unix.AT_REMOVEDIR
		}
		if err := unix.Unlinkat(e.dir, e.name, flags); err != nil {
			return err
		}
	case needWh:
		if err := mkWhiteout(e); err != nil {
			return err
		}
	}
	if needWh {
		d.dir.whiteouts[name] = struct{}{}
	}
	return nil
}

// emptyUpperDirLocked empties the upper directory of a directory that is
// empty in the merged view: only whiteouts can be left. It is made opaque
// first, so that at every step it still hides its lower entries.
func (o *Overlay) emptyUpperDirLocked(c *Node, e at) error {
	if len(c.dir.whiteouts) == 0 {
		return nil
	}
	if !c.dir.opaque {
		if err := unix.Lsetxattr(e.proc(), xattrOpaque, []byte("y"), 0); err != nil {
			return err
		}
		c.dir.opaque = true
	}
	cfd, err := openDirAt(e, unix.O_PATH)
	if err != nil {
		return err
	}
	defer unix.Close(cfd)
	for w := range c.dir.whiteouts {
		if err := unix.Unlinkat(cfd, w, 0); err != nil && err != unix.ENOENT {
			return err
		}
		delete(c.dir.whiteouts, w)
	}
	return nil
}

// unbindLocked forgets that d/name is a name of c. Needs o.mu.
func (o *Overlay) unbindLocked(d *Node, name string, c *Node) {
	delete(d.dir.children, name)
	if c.state == stateLower && c.nlink > 1 {
		c.nlink--
	}
	d.dir.listing = nil
	if c.parent == d && c.name == name {
		if len(c.aliases) > 0 {
			c.parent, c.name = c.aliases[0].parent, c.aliases[0].name
			c.aliases = c.aliases[1:]
		} else {
			c.parent = nil
		}
	} else {
		for i, a := range c.aliases {
			if a.parent == d && a.name == name {
				c.aliases = append(c.aliases[:i:i], c.aliases[i+1:]...)
				break
			}
		}
	}
	if c.mode == syscall.S_IFDIR {
		d.dir.subdirs--
		o.renames++ // cached paths below c are stale
		// Its cached descriptor goes: it was removed, or is being moved
		// (the descriptor would still be right then; it is opened again
		// when needed).
		o.dirFds.drop(c)
	}
}

// Unlink removes the non-directory d/name.
func (o *Overlay) Unlink(ctx context.Context, d *Node, name string) error {
	return o.remove(ctx, d, name, false)
}

// Rmdir removes the empty directory d/name.
func (o *Overlay) Rmdir(ctx context.Context, d *Node, name string) error {
	return o.remove(ctx, d, name, true)
}

func (o *Overlay) remove(ctx context.Context, d *Node, name string, dir bool) error {
	if err := validName(name); err != nil {
		return err
	}
	if err := o.ensureLoaded(ctx, d); err != nil {
		return err
	}
	o.mu.RLock()
	c := d.dir.children[name]
	o.mu.RUnlock()
	if c == nil {
		return syscall.ENOENT
	}
	if dir != c.IsDir() {
		if dir {
			return syscall.ENOTDIR
		}
		return syscall.EISDIR
	}
	if dir {
		if err := o.ensureLoaded(ctx, c); err != nil {
			return err
		}
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	if d.dir.children[name] != c {
		return syscall.ENOENT
	}
	if dir && len(c.dir.children) > 0 {
		return syscall.ENOTEMPTY
	}
	if err := o.removeUpperLocked(d, name, c); err != nil {
		return err
	}
	o.touch(d, name, false)
	o.touchMeta(d)
	o.unbindLocked(d, name, c)
	if !dir {
		o.touchNode(c)
	}
	return nil
}

// isAncestor reports whether a is d or one of its ancestors. Needs o.mu.
func (o *Overlay) isAncestor(a, d *Node) bool {
	for p := d; p != nil; p = p.parent {
		if p == a {
			return true
		}
	}
	return false
}

// Rename flags (renameat2).
const (
	RenameNoReplace = unix.RENAME_NOREPLACE
	RenameExchange  = unix.RENAME_EXCHANGE
)

// Rename moves od/oname to nd/nname. Lower directories move without
// copying anything: the upper directory records where its lower is
// (trusted.overlay.redirect), so there is no EXDEV.
func (o *Overlay) Rename(ctx context.Context, od *Node, oname string, nd *Node, nname string, flags uint32) error {
	r := &rename{o: o, od: od, oname: oname, nd: nd, nname: nname, flags: flags, exchange: flags&RenameExchange != 0}
	if err := r.prepare(ctx); err != nil {
		return err
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	if done, err := r.check(); done || err != nil {
		return err
	}
	if err := r.open(); err != nil {
		return err
	}
	defer r.src.close()
	defer r.dst.close()
	o.touch(od, oname, false)
	o.touch(nd, nname, false)
	o.touchMeta(od)
	o.touchMeta(nd)
	if r.exchange {
		return r.swap()
	}
	return r.move()
}

// rename is one Rename: the source od/oname and its node s, the target
// nd/nname and its node t (nil when there is none), and, once o.mu is held
// and both parents are in the upper, the upper's entries src and dst.
type rename struct {
	o            *Overlay
	od, nd       *Node
	oname, nname string
	s, t         *Node
	flags        uint32
	exchange     bool
	src, dst     at
}

// prepare checks the request and, outside the tree lock, loads what the
// rename needs: both parents, the directories moved (their redirects
// must be resolved) and the metadata of lower files moved, copied up.
func (r *rename) prepare(ctx context.Context) error {
	o := r.o
	if r.flags&^uint32(RenameNoReplace|RenameExchange) != 0 || r.flags == RenameNoReplace|RenameExchange {
		return syscall.EINVAL
	}
	if err := validName(r.oname); err != nil {
		return err
	}
	if err := validName(r.nname); err != nil {
		return err
	}
	if err := o.ensureLoaded(ctx, r.od); err != nil {
		return err
	}
	if err := o.ensureLoaded(ctx, r.nd); err != nil {
		return err
	}
	o.mu.RLock()
	r.s, r.t = r.od.dir.children[r.oname], r.nd.dir.children[r.nname]
	o.mu.RUnlock()
	if r.s == nil {
		return syscall.ENOENT
	}
	for _, n := range []*Node{r.s, r.t} {
		if n == nil || (n == r.t && !r.exchange && !n.IsDir()) {
			continue
		}
		if n.IsDir() {
			if err := o.ensureLoaded(ctx, n); err != nil {
				return err
			}
		} else if _, err := o.copyUp(ctx, n, copyMeta); err != nil {
			return err
		}
	}
	return nil
}

// check applies rename(2)'s rules under o.mu, after prepare let go of it:
// done with a nil error is a rename to itself, which changes nothing.
func (r *rename) check() (done bool, err error) {
	o, s, t := r.o, r.s, r.t
	if r.od.dir.children[r.oname] != s || r.nd.dir.children[r.nname] != t {
		return false, syscall.EAGAIN // raced with another change of these names
	}
	if s == t {
		return true, nil
	}
	if r.exchange && t == nil {
		return false, syscall.ENOENT
	}
	if r.flags&RenameNoReplace != 0 && t != nil {
		return false, syscall.EEXIST
	}
	if s.IsDir() && o.isAncestor(s, r.nd) || t != nil && t.IsDir() && r.exchange && o.isAncestor(t, r.od) {
		return false, syscall.EINVAL
	}
	if t != nil && t.IsDir() && !r.exchange && o.isAncestor(t, r.od) {
		return false, syscall.ENOTEMPTY // the target contains the source
	}
	if t != nil && !r.exchange {
		switch {
		case s.IsDir() && !t.IsDir():
			return false, syscall.ENOTDIR
		case !s.IsDir() && t.IsDir():
			return false, syscall.EISDIR
		case t.IsDir() && len(t.dir.children) > 0:
			return false, syscall.ENOTEMPTY
		}
	}
	if !r.od.linked() || !r.nd.linked() {
		return false, syscall.ENOENT
	}
	return false, nil
}

// open copies both parents (and a moved directory) up and opens the
// upper's entries of both names. Needs o.mu; on success the caller closes
// src and dst.
func (r *rename) open() error {
	o := r.o
	if err := o.copyUpDirLocked(r.od); err != nil {
		return err
	}
	if err := o.copyUpDirLocked(r.nd); err != nil {
		return err
	}
	if r.s.IsDir() {
		if err := o.copyUpDirLocked(r.s); err != nil {
			return err
		}
	}
	src, err := o.childAt(r.od, r.oname)
	if err != nil {
		return err
	}
	dst, err := o.childAt(r.nd, r.nname)
	if err != nil {
		src.close()
		return err
	}
	r.src, r.dst = src, dst
	return nil
}

// swap exchanges the two names (RENAME_EXCHANGE). Needs o.mu.
func (r *rename) swap() error {
	o, s, t := r.o, r.s, r.t
	if t.IsDir() {
		if err := o.copyUpDirLocked(t); err != nil {
			return err
		}
	}
	if err := unix.Renameat2(r.src.dir, r.src.name, r.dst.dir, r.dst.name, unix.RENAME_EXCHANGE); err != nil {
		return err
	}
	o.unbindLocked(r.od, r.oname, s)
	o.unbindLocked(r.nd, r.nname, t)
	o.rebindLocked(r.nd, r.nname, s)
	o.rebindLocked(r.od, r.oname, t)
	if err := o.setDirOriginLocked(s, r.nd, r.nname, r.dst); err != nil {
		return err
	}
	return o.setDirOriginLocked(t, r.od, r.oname, r.src)
}

// move moves the source over the target, leaving a whiteout where the
// source hid a lower entry. Needs o.mu.
func (r *rename) move() error {
	o, s, t := r.o, r.s, r.t
	src, dst := r.src, r.dst
	srcLower := lowerHas(r.od, r.oname) != nil
	if t != nil && t.IsDir() && t.state != stateLower {
		if err := o.emptyUpperDirLocked(t, dst); err != nil {
			return err
		}
	}
	_, dstWh := r.nd.dir.whiteouts[r.nname]
	switch {
	case s.IsDir() && dstWh:
		// A directory cannot replace the whiteout; swap them, and the
		// whiteout lands where one may be needed.
		if err := unix.Renameat2(src.dir, src.name, dst.dir, dst.name, unix.RENAME_EXCHANGE); err != nil {
			return err
		}
		if !srcLower {
			if err := unix.Unlinkat(src.dir, src.name, 0); err != nil {
				return err
			}
		}
	case srcLower:
		err := unix.Renameat2(src.dir, src.name, dst.dir, dst.name, unix.RENAME_WHITEOUT)
		if err == unix.EINVAL {
			// No RENAME_WHITEOUT here: two steps.
			if err = unix.Renameat(src.dir, src.name, dst.dir, dst.name); err == nil {
				err = mkWhiteout(src)
			}
		}
		if err != nil {
			return err
		}
	default:
		if err := unix.Renameat(src.dir, src.name, dst.dir, dst.name); err != nil {
			return err
		}
	}
	if srcLower {
		r.od.dir.whiteouts[r.oname] = struct{}{}
	}
	if t != nil {
		o.unbindLocked(r.nd, r.nname, t)
		if !t.IsDir() {
			o.touchNode(t)
		}
	}
	o.unbindLocked(r.od, r.oname, s)
	o.rebindLocked(r.nd, r.nname, s)
	return o.setDirOriginLocked(s, r.nd, r.nname, dst)
}

// rebindLocked makes d/name a name of n (after unbindLocked). Needs o.mu.
func (o *Overlay) rebindLocked(d *Node, name string, n *Node) {
	if n.state == stateLower && n.nlink > 0 && n.lower != nil && n.lower.Link != 0 {
		n.nlink++ // a move: unbind counted it out
	}
	if n.parent == nil {
		n.parent, n.name = d, name
	} else {
		n.aliases = append(n.aliases, alias{d, name})
	}
	d.dir.children[name] = n
	delete(d.dir.whiteouts, name)
	d.dir.listing = nil
	if n.IsDir() {
		d.dir.subdirs++
		o.renames++
		// Keep the moved directory's dirty entries reachable.
		if len(n.dir.dirty) > 0 {
			o.dirtyEnt(d, name).walk = true
			o.markWalk(d)
		}
	}
}

// setDirOriginLocked fixes a moved directory's redirect and opaque xattrs
// for its new place d/name: a directory with a lower tree redirects to it
// (unless it is back where that tree is), one without is opaque where the
// lower has a directory of that name. Needs o.mu.
func (o *Overlay) setDirOriginLocked(n *Node, d *Node, name string, e at) error {
	if !n.IsDir() {
		return nil
	}
	ds := n.dir
	natural := ""
	if d.dir.lowerPath != "" {
		natural = joinLower(d.dir.lowerPath, name)
	}
	if ds.lowerPath != "" {
		if ds.lowerPath == natural && !ds.opaque {
			if ds.redirect != "" {
				if err := unix.Lremovexattr(e.proc(), xattrRedirect); err != nil && err != unix.ENODATA {
					return err
				}
				ds.redirect = ""
			}
			return nil
		}
		if ds.redirect != ds.lowerPath {
			if err := unix.Lsetxattr(e.proc(), xattrRedirect, []byte(ds.lowerPath), 0); err != nil {
				return err
			}
			ds.redirect = ds.lowerPath
		}
		return nil
	}
	if le := lowerHas(d, name); le != nil && le.Type == store.TypeDir && !ds.opaque {
		if err := unix.Lsetxattr(e.proc(), xattrOpaque, []byte("y"), 0); err != nil {
			return err
		}
		ds.opaque = true
	}
	return nil
}

// SetAttr says which attributes Setattr changes.
type SetAttr struct {
	Valid uint32 // SetMode | SetUID | ...
	Mode  uint32
	UID   uint32
	GID   uint32
	Size  int64
	Atime int64 // nanoseconds; see SetAtimeNow
	Mtime int64
}

// SetAttr.Valid bits.
const (
	SetMode = 1 << iota
	SetUID
	SetGID
	SetSize
	SetAtime
	SetMtime
	SetAtimeNow
	SetMtimeNow
)

// Setattr changes n's attributes. f, when not nil, is an open handle of n
// (needed once n has no name). Metadata changes of a lower file copy up its
// metadata only; its data is copied when the size changes.
func (o *Overlay) Setattr(ctx context.Context, n *Node, in SetAttr, f *File) (Attr, error) {
	if in.Valid&SetSize != 0 {
		if n.mode == syscall.S_IFDIR {
			return Attr{}, syscall.EISDIR
		}
		if n.mode != syscall.S_IFREG {
			return Attr{}, syscall.EINVAL
		}
		kind := copyData
		if in.Size == 0 {
			kind = copyTrunc
		}
		cf, err := o.copyUp(ctx, n, kind)
		if err != nil {
			return Attr{}, err
		}
		if cf != nil {
			cf.Close()
		}
	} else if _, err := o.copyUp(ctx, n, copyMeta); err != nil {
		return Attr{}, err
	}
	if n.IsDir() {
		// Its link count counts its subdirectories.
		if err := o.ensureLoaded(ctx, n); err != nil {
			return Attr{}, err
		}
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	e, fd := at{}, -1
	if n.linked() {
		var err error
		if e, err = o.nodeAt(n); err != nil {
			return Attr{}, err
		}
		defer e.close()
	} else if f != nil && f.f != nil && !f.lowerFd {
		fd = int(f.f.Fd())
	} else {
		return Attr{}, syscall.ENOENT
	}
	if err := applySetattr(e, fd, n.mode, in); err != nil {
		return Attr{}, err
	}
	o.touchNode(n)
	return o.getattrLocked(n, f)
}

// applySetattr changes the attributes of the upper entry e, or of the open
// file fd when fd >= 0.
func applySetattr(e at, fd int, mode uint32, in SetAttr) error {
	if in.Valid&SetMode != 0 {
		var err error
		switch {
		case mode == syscall.S_IFLNK:
			err = syscall.EOPNOTSUPP
		case fd >= 0:
			err = unix.Fchmod(fd, in.Mode&07777)
		default:
			err = unix.Fchmodat(e.dir, e.name, in.Mode&07777, 0)
		}
		if err != nil {
			return err
		}
	}
	if in.Valid&(SetUID|SetGID) != 0 {
		uid, gid := -1, -1
		if in.Valid&SetUID != 0 {
			uid = int(in.UID)
		}
		if in.Valid&SetGID != 0 {
			gid = int(in.GID)
		}
		var err error
		if fd >= 0 {
			err = unix.Fchown(fd, uid, gid)
		} else {
			err = unix.Fchownat(e.dir, e.name, uid, gid, unix.AT_SYMLINK_NOFOLLOW)
		}
		if err != nil {
			return err
		}
	}
	if in.Valid&SetSize != 0 {
		var err error
		if fd >= 0 {
			err = unix.Ftruncate(fd, in.Size)
		} else {
			err = unix.Truncate(e.proc(), in.Size) // a regular file: nothing to follow
		}
		if err != nil {
			return err
		}
	}
	if in.Valid&(SetAtime|SetMtime|SetAtimeNow|SetMtimeNow) != 0 {
		ts := []unix.Timespec{{Nsec: unix.UTIME_OMIT}, {Nsec: unix.UTIME_OMIT}}
		switch {
		case in.Valid&SetAtimeNow != 0:
			ts[0].Nsec = unix.UTIME_NOW
		case in.Valid&SetAtime != 0:
			ts[0] = unix.NsecToTimespec(in.Atime)
		}
		switch {
		case in.Valid&SetMtimeNow != 0:
			ts[1].Nsec = unix.UTIME_NOW
		case in.Valid&SetMtime != 0:
			ts[1] = unix.NsecToTimespec(in.Mtime)
		}
		var err error
		if fd >= 0 {
			err = unix.UtimesNanoAt(fd, "", ts, unix.AT_EMPTY_PATH)
		} else {
			err = unix.UtimesNanoAt(e.dir, e.name, ts, unix.AT_SYMLINK_NOFOLLOW)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// Setxattr sets n's extended attribute name; names of the upper layer's
// own format are refused.
func (o *Overlay) Setxattr(ctx context.Context, n *Node, name string, value []byte, flags int) error {
	if reservedXattr(name) {
		return syscall.EPERM
	}
	return o.changeXattrs(ctx, n, func(path string) error { return unix.Lsetxattr(path, name, value, flags) })
}

// Removexattr removes n's extended attribute name.
func (o *Overlay) Removexattr(ctx context.Context, n *Node, name string) error {
	if reservedXattr(name) {
		return unix.ENODATA
	}
	if _, err := o.Getxattr(ctx, n, name); err != nil {
		return err
	}
	return o.changeXattrs(ctx, n, func(path string) error { return unix.Lremovexattr(path, name) })
}

// changeXattrs copies n's metadata up and runs change on a short path of
// its upper entry (at.proc), under o.mu while n is still linked.
func (o *Overlay) changeXattrs(ctx context.Context, n *Node, change func(path string) error) error {
	if _, err := o.copyUp(ctx, n, copyMeta); err != nil {
		return err
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	if !n.linked() {
		return syscall.ENOENT
	}
	e, err := o.nodeAt(n)
	if err != nil {
		return err
	}
	defer e.close()
	if err := change(e.proc()); err != nil {
		return err
	}
	o.touchNode(n)
	return nil
}

// linkLocked makes d/name in the upper another name of n's upper inode.
// Needs o.mu.
func (o *Overlay) linkLocked(n *Node, d *Node, name string) error {
	src, err := o.nodeAt(n)
	if err != nil {
		return err
	}
	defer src.close()
	dst, err := o.childAt(d, name)
	if err != nil {
		return err
	}
	defer dst.close()
	return unix.Linkat(src.dir, src.name, dst.dir, dst.name, 0)
}
