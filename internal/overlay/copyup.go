package overlay

import (
	"context"
	"errors"
	"fmt"
	"os"
	"syscall"

	"golang.org/x/sys/unix"

	"layerfs.dev/layerfs/internal/store"
)

type copyKind uint8

const (
	copyMeta  copyKind = iota // metadata only: the data stays in the lower (metacopy)
	copyData                  // metadata and data
	copyTrunc                 // metadata, empty data (open with O_TRUNC, truncate to 0)
)

// copyUpDirLocked gives d and its ancestors upper directories, with the
// lower directories' metadata. Each is made in the work dir and renamed into
// place, so a crash never leaves a half-made upper directory. Needs o.mu.
func (o *Overlay) copyUpDirLocked(d *Node) error {
	if d.state != stateLower {
		return nil
	}
	if d.parent == nil {
		return syscall.ENOENT
	}
	if err := o.copyUpDirLocked(d.parent); err != nil {
		return err
	}
	restore, err := o.keepTimes(d.parent)
	if err != nil {
		return fmt.Errorf("copy up directory: %w", err)
	}
	defer restore()
	e := d.lower
	tmp := o.workAt(o.tmpName())
	if err := unix.Mkdirat(tmp.dir, tmp.name, 0o700); err != nil {
		return fmt.Errorf("copy up directory: %w", err)
	}
	if err := applyLowerMeta(tmp, -1, e); err != nil {
		removeAt(tmp)
		return err
	}
	dst, err := o.nodeAt(d)
	if err != nil {
		removeAt(tmp)
		return err
	}
	defer dst.close()
	if err := unix.Renameat2(tmp.dir, tmp.name, dst.dir, dst.name, unix.RENAME_NOREPLACE); err != nil {
		removeAt(tmp)
		return fmt.Errorf("copy up directory %s: %w", d.name, err)
	}
	d.state = stateUpper
	return nil
}

// applyLowerMeta gives a new upper inode (the entry a, or fd when >= 0)
// the lower entry's owner, mode, xattrs and mtime.
func applyLowerMeta(a at, fd int, e *store.Entry) error {
	var err error
	if fd >= 0 {
		err = unix.Fchown(fd, int(e.UID), int(e.GID))
	} else {
		err = unix.Fchownat(a.dir, a.name, int(e.UID), int(e.GID), unix.AT_SYMLINK_NOFOLLOW)
	}
	if err != nil {
		return fmt.Errorf("copy up owner: %w", err)
	}
	if e.Type != store.TypeSymlink {
		if fd >= 0 {
			err = unix.Fchmod(fd, e.Mode&07777)
		} else {
			err = unix.Fchmodat(a.dir, a.name, e.Mode&07777, 0)
		}
		if err != nil {
			return fmt.Errorf("copy up mode: %w", err)
		}
	}
	for _, x := range e.Xattrs {
		if fd >= 0 {
			err = unix.Fsetxattr(fd, x.Name, x.Value, 0)
		} else {
			err = unix.Lsetxattr(a.proc(), x.Name, x.Value, 0)
		}
		if err != nil && !notSupported(err) {
			return fmt.Errorf("copy up xattr %s: %w", x.Name, err)
		}
	}
	return setMtime(a, fd, e.MtimeNs)
}

func setMtime(a at, fd int, ns int64) error {
	ts := []unix.Timespec{unix.NsecToTimespec(ns), unix.NsecToTimespec(ns)}
	var err error
	if fd >= 0 {
		err = unix.UtimesNanoAt(fd, "", ts, unix.AT_EMPTY_PATH)
	} else {
		err = unix.UtimesNanoAt(a.dir, a.name, ts, unix.AT_SYMLINK_NOFOLLOW)
	}
	if err != nil {
		return fmt.Errorf("copy up times: %w", err)
	}
	return nil
}

// lowerContent returns the materialized lower content of n (a regular
// file in state stateLower or stateMeta), asking the Store once.
func (o *Overlay) lowerContent(ctx context.Context, n *Node) (string, error) {
	o.mu.RLock()
	p, e := n.cache, n.lower
	o.mu.RUnlock()
	if p != "" {
		return p, nil
	}
	if e.Size == 0 || e.Object.IsZero() {
		p = o.emptyFile
	} else {
		var err error
		if p, err = o.lower.Materialize(ctx, e); err != nil {
			return "", fmt.Errorf("materialize %s: %w", e.Object.Short(), err)
		}
	}
	o.mu.Lock()
	n.cache = p
	o.mu.Unlock()
	return p, nil
}

