package commit

import (
	"context"
	"errors"
	"slices"
	"strings"

	"layerfs.dev/layerfs/internal/store"
)

// DiffKind says how a path differs between two trees.
type DiffKind string

// The kinds of difference.
const (
	Added       DiffKind = "added"
	Removed     DiffKind = "removed"
	Modified    DiffKind = "modified"     // same type; content or metadata changed
	TypeChanged DiffKind = "type-changed" // e.g. a file became a directory
)

// Difference is one path that differs. Old is nil for Added, New for
// Removed. A directory is Modified only when its own metadata changed;
// changes inside it are listed as their own paths.
type Difference struct {
	Path string       `json:"path"`
	Kind DiffKind     `json:"kind"`
	Old  *store.Entry `json:"old,omitempty"`
	New  *store.Entry `json:"new,omitempty"`
}

var errPageFull = errors.New("page full")

// Diff compares the trees from and to (ZeroID is the empty tree) and
// returns the differences in path order (depth first, names bytewise, a
// directory before its contents) that come after the cursor path after
// (""= from the start), at most limit of them (0: no limit). Subtrees with
// equal ids are skipped without reading them. next is the cursor for the
// following page, or "" when there is none.
func Diff(ctx context.Context, r Reader, from, to store.ID, after string, limit int) (diffs []Difference, next string, err error) {
	d := &differ{r: r, after: after, limit: limit}
	err = d.trees(ctx, from, to, "")
	if errors.Is(err, errPageFull) {
		err = nil
		diffs = d.out[:limit]
		return diffs, diffs[limit-1].Path, nil
	}
	return d.out, "", err
}

type differ struct {
	r     Reader
	after string
	limit int
	out   []Difference
}

// ComparePaths orders slash-separated paths the way Diff walks them:
// component by component, bytewise.
func ComparePaths(a, b string) int {
	for {
		ca, ra, _ := strings.Cut(a, "/")
		cb, rb, _ := strings.Cut(b, "/")
		if c := strings.Compare(ca, cb); c != 0 {
			if ca == "" {
				return -1
			}
			if cb == "" {
				return 1
			}
			return c
		}
		if ra == "" || rb == "" {
			return strings.Compare(ra, rb)
		}
		a, b = ra, rb
	}
}

// isAncestor reports whether dir is a proper ancestor of p.
func isAncestor(dir, p string) bool {
	return len(p) > len(dir) && strings.HasPrefix(p, dir) && p[len(dir)] == '/'
}

func (d *differ) emit(p string, k DiffKind, old, new *store.Entry) error {
	if d.after != "" && ComparePaths(p, d.after) <= 0 {
		return nil
	}
	d.out = append(d.out, Difference{Path: p, Kind: k, Old: old, New: new})
	if d.limit > 0 && len(d.out) > d.limit {
		return errPageFull // one extra tells that a next page exists
	}
	return nil
}

// skip reports whether p and everything under it come before the cursor.
func (d *differ) skip(p string) bool {
	return d.after != "" && ComparePaths(p, d.after) < 0 && !isAncestor(p, d.after)
}

func (d *differ) tree(ctx context.Context, id store.ID) ([]store.Entry, error) {
	if id.IsZero() {
		return nil, nil
	}
	t, err := d.r.Tree(ctx, id)
	if err != nil {
		return nil, err
	}
	return t.Entries, nil
}

func (d *differ) trees(ctx context.Context, from, to store.ID, rel string) error {
	if from == to {
		return nil
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	a, err := d.tree(ctx, from)
	if err != nil {
		return err
	}
	b, err := d.tree(ctx, to)
	if err != nil {
		return err
	}
	i, j := 0, 0
	for i < len(a) || j < len(b) {
		var old, new *store.Entry
		switch {
		case j >= len(b) || i < len(a) && a[i].Name < b[j].Name:
			old = &a[i]
			i++
		case i >= len(a) || b[j].Name < a[i].Name:
			new = &b[j]
			j++
		default:
			old, new = &a[i], &b[j]
			i, j = i+1, j+1
		}
		name := ""
		if old != nil {
			name = old.Name
		} else {
			name = new.Name
		}
		p := join(rel, name)
		if d.skip(p) {
			continue
		}
		if err := d.entry(ctx, p, old, new); err != nil {
			return err
		}
	}
	return nil
}

func (d *differ) entry(ctx context.Context, p string, old, new *store.Entry) error {
	dirID := func(e *store.Entry) store.ID {
		if e != nil && e.Type == store.TypeDir {
			return e.Object
		}
		return store.ZeroID
	}
	switch {
	case new == nil:
		if err := d.emit(p, Removed, old, nil); err != nil {
			return err
		}
	case old == nil:
		if err := d.emit(p, Added, nil, new); err != nil {
			return err
		}
	case old.Type != new.Type:
		if err := d.emit(p, TypeChanged, old, new); err != nil {
			return err
		}
	case old.Type == store.TypeDir:
		if !sameMeta(old, new) {
			if err := d.emit(p, Modified, old, new); err != nil {
				return err
			}
		}
	case !sameMeta(old, new) || old.Object != new.Object || old.Size != new.Size:
		if err := d.emit(p, Modified, old, new); err != nil {
			return err
		}
	}
	return d.trees(ctx, dirID(old), dirID(new), p)
}

// sameMeta compares everything of two entries but their object and size.
func sameMeta(a, b *store.Entry) bool {
	return a.Type == b.Type && a.Mode == b.Mode && a.UID == b.UID && a.GID == b.GID &&
		a.MtimeNs == b.MtimeNs && a.Target == b.Target && a.Rdev == b.Rdev && a.Link == b.Link &&
		a.ObjectKind == b.ObjectKind &&
		slices.EqualFunc(a.Xattrs, b.Xattrs, func(x, y store.Xattr) bool {
			return x.Name == y.Name && string(x.Value) == string(y.Value)
		})
}
