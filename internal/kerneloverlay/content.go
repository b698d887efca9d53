package kerneloverlay

import (
	"context"
	"crypto/sha256"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"

	"layerfs.dev/layerfs/internal/overlay"
	"layerfs.dev/layerfs/internal/store"
)

// The data layers.
//
// The image's metacopy files redirect to their content, not to their
// path: "/ab/abcdef…", a file's object ID under a directory of its first
// two hex digits, which is also where the Store's cache keeps a
// materialized content (store.DB.CachePath). The overlay has two
// data-only layers that answer such a path:
//
//  1. the Store's cache directory, on a local file system: a content
//     materialized once (by any workspace, a checkout or a commit) is read
//     by the kernel with no daemon in the way, copied by copy_file_range
//     within one file system (cp of a committed file is a splice, or a
//     reflink on XFS and btrfs), and copied up from there;
//  2. the daemon's FUSE view of the same paths, for a content not
//     materialized yet: its open materializes it (lazy from the Store) and
//     passes the cache file through.
//
// Redirects the kernel writes into the upper (a renamed metacopy) name the
// file's path in the lower, never its data's, so commit reads the upper as
// before.

// contentPath is where the data-only layers keep the content id.
func contentPath(id store.ID) string {
	s := id.String()
	return "/" + s[:2] + "/" + s
}

// contentLower is the view's lower on the overlay path with a metadata
// image: a tree of the commit root's file contents, laid out as
// contentPath says (a directory per two-digit prefix, a read-only file
// per content), built on first use from a walk of the commit (the kernel
// reaches the view only for a content the cache lacks).
type contentLower struct {
	lower overlay.Lower
	root  store.ID // the commit

	once  sync.Once
	trees map[store.ID]*store.Tree // by the IDs contentID makes
	err   error
}

func newContentLower(lower overlay.Lower, root store.ID) *contentLower {
	return &contentLower{lower: lower, root: root}
}

// Root is the ID of the tree at the view's root.
func (c *contentLower) Root() store.ID { return c.contentID("") }

// contentID names the view's directory prefix ("" for its root): an ID no
// stored object has, since it hashes what no object kind is made of.
func (c *contentLower) contentID(prefix string) store.ID {
	return sha256.Sum256([]byte("layerfs content view\x00" + c.root.String() + "\x00" + prefix))
}

// Tree returns a directory of the view.
func (c *contentLower) Tree(ctx context.Context, id store.ID) (*store.Tree, error) {
	c.once.Do(func() { c.err = c.index(context.WithoutCancel(ctx)) })
	if c.err != nil {
		return nil, c.err
	}
	if t, ok := c.trees[id]; ok {
		return t, nil
	}
	return nil, fmt.Errorf("content view of %s: no directory %s: %w", c.root.Short(), id.Short(), store.ErrNotFound)
}

// Materialize puts a content in the Store's cache.
func (c *contentLower) Materialize(ctx context.Context, e *store.Entry) (string, error) {
	return c.lower.Materialize(ctx, e)
}

// index walks the commit and files each content under its prefix.
func (c *contentLower) index(ctx context.Context) error {
	byPrefix := map[string]map[store.ID]store.Entry{}
	var walk func(id store.ID) error
	walk = func(id store.ID) error {
		if id.IsZero() {
			return nil
		}
		t, err := c.lower.Tree(ctx, id)
		if err != nil {
			return fmt.Errorf("content view of %s: %w", c.root.Short(), err)
		}
		for _, e := range t.Entries {
			switch {
			case e.Type == store.TypeDir:
				if err := walk(e.Object); err != nil {
					return err
				}
			case e.Type == store.TypeFile && e.Size > 0:
				name := e.Object.String()
				if byPrefix[name[:2]] == nil {
					byPrefix[name[:2]] = map[store.ID]store.Entry{}
				}
				byPrefix[name[:2]][e.Object] = store.Entry{Name: name, Type: store.TypeFile, Mode: 0o444,
					Size: e.Size, Object: e.Object, ObjectKind: e.ObjectKind}
			}
		}
		return nil
	}
	if err := walk(c.root); err != nil {
		return err
	}
	c.trees = map[store.ID]*store.Tree{}
	top := &store.Tree{}
	for prefix, files := range byPrefix {
		t := &store.Tree{Entries: slices.Collect(maps.Values(files))}
		slices.SortFunc(t.Entries, func(a, b store.Entry) int { return strings.Compare(a.Name, b.Name) })
		id := c.contentID(prefix)
		c.trees[id] = t
		top.Entries = append(top.Entries, store.Entry{Name: prefix, Type: store.TypeDir, Mode: 0o555, Object: id, ObjectKind: store.KindTree})
	}
	slices.SortFunc(top.Entries, func(a, b store.Entry) int { return strings.Compare(a.Name, b.Name) })
	c.trees[c.Root()] = top
	return nil
}
