package overlay

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path"
	"slices"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"

	"layerfs.dev/layerfs/internal/dirfd"
	"layerfs.dev/layerfs/internal/store"
)

// Reading an upper layer that kernel overlayfs wrote.
//
// When the workspace is a kernel overlayfs mount, no change passes through
// this package, so there is no dirty set. The upper directory itself is the
// change set: it holds exactly what changed since the workspace was
// created. ScanUpper stamps every upper entry (inode, type, size, ctime:
// the ctime moves on every change to an inode); ChangesSince compares a
// scan with the one taken at the last commit and marks what differs, so a
// commit visits the upper once with lstat and reads only what changed since
// the last commit.
//
// A stamp is exact only where a change after a stat always moves the
// ctime: the multigrain timestamps of Linux 6.13+ (ext4, xfs, btrfs,
// tmpfs). FineTimestamps checks a directory's file system for that.

type upperStamp struct {
	ino   uint64
	mode  uint32
	size  int64
	ctime int64
	meta  bool // a metacopy: its data is still the lower's
}

func stampOf(st *unix.Stat_t) upperStamp {
	if isWhiteout(st) {
		// Overlayfs makes whiteouts as hard links of one inode of its work
		// directory: making another moves this one's ctime. A whiteout
		// holds nothing but its name: it changes only by going away.
		return upperStamp{mode: st.Mode}
	}
	return upperStamp{ino: st.Ino, mode: st.Mode, size: st.Size, ctime: st.Ctim.Nano()}
}

func (s upperStamp) isDir() bool { return s.mode&syscall.S_IFMT == syscall.S_IFDIR }

// UpperState is one scan of an upper layer: every path in it with its
// stamp, and a summary of what the upper holds.
type UpperState struct {
	paths map[string]upperStamp
	UpperSummary
}

// UpperSummary counts what an upper layer holds.
type UpperSummary struct {
	Files      int64 `json:"files"`      // regular files (new, copied up or metacopies)
	Bytes      int64 `json:"bytes"`      // their logical size, without metacopies
	Dirs       int64 `json:"dirs"`       // directories
	Whiteouts  int64 `json:"whiteouts"`  // removed lower names
	Metacopies int64 `json:"metacopies"` // files whose data is still the lower's
	CopyUps    int64 `json:"copy_ups"`   // files that replace a lower file of the same path (CountCopyUps)
}

// Sub returns s minus t, field by field.
func (s UpperSummary) Sub(t UpperSummary) UpperSummary {
	return UpperSummary{Files: s.Files - t.Files, Bytes: s.Bytes - t.Bytes, Dirs: s.Dirs - t.Dirs,
		Whiteouts: s.Whiteouts - t.Whiteouts, Metacopies: s.Metacopies - t.Metacopies, CopyUps: s.CopyUps - t.CopyUps}
}

// EmptyUpper is the state of a new workspace's upper layer.
func EmptyUpper() *UpperState { return &UpperState{paths: map[string]upperStamp{}} }

// ScanUpper stamps every entry below dir (not dir itself).
func ScanUpper(dir string) (*UpperState, error) { return scanUpperSince(dir, nil) }

// scanUpperSince is ScanUpper knowing an earlier scan: a regular file whose
// inode, mode, size and ctime are as they were keeps its metacopy flag
// without reading its xattrs again (an xattr change moves the ctime).
//
// The walk holds each level's directory open while it scans the level
// below and names entries relative to it: any depth works, and no symlink
// is followed.
func scanUpperSince(dir string, earlier *UpperState) (*UpperState, error) {
	s := &UpperState{paths: map[string]upperStamp{}}
	var walk func(a dirfd.At, rel string) error
	walk = func(a dirfd.At, rel string) error {
		fd, err := a.OpenDir(unix.O_RDONLY)
		if err != nil {
			return err
		}
		f := os.NewFile(uintptr(fd), rel)
		defer f.Close()
		names, err := f.Readdirnames(-1)
		if err != nil {
			return err
		}
		for _, name := range names {
			e, r := dirfd.At{Dir: fd, Name: name}, join(rel, name)
			var st unix.Stat_t
			if err := e.Lstat(&st); err != nil {
				if errors.Is(err, syscall.ENOENT) {
					continue // removed while scanning: the next scan sees it
				}
				return err
			}
			stamp := stampOf(&st)
			switch {
			case isWhiteout(&st):
				s.Whiteouts++
			case st.Mode&syscall.S_IFMT == syscall.S_IFDIR:
				s.Dirs++
				if err := walk(e, r); err != nil {
					return err
				}
			case st.Mode&syscall.S_IFMT == syscall.S_IFREG:
				s.Files++
				old, known := upperStamp{}, false
				if earlier != nil {
					old, known = earlier.paths[r]
				}
				// The same stamp but for meta: the xattrs are as they were
				// (a change of them moves the ctime).
				stamp.meta = old.meta
				meta := old.meta
				if !known || stamp != old {
					var err error
					if meta, err = dataInLower(e); err != nil && !notSupported(err) {
						return err
					}
				}
				if meta {
					s.Metacopies++
				} else {
					s.Bytes += st.Size
				}
				stamp.meta = meta
			}
			s.paths[r] = stamp
		}
		return nil
	}
	if err := walk(dirfd.At{Dir: unix.AT_FDCWD, Name: dir}, ""); err != nil {
		return nil, fmt.Errorf("scan upper %s: %w", dir, err)
	}
	return s, nil
}

