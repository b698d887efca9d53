package commit

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"

	"golang.org/x/sys/unix"

	"layerfs.dev/layerfs/internal/store"
)

// ApplyOptions tune Apply.
type ApplyOptions struct {
	// IDOffset is added to every owner written: for a directory reached
	// through an id-mapped mount, where on-disk id N shows as N+offset.
	IDOffset uint32
}

// ApplyStats tell what Apply changed.
type ApplyStats struct {
	Removed int64 `json:"removed"` // entries removed
	Written int64 `json:"written"` // entries written (a new directory's contents included)
	Bytes   int64 `json:"bytes"`   // file bytes written
}

// Apply makes the directory root (a descriptor), which holds the tree
// from, hold the tree to, touching only the paths whose ids differ: the
// way a live workspace takes in a merge. Entries are replaced whole (a
// changed file is written anew from the Store), directories changed below
// are kept and get to's metadata after their contents, and everything is
// reached through descriptors opened without following symlinks, as
// Checkout does. What is in the way of a change is removed first, so a
// partly applied Apply applied again from the start finishes the job.
//
// A hard link Apply writes joins only the links it writes itself: a new
// name for a file whose other names are unchanged is a copy.
func Apply(ctx context.Context, r Reader, from, to store.ID, root int, opts *ApplyOptions) (ApplyStats, error) {
	if opts == nil {
		opts = &ApplyOptions{}
	}
	var cst CheckoutStats
	a := &applier{c: &checkout{r: r, opts: &CheckoutOptions{Overwrite: true}, rootfd: root, root: ".", links: map[uint64]string{},
		stats: &cst, asRoot: os.Geteuid() == 0, idOffset: opts.IDOffset}}
	err := a.dir(ctx, root, from, to, "")
	a.st.Written += cst.Entries
	a.st.Bytes = cst.Bytes
	return a.st, err
}

type applier struct {
	c  *checkout
	st ApplyStats
}

func (a *applier) entries(ctx context.Context, id store.ID) ([]store.Entry, error) {
	if id.IsZero() {
		return nil, nil
	}
	t, err := a.c.r.Tree(ctx, id)
	if err != nil {
		return nil, err
	}
	return t.Entries, nil
}

// dir applies the difference of the trees from and to to the directory fd
// (tree path rel).
func (a *applier) dir(ctx context.Context, fd int, from, to store.ID, rel string) error {
	if from == to {
		return nil
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	olds, err := a.entries(ctx, from)
	if err != nil {
		return fmt.Errorf("apply %s: %w", show(rel), err)
	}
	news, err := a.entries(ctx, to)
	if err != nil {
		return fmt.Errorf("apply %s: %w", show(rel), err)
	}
	i, j := 0, 0
	for i < len(olds) || j < len(news) {
		var old, new *store.Entry
		switch {
		case j >= len(news) || i < len(olds) && olds[i].Name < news[j].Name:
			old = &olds[i]
			i++
		case i >= len(olds) || news[j].Name < olds[i].Name:
			new = &news[j]
			j++
		default:
			old, new = &olds[i], &news[j]
			i, j = i+1, j+1
		}
		if err := a.entry(ctx, fd, old, new, rel); err != nil {
			return err
		}
	}
	return nil
}

func (a *applier) entry(ctx context.Context, fd int, old, new *store.Entry, rel string) error {
	switch {
	case new == nil:
		p := join(rel, old.Name)
		err := unix.Unlinkat(fd, old.Name, 0)
		if errors.Is(err, unix.EISDIR) {
			err = removeAllAt(fd, old.Name)
		}
		if err != nil && !errors.Is(err, unix.ENOENT) {
			return fmt.Errorf("apply: remove %s: %w", p, err)
		}
		a.st.Removed++
		return nil
	case old != nil && new.Type == store.TypeDir && old.Type == store.TypeDir:
		return a.subdir(ctx, fd, old, new, join(rel, new.Name))
	case old != nil && sameEntry(old, new):
		return nil
	}
	return a.c.entry(ctx, fd, new, join(rel, new.Name))
}

// subdir applies a directory both trees have: its contents, then its
// metadata (which its contents' changes moved).
func (a *applier) subdir(ctx context.Context, fd int, old, new *store.Entry, p string) error {
	if old.Object == new.Object && sameMeta(old, new) {
		return nil
	}
	sub, err := unix.Openat(fd, new.Name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		// Not there, or not a directory: what a partial Apply left.
		if err := a.c.clear(fd, new); err != nil {
			return fmt.Errorf("apply %s: %w", p, err)
		}
		return a.c.entry(ctx, fd, new, p)
	}
	defer unix.Close(sub)
	if err := a.dir(ctx, sub, old.Object, new.Object, p); err != nil {
		return err
	}
	if err := dropXattrs(sub, new.Xattrs); err != nil {
		return fmt.Errorf("apply %s: %w", p, err)
	}
	if err := a.c.meta(sub, new); err != nil {
		return fmt.Errorf("apply %s: %w", p, err)
	}
	return nil
}

// dropXattrs removes the extended attributes of fd that keep does not
// name; those of the trusted and security namespaces that the caller may
// not list are not seen, and stay.
func dropXattrs(fd int, keep []store.Xattr) error {
	buf := make([]byte, 4096)
	n, err := unix.Flistxattr(fd, buf)
	if errors.Is(err, unix.ERANGE) {
		if n, err = unix.Flistxattr(fd, nil); err == nil {
			buf = make([]byte, n)
			n, err = unix.Flistxattr(fd, buf)
		}
	}
	if errors.Is(err, unix.ENOTSUP) {
		return nil
	}
	if err != nil {
		return err
	}
	for len(buf[:n]) > 0 {
		k := slices.Index(buf[:n], 0)
		if k < 0 {
			break
		}
		name := string(buf[:k])
		buf, n = buf[k+1:], n-k-1
		if !slices.ContainsFunc(keep, func(x store.Xattr) bool { return x.Name == name }) {
			if err := unix.Fremovexattr(fd, name); err != nil && !errors.Is(err, unix.ENODATA) {
				return fmt.Errorf("remove xattr %s: %w", name, err)
			}
		}
	}
	return nil
}
