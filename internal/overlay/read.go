package overlay

import (
	"context"
	"sort"
	"syscall"

	"golang.org/x/sys/unix"

	"layerfs.dev/layerfs/internal/store"
)

// DirEntry is one name in a merged directory listing.
type DirEntry struct {
	Name string
	Ino  uint64
	Mode uint32 // file type bits
}

// Lookup returns d's child called name, or an error wrapping
// syscall.ENOENT. After d was loaded once it costs a map lookup.
func (o *Overlay) Lookup(ctx context.Context, d *Node, name string) (*Node, error) {
	if len(name) > NameMax {
		return nil, syscall.ENAMETOOLONG
	}
	if err := o.ensureLoaded(ctx, d); err != nil {
		return nil, err
	}
	o.mu.RLock()
	c := d.dir.children[name]
	o.mu.RUnlock()
	if c == nil {
		return nil, syscall.ENOENT
	}
	return c, nil
}

// Readdir returns d's merged entries sorted by name.
func (o *Overlay) Readdir(ctx context.Context, d *Node) ([]DirEntry, error) {
	if err := o.ensureLoaded(ctx, d); err != nil {
		return nil, err
	}
	o.mu.RLock()
	l := d.dir.listing
	o.mu.RUnlock()
	if l != nil {
		return l, nil
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	if d.dir.listing == nil {
		l := make([]DirEntry, 0, len(d.dir.children))
		for name, c := range d.dir.children {
			l = append(l, DirEntry{Name: name, Ino: c.ino, Mode: c.mode})
		}
		sort.Slice(l, func(i, j int) bool { return l[i].Name < l[j].Name })
		d.dir.listing = l
	}
	return d.dir.listing, nil
}

// Readlink returns a symlink's target.
func (o *Overlay) Readlink(ctx context.Context, n *Node) (string, error) {
	if n.mode != syscall.S_IFLNK {
		return "", syscall.EINVAL
	}
	o.mu.RLock()
	defer o.mu.RUnlock()
	if n.state == stateLower {
		return n.lower.Target, nil
	}
	if !n.linked() {
		return "", syscall.ENOENT
	}
	a, err := o.nodeAt(n)
	if err != nil {
		return "", err
	}
	defer a.close()
	buf := make([]byte, unix.PathMax)
	sz, err := unix.Readlinkat(a.dir, a.name, buf)
	if err != nil {
		return "", err
	}
	return string(buf[:sz]), nil
}

// Getattr returns n's attributes. f, when not nil, is an open handle of n,
// used when n no longer has a name (unlinked but open).
func (o *Overlay) Getattr(ctx context.Context, n *Node, f *File) (Attr, error) {
	if n.IsDir() {
		// A directory's link count is 2 + its subdirectories in the
		// merged view, which are known once it is loaded (the Store
		// keeps lower trees decoded, so this costs one tree per
		// directory, once).
		if err := o.ensureLoaded(ctx, n); err != nil {
			return Attr{}, err
		}
	}
	o.mu.RLock()
	defer o.mu.RUnlock()
	return o.getattrLocked(n, f)
}

func (o *Overlay) getattrLocked(n *Node, f *File) (Attr, error) {
	var a Attr
	if n.state == stateLower {
		a = lowerAttr(n.lower)
		a.Nlink = uint32(max(n.nlink, 1))
		if !n.linked() {
			a.Nlink = 0
		}
	} else {
		var st unix.Stat_t
		var err error
		switch {
		case n.linked():
			var a at
			if a, err = o.nodeAt(n); err == nil {
				err = unix.Fstatat(a.dir, a.name, &st, unix.AT_SYMLINK_NOFOLLOW)
				a.close()
			}
		case f != nil && f.f != nil && !f.lowerFd:
			err = unix.Fstat(int(f.f.Fd()), &st)
		default:
			err = syscall.ENOENT
		}
		if err != nil {
			return a, err
		}
		a = attrFromStat(&st)
		if n.state == stateMeta {
			a.Blocks = (a.Size + 511) / 512
		}
	}
	if n.mode == syscall.S_IFDIR {
		// 2 + subdirectories of the merged view (the upper directory's
		// own count misses the lower's); 1, as kernel overlayfs says for
		// merged directories, while not loaded; 0 once removed.
		a.Nlink = 1
		if n.dir.loaded {
			a.Nlink = uint32(2 + n.dir.subdirs)
		}
		if n != o.root && !n.linked() {
			a.Nlink = 0
		}
	}
	a.Ino = n.ino
	a.Mode = a.Mode&07777 | n.mode
	return a, nil
}

func lowerAttr(e *store.Entry) Attr {
	a := Attr{
		Mode:  e.Mode&07777 | typeMode(e.Type),
		Nlink: 1,
		UID:   e.UID,
		GID:   e.GID,
		Rdev:  e.Rdev,
		Atime: e.MtimeNs,
		Mtime: e.MtimeNs,
		Ctime: e.MtimeNs,
	}
	switch e.Type {
	case store.TypeFile:
		a.Size = e.Size
		a.Blocks = (e.Size + 511) / 512
	case store.TypeSymlink:
		a.Size = int64(len(e.Target))
	case store.TypeDir:
		a.Size = 4096
	}
	return a
}

// Statfs reports the upper layer's file system.
func (o *Overlay) Statfs(ctx context.Context) (unix.Statfs_t, error) {
	var st unix.Statfs_t
	err := unix.Statfs(o.upperDir, &st)
	return st, err
}

// Getxattr returns the value of n's extended attribute name.
func (o *Overlay) Getxattr(ctx context.Context, n *Node, name string) ([]byte, error) {
	if reservedXattr(name) {
		return nil, unix.ENODATA
	}
	o.mu.RLock()
	defer o.mu.RUnlock()
	if n.state == stateLower {
		for _, x := range n.lower.Xattrs {
			if x.Name == name {
				return x.Value, nil
			}
		}
		return nil, unix.ENODATA
	}
	if !n.linked() {
		return nil, unix.ENODATA
	}
	a, err := o.nodeAt(n)
	if err != nil {
		return nil, err
	}
	defer a.close()
	return lgetxattr(a.proc(), name)
}

// Listxattr returns the names of n's extended attributes.
func (o *Overlay) Listxattr(ctx context.Context, n *Node) ([]string, error) {
	o.mu.RLock()
	defer o.mu.RUnlock()
	if n.state == stateLower {
		names := make([]string, 0, len(n.lower.Xattrs))
		for _, x := range n.lower.Xattrs {
			names = append(names, x.Name)
		}
		return names, nil
	}
	if !n.linked() {
		return nil, nil
	}
	a, err := o.nodeAt(n)
	if err != nil {
		return nil, err
	}
	defer a.close()
	all, err := listxattrAt(a.entry())
	if err != nil {
		return nil, err
	}
	names := all[:0]
	for _, x := range all {
		if !reservedXattr(x) {
			names = append(names, x)
		}
	}
	return names, nil
}