// dataInLower reports whether the upper regular file a still has its
// data in the lower: a kernel metacopy, or a copy-up of this package's
// that kept its origin.
func dataInLower(a dirfd.At) (bool, error) {
	names, err := listxattrAt(a)
	return slices.ContainsFunc(names, func(n string) bool { return n == xattrMetacopy || n == xattrOrigin }), err
}

// ChangesSince lists what differs between the merged view and the base
// tree when the upper layer was written by kernel overlayfs: committed is
// the upper as the last commit listed it (its ChangeSet.Upper), EmptyUpper
// for a new workspace, nil when unknown (after a remount: every top-level
// name is then described completely, as Changes does after a remount). The
// overlay must be freshly opened, and must not be used to change anything.
func (o *Overlay) ChangesSince(ctx context.Context, committed *UpperState) (*ChangeSet, error) {
	now, err := scanUpperSince(o.upperDir, committed)
	if err != nil {
		return nil, err
	}
	if committed != nil {
		if err := o.markSince(ctx, committed, now); err != nil {
			return nil, err
		}
	}
	cs, err := o.Changes(ctx)
	if err != nil {
		return nil, err
	}
	cs.Upper = now
	return cs, nil
}

// markSince marks dirty every path whose stamp differs between old and now.
func (o *Overlay) markSince(ctx context.Context, old, now *UpperState) error {
	o.mu.Lock()
	o.rootDirty = false
	o.mu.Unlock()
	full := map[string]bool{} // directories described whole: skip what is below
	covered := func(p string) bool {
		for q := parent(p); q != ""; q = parent(q) {
			if full[q] {
				return true
			}
		}
		return false
	}
	for _, p := range sortedKeys(now.paths) {
		if covered(p) {
			continue
		}
		s := now.paths[p]
		was, ok := old.paths[p]
		if ok && was == s {
			continue
		}
		meta := ok && s.isDir() && was.isDir() && was.ino == s.ino
		if err := o.markPath(ctx, p, meta); err != nil {
			return err
		}
		if s.isDir() && !meta {
			full[p] = true
		}
	}
	for p := range old.paths {
		if _, ok := now.paths[p]; ok || covered(p) {
			continue
		}
		if q := parent(p); q != "" {
			if s, ok := now.paths[q]; !ok || !s.isDir() {
				continue // its directory went too: that removal covers it
			}
		}
		if err := o.markPath(ctx, p, false); err != nil {
			return err
		}
	}
	return nil
}