// openLower opens the materialized lower content of n. A cache file
// evicted since n last found it (store's cache bound) is materialized
// again.
func (o *Overlay) openLower(ctx context.Context, n *Node) (*os.File, error) {
	for tries := 0; ; tries++ {
		p, err := o.lowerContent(ctx, n)
		if err != nil {
			return nil, err
		}
		f, err := os.Open(p)
		if err == nil || tries > 0 || !errors.Is(err, os.ErrNotExist) {
			return f, err
		}
		o.mu.Lock()
		if n.cache == p {
			n.cache = ""
		}
		o.mu.Unlock()
	}
}

// copyUp gives n an upper inode of the given kind. For copyData and
// copyTrunc it returns the upper file opened read-write (the caller owns
// it), so an open that caused the copy-up needs no second open.
func (o *Overlay) copyUp(ctx context.Context, n *Node, kind copyKind) (*os.File, error) {
	n.cmu.Lock()
	defer n.cmu.Unlock()
	o.mu.RLock()
	state, e := n.state, n.lower
	o.mu.RUnlock()
	if n.mode == syscall.S_IFDIR {
		o.mu.Lock()
		defer o.mu.Unlock()
		return nil, o.copyUpDirLocked(n)
	}
	switch {
	case state == stateUpper:
		return nil, nil
	case state == stateMeta && kind == copyMeta:
		return nil, nil
	case state == stateMeta:
		return o.fillMeta(ctx, n, kind)
	}
	var src *os.File
	if kind == copyData && n.mode == syscall.S_IFREG {
		var err error
		if src, err = o.openLower(ctx, n); err != nil {
			return nil, fmt.Errorf("copy up: %w", err)
		}
		defer src.Close()
	}
	var f *os.File
	var tmp at // a scratch entry in the work dir, for what is not an O_TMPFILE
	switch n.mode {
	case syscall.S_IFREG:
		fd, err := unix.Openat(o.workFd, ".", unix.O_TMPFILE|unix.O_RDWR|unix.O_CLOEXEC, 0o600)
		if err != nil {
			return nil, fmt.Errorf("copy up: %w", err)
		}
		f = os.NewFile(uintptr(fd), "copy-up")
		if err := o.fillNew(f, src, e, kind); err != nil {
			f.Close()
			return nil, err
		}
	case syscall.S_IFLNK:
		tmp = o.workAt(o.tmpName())
		if err := unix.Symlinkat(e.Target, tmp.dir, tmp.name); err != nil {
			return nil, fmt.Errorf("copy up symlink: %w", err)
		}
	default:
		tmp = o.workAt(o.tmpName())
		if err := unix.Mknodat(tmp.dir, tmp.name, n.mode|e.Mode&07777, int(e.Rdev)); err != nil {
			return nil, fmt.Errorf("copy up special file: %w", err)
		}
	}
	if tmp.name != "" {
		if err := applyLowerMeta(tmp, -1, e); err != nil {
			removeAt(tmp)
			return nil, err
		}
	}
	o.mu.Lock()
	err := o.installLocked(n, f, tmp)
	if err == nil {
		switch kind {
		case copyMeta:
			if n.mode == syscall.S_IFREG {
				n.state = stateMeta
				o.stats.MetaCopyUps.Add(1)
			} else {
				n.state = stateUpper
			}
		default:
			n.state = stateUpper
			if kind == copyData {
				o.stats.CopyUps.Add(1)
				o.stats.CopyUpBytes.Add(e.Size)
			}
		}
	}
	o.mu.Unlock()
	if tmp.name != "" {
		removeAt(tmp) // already renamed on success
	}
	if err != nil || kind == copyMeta {
		if f != nil {
			f.Close()
		}
		return nil, err
	}
	return f, nil
}

