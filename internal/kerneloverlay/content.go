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
// per content). The root lists every prefix at once (the view loads it
// when mounted); the prefixes' directories come from a walk of the commit
// made on the first lookup in one, which the kernel makes only for a
// content the cache lacks.
type contentLower struct {
	lower overlay.Lower
	root  store.ID // the commit

	mu    sync.Mutex
	trees map[store.ID]*store.Tree // by prefix directory; nil until indexed
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
	if id == c.Root() {
		top := &store.Tree{Entries: make([]store.Entry, 0, 256)}
		for i := range 256 {
			prefix := fmt.Sprintf("%02x", i)
			top.Entries = append(top.Entries, store.Entry{Name: prefix, Type: store.TypeDir, Mode: 0o555,
				Object: c.contentID(prefix), ObjectKind: store.KindTree})
		}
		return top, nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.trees == nil {
		trees, err := c.index(ctx)
		if err != nil {
			return nil, err // tried again on the next lookup
		}
		c.trees = trees
	}
	if t, ok := c.trees[id]; ok {
		return t, nil
	}
	return &store.Tree{}, nil // a prefix no content of the commit has
}

// Materialize puts a content in the Store's cache.
func (c *contentLower) Materialize(ctx context.Context, e *store.Entry) (string, error) {
	return c.lower.Materialize(ctx, e)
}

// index walks the commit and files each content under its prefix's
// directory.
func (c *contentLower) index(ctx context.Context) (map[store.ID]*store.Tree, error) {
	byPrefix := map[string]map[store.ID]store.Entry{}
	seen := map[store.ID]bool{} // trees walked (one may be several directories)
	var walk func(id store.ID) error
	walk = func(id store.ID) error {
		if id.IsZero() || seen[id] {
			return nil
		}
		seen[id] = true
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
		return nil, err
	}
	trees := make(map[store.ID]*store.Tree, len(byPrefix))
	for prefix, files := range byPrefix {
		t := &store.Tree{Entries: slices.Collect(maps.Values(files))}
		slices.SortFunc(t.Entries, func(a, b store.Entry) int { return strings.Compare(a.Name, b.Name) })
		trees[c.contentID(prefix)] = t
	}
	return trees, nil
}
