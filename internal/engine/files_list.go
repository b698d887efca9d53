package engine

import (
	"context"
	"fmt"
	"io/fs"
	"os"
	"path"
	"slices"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"layerfs.dev/layerfs/internal/unixmode"
	"layerfs.dev/layerfs/wire"
)

// Stat describes one path of a workspace without following a symlink at
// its end.
func (e *Engine) Stat(ctx context.Context, id, p string) (wire.FileInfo, error) {
	rel, err := cleanRel(p)
	if err != nil {
		return wire.FileInfo{}, err
	}
	var fi wire.FileInfo
	err = e.withRoot(ctx, id, false, func(root int, _ uint32) error {
		fi, err = statBelow(root, rel)
		return err
	})
	return fi, err
}

// statBelow describes rel below root.
func statBelow(root int, rel string) (wire.FileInfo, error) {
	f, err := beneath(root, rel, unix.O_PATH|unix.O_NOFOLLOW, 0)
	if err != nil {
		return wire.FileInfo{}, err
	}
	defer f.Close()
	return statAt(int(f.Fd()), "", relOrRoot(rel))
}

// List returns up to limit entries below the directory p of a workspace in
// name order, depth first when recursive, starting after the path cursor
// (a Next of an earlier page). Subdirectories are opened by name from their
// parent's fd without following symlinks, so a walk never leaves the
// workspace.
func (e *Engine) List(ctx context.Context, id, p string, recursive bool, cursor string, limit int) (wire.DirPage, error) {
	rel, err := cleanRel(p)
	if err != nil {
		return wire.DirPage{}, err
	}
	var page wire.DirPage
	err = e.withRoot(ctx, id, false, func(root int, _ uint32) error {
		page, err = listBelow(ctx, root, rel, recursive, cursor, limit)
		return err
	})
	return page, err
}

// listBelow lists the directory rel below root.
func listBelow(ctx context.Context, root int, rel string, recursive bool, cursor string, limit int) (wire.DirPage, error) {
	if limit <= 0 || limit > wire.MaxListLimit {
		limit = wire.DefaultListLimit
	}
	d, err := beneath(root, rel, unix.O_DIRECTORY|unix.O_RDONLY, 0)
	if err != nil {
		return wire.DirPage{}, err
	}
	defer d.Close()
	var page wire.DirPage
	l := lister{ctx: ctx, recursive: recursive, cursor: cursor, limit: limit, page: &page}
	return page, l.walk(d, rel)
}

// lister walks one listing; it stops with errPageFull once limit entries
// are in the page and one more exists.
type lister struct {
	ctx       context.Context
	recursive bool
	cursor    string
	limit     int
	page      *wire.DirPage
}

type pageFull struct{}

func (pageFull) Error() string { return "page full" }

func (l *lister) walk(d *os.File, dir string) error {
	err := l.walkDir(d, dir)
	if _, ok := err.(pageFull); ok {
		l.page.Next = l.page.Entries[len(l.page.Entries)-1].Path
		return nil
	}
	return err
}

func (l *lister) walkDir(d *os.File, dir string) error {
	names, err := d.Readdirnames(-1)
	if err != nil {
		return fmt.Errorf("list %q: %w", relOrRoot(dir), err)
	}
	slices.Sort(names)
	for _, name := range names {
		if err := l.ctx.Err(); err != nil {
			return err
		}
		p := path.Join(dir, name)
		switch comparePaths(p, l.cursor) {
		case before:
			continue
		case ancestor, same:
			// Listed before; its tree may hold the rest (descend does
			// nothing unless recursive).
			if err := l.descend(d, name, p); err != nil {
				return err
			}
			continue
		}
		fi, err := statAt(int(d.Fd()), name, p)
		if err != nil {
			if os.IsNotExist(err) {
				continue // removed while listing
			}
			return err
		}
		if len(l.page.Entries) == l.limit {
			return pageFull{}
		}
		l.page.Entries = append(l.page.Entries, fi)
		if l.recursive && fi.Type == "dir" {
			if err := l.descend(d, name, p); err != nil {
				return err
			}
		}
	}
	return nil
}

func (l *lister) descend(parent *os.File, name, p string) error {
	if !l.recursive {
		return nil
	}
	fd, err := unix.Openat(int(parent.Fd()), name, unix.O_DIRECTORY|unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err == unix.ENOENT || err == unix.ENOTDIR || err == unix.ELOOP {
		return nil // removed or replaced while listing
	}
	if err != nil {
		return pathError(p, err)
	}
	sub := os.NewFile(uintptr(fd), p)
	defer sub.Close()
	return l.walkDir(sub, p)
}

// Orders of a path against a cursor in a depth-first, name-ordered walk.
const (
	before   = iota // listed on an earlier page, with its tree
	same            // the cursor itself: listed, its tree perhaps not
	ancestor        // a directory the cursor lies in
	after
)

// comparePaths places p against cursor ("" places everything after).
func comparePaths(p, cursor string) int {
	if cursor == "" {
		return after
	}
	if strings.HasPrefix(cursor, p+"/") {
		return ancestor
	}
	ps, cs := strings.Split(p, "/"), strings.Split(cursor, "/")
	for i := 0; i < len(ps) && i < len(cs); i++ {
		if ps[i] != cs[i] {
			if ps[i] < cs[i] {
				return before
			}
			return after
		}
	}
	if len(ps) == len(cs) {
		return same
	}
	return after // below the cursor: the cursor was a directory listed before its tree
}

// statAt describes name in the directory dirfd (or dirfd itself when name
// is ""), reported as path p.
func statAt(dirfd int, name, p string) (wire.FileInfo, error) {
	flags := unix.AT_SYMLINK_NOFOLLOW
	if name == "" {
		flags |= unix.AT_EMPTY_PATH
	}
	var st unix.Stat_t
	if err := unix.Fstatat(dirfd, name, &st, flags); err != nil {
		return wire.FileInfo{}, &fs.PathError{Op: "stat", Path: p, Err: err}
	}
	fi := wire.FileInfo{
		Path:    p,
		Type:    entryTypeOf(unixmode.Type(st.Mode)),
		Size:    st.Size,
		Mode:    st.Mode & 0o7777,
		ModTime: time.Unix(st.Mtim.Sec, st.Mtim.Nsec).UTC(),
	}
	if fi.Type == "dir" {
		fi.Size = 0 // a directory's size is the file system's business
	}
	if st.Mode&unix.S_IFMT == unix.S_IFLNK {
		buf := make([]byte, unix.PathMax)
		n, err := unix.Readlinkat(dirfd, name, buf)
		if err != nil {
			return wire.FileInfo{}, &fs.PathError{Op: "readlink", Path: p, Err: err}
		}
		fi.Target = string(buf[:n])
	}
	return fi, nil
}

func relOrRoot(rel string) string {
	if rel == "" {
		return "."
	}
	return rel
}