// fillNew writes a new upper regular file's content and metadata.
func (o *Overlay) fillNew(f, src *os.File, e *store.Entry, kind copyKind) error {
	fd := int(f.Fd())
	switch kind {
	case copyData:
		cloned, err := cloneOrCopy(f, src, e.Size)
		if err != nil {
			return fmt.Errorf("copy up data: %w", err)
		}
		if cloned {
			o.stats.Clones.Add(1)
		}
	case copyMeta:
		if err := unix.Ftruncate(fd, e.Size); err != nil {
			return fmt.Errorf("copy up: %w", err)
		}
		if err := unix.Fsetxattr(fd, xattrOrigin, originOf(e).encode(), 0); err != nil {
			return fmt.Errorf("copy up: set origin: %w", err)
		}
	}
	return applyLowerMeta(at{}, fd, e)
}

// fillMeta turns a metacopy into a full upper file, in place: hard links of
// it share the upper inode. The origin xattr goes last, so a crash in
// between leaves a metacopy that still reads the lower.
func (o *Overlay) fillMeta(ctx context.Context, n *Node, kind copyKind) (*os.File, error) {
	o.mu.RLock()
	if !n.linked() {
		o.mu.RUnlock()
		return nil, syscall.ENOENT
	}
	a, err := o.nodeAt(n)
	size := n.lower.Size
	o.mu.RUnlock()
	if err != nil {
		return nil, fmt.Errorf("copy up: %w", err)
	}
	fd, err := unix.Openat(a.dir, a.name, unix.O_RDWR|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	a.close()
	if err != nil {
		return nil, fmt.Errorf("copy up: %w", err)
	}
	f := os.NewFile(uintptr(fd), n.name)
	fail := func(err error) (*os.File, error) {
		f.Close()
		return nil, err
	}
	if kind == copyData {
		src, err := o.openLower(ctx, n)
		if err != nil {
			return fail(fmt.Errorf("copy up: %w", err))
		}
		err = copyRange(f, src, 0, size)
		src.Close()
		if err != nil {
			return fail(fmt.Errorf("copy up data: %w", err))
		}
		o.stats.CopyUps.Add(1)
		o.stats.CopyUpBytes.Add(size)
	} else if err := unix.Ftruncate(int(f.Fd()), 0); err != nil {
		return fail(fmt.Errorf("copy up: %w", err))
	}
	if err := unix.Fremovexattr(int(f.Fd()), xattrOrigin); err != nil {
		return fail(fmt.Errorf("copy up: remove origin: %w", err))
	}
	o.mu.Lock()
	n.state = stateUpper
	o.mu.Unlock()
	return f, nil
}

// installLocked links a prepared upper inode (an O_TMPFILE f, or the entry
// tmp in the work dir) at every name of n, making upper parent directories
// as needed. Needs o.mu.
func (o *Overlay) installLocked(n *Node, f *os.File, tmp at) error {
	names := append([]alias{{n.parent, n.name}}, n.aliases...)
	var first at
	defer func() { first.close() }()
	for _, a := range names {
		if a.parent == nil || a.parent.dir.children[a.name] != n {
			continue
		}
		if err := o.copyUpDirLocked(a.parent); err != nil {
			return err
		}
		restore, err := o.keepTimes(a.parent)
		if err != nil {
			return fmt.Errorf("copy up %s: %w", a.name, err)
		}
		dst, err := o.childAt(a.parent, a.name)
		if err != nil {
			restore()
			return fmt.Errorf("copy up %s: %w", a.name, err)
		}
		switch {
		case first.name != "":
			err = unix.Linkat(first.dir, first.name, dst.dir, dst.name, 0)
		case f != nil:
			err = unix.Linkat(int(f.Fd()), "", dst.dir, dst.name, unix.AT_EMPTY_PATH)
		default:
			err = unix.Renameat2(tmp.dir, tmp.name, dst.dir, dst.name, unix.RENAME_NOREPLACE)
		}
		restore()
		if err != nil {
			dst.close()
			return fmt.Errorf("copy up %s: %w", a.name, err)
		}
		if first.name == "" {
			first = dst
		} else {
			dst.close()
		}
	}
	if first.name == "" {
		return syscall.ENOENT
	}
	var st unix.Stat_t
	if err := unix.Fstatat(first.dir, first.name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return fmt.Errorf("copy up: %w", err)
	}
	n.backing = st.Ino
	if len(names) > 1 {
		o.byUpper[st.Ino] = n
	}
	return nil
}