// markPath marks the name p (relative to the root) changed: meta only for
// a directory's own metadata.
func (o *Overlay) markPath(ctx context.Context, p string, meta bool) error {
	d := o.root
	dir, name := parent(p), path.Base(p)
	if dir != "" {
		for _, c := range strings.Split(dir, "/") {
			next, err := o.Lookup(ctx, d, c)
			if err != nil {
				return fmt.Errorf("mark %s changed: %w", p, err)
			}
			d = next
		}
	}
	if err := o.ensureLoaded(ctx, d); err != nil {
		return err
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	o.touch(d, name, meta)
	// Whether the name was in the base tree is unknown here; a Delete of a
	// name the base lacks is a no-op.
	d.dir.dirty[name].inBase = true
	return nil
}

func parent(p string) string {
	if i := strings.LastIndexByte(p, '/'); i >= 0 {
		return p[:i]
	}
	return ""
}

// absRedirect returns a directory redirect as an absolute lower path: a
// relative one names a directory in the lower directory of d.
func absRedirect(d *Node, v string) string {
	if strings.HasPrefix(v, "/") {
		return v
	}
	if d.dir.lowerPath == "" || strings.Contains(v, "/") {
		return ""
	}
	return joinLower(d.dir.lowerPath, v)
}

// metacopyOrigin finds the lower entry whose data a kernel metacopy file
// d/name (at upper path p) still has: the redirect's target if the file
// was renamed, else the lower entry of the same name. Needs o.mu; it may
// read trees from the Store.
func (o *Overlay) metacopyOrigin(ctx context.Context, d *Node, name, p string, tree *store.Tree) (*store.Entry, error) {
	if v, err := lgetxattr(p, xattrRedirect); err == nil && len(v) > 0 {
		target := absRedirect(d, string(v))
		if e, err := o.lowerEntry(ctx, target); err != nil || e != nil {
			return e, err
		}
		return nil, fmt.Errorf("metacopy %s: redirect %q names no lower file", p, v)
	}
	if tree != nil {
		if e, ok := tree.Find(name); ok && e.Type == store.TypeFile {
			return e, nil
		}
	}
	return nil, fmt.Errorf("metacopy %s: no lower file of that name", p)
}

// lowerEntry returns the regular file at the absolute lower path p, or nil.
func (o *Overlay) lowerEntry(ctx context.Context, p string) (*store.Entry, error) {
	names := splitPath(p)
	if len(names) == 0 || o.lowerRoot.IsZero() {
		return nil, nil
	}
	id := o.lowerRoot
	for i, c := range names {
		t, err := o.lower.Tree(ctx, id)
		if err != nil {
			return nil, fmt.Errorf("resolve %q: %w", p, err)
		}
		e, ok := t.Find(c)
		if !ok {
			return nil, nil
		}
		if i == len(names)-1 {
			if e.Type != store.TypeFile {
				return nil, nil
			}
			return e, nil
		}
		if e.Type != store.TypeDir {
			return nil, nil
		}
		id = e.Object
	}
	return nil, nil
}

// FineTimestamps reports whether a change made right after a stat always
// moves the ctime on the file system of dir (multigrain timestamps), which
// ChangesSince needs to see every change.
func FineTimestamps(dir string) (bool, error) {
	f, err := os.CreateTemp(dir, "ctime-probe")
	if err != nil {
		return false, err
	}
	defer os.Remove(f.Name())
	defer f.Close()
	for i := 0; i < 3; i++ {
		var a, b unix.Stat_t
		if err := unix.Fstat(int(f.Fd()), &a); err != nil {
			return false, err
		}
		if _, err := f.Write([]byte{'x'}); err != nil {
			return false, err
		}
		if err := unix.Fstat(int(f.Fd()), &b); err != nil {
			return false, err
		}
		if a.Ctim == b.Ctim {
			return false, nil
		}
	}
	return true, nil
}

// CountCopyUps sets s.CopyUps: the upper's regular files (metacopies
// excepted) whose path is a regular file in the lower tree root, i.e.
// committed files whose data was copied up. A file under a renamed lower
// directory counts as new. Trees come from lower (the Store caches them).
func CountCopyUps(ctx context.Context, lower Lower, root store.ID, s *UpperState) error {
	s.CopyUps = 0
	base := newBaseTrees(lower, root)
	for p, st := range s.paths {
		if st.mode&syscall.S_IFMT != syscall.S_IFREG || st.meta {
			continue
		}
		copyUp, err := base.hasFile(ctx, p)
		if err != nil {
			return fmt.Errorf("count copy-ups: %w", err)
		}
		if copyUp {
			s.CopyUps++
		}
	}
	return nil
}

// baseTrees finds the directories of a base tree by path, reading each
// once (the Store caches trees too).
type baseTrees struct {
	lower Lower
	root  store.ID
	byDir map[string]*store.Tree // nil: no directory there in the base
}

func newBaseTrees(lower Lower, root store.ID) *baseTrees {
	return &baseTrees{lower: lower, root: root, byDir: map[string]*store.Tree{}}
}

// hasFile reports whether the base tree has a regular file at p: an upper
// regular file there replaced it (a copy-up).
func (b *baseTrees) hasFile(ctx context.Context, p string) (bool, error) {
	t, err := b.at(ctx, parent(p))
	if err != nil || t == nil {
		return false, err
	}
	e, ok := t.Find(path.Base(p))
	return ok && e.Type == store.TypeFile, nil
}

// at returns the base's directory dir, nil if there is none.
func (b *baseTrees) at(ctx context.Context, dir string) (*store.Tree, error) {
	if t, ok := b.byDir[dir]; ok {
		return t, nil
	}
	var t *store.Tree
	switch {
	case b.root.IsZero():
	case dir == "":
		var err error
		if t, err = b.lower.Tree(ctx, b.root); err != nil {
			return nil, fmt.Errorf("base tree: %w", err)
		}
	default:
		pt, err := b.at(ctx, parent(dir))
		if err != nil {
			return nil, err
		}
		if pt != nil {
			if e, ok := pt.Find(path.Base(dir)); ok && e.Type == store.TypeDir {
				if t, err = b.lower.Tree(ctx, e.Object); err != nil {
					return nil, fmt.Errorf("base tree %s: %w", dir, err)
				}
			}
		}
	}
	b.byDir[dir] = t
	return t, nil
}
