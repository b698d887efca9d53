package kerneloverlay

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
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
//  1. the Store's trusted layer (store.DB.CacheLayer): hard links to the
//     contents of its cache this process has checked against their IDs,
//     on a local file system. A content materialized once (by any
//     workspace of any commit) and trusted is read by the kernel with no
//     daemon in the way, copied by copy_file_range within one file system
//     (cp of a committed file is a splice, or a reflink on XFS and
//     btrfs), and copied up from there;
//  2. the daemon's FUSE view of the same paths, for a content not
//     materialized or not trusted yet: its open materializes or checks
//     it (store.DB.Materialize) and passes the cache file through. Its
//     directories come from the commit's contents list, which MetaImage
//     writes beside the image.
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
// when mounted). A prefix's directory is made on the first lookup in it,
// which the kernel makes only for a content the cache lacks: from its
// records in the commit's contents list, written sorted beside the
// metadata image, or, where there is no list, from a walk of the commit.
type contentLower struct {
	lower    overlay.Lower
	root     store.ID          // the commit
	list     string            // the path of the commit's contents list
	top      *store.Tree       // the view's root: a directory per prefix
	prefixes map[store.ID]byte // the prefixes' directories: their first byte

	mu      sync.Mutex
	loaded  bool
	records []byte                   // the contents list; nil: walked instead
	trees   map[store.ID]*store.Tree // the prefixes' directories made so far
}

func newContentLower(lower overlay.Lower, root store.ID, list string) *contentLower {
	c := &contentLower{lower: lower, root: root, list: list, top: &store.Tree{Entries: make([]store.Entry, 0, 256)},
		prefixes: make(map[store.ID]byte, 256), trees: map[store.ID]*store.Tree{}}
	for i := range 256 {
		prefix := fmt.Sprintf("%02x", i)
		id := c.contentID(prefix)
		c.top.Entries = append(c.top.Entries, store.Entry{Name: prefix, Type: store.TypeDir, Mode: 0o555,
			Object: id, ObjectKind: store.KindTree})
		c.prefixes[id] = byte(i)
	}
	return c
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
		return c.top, nil
	}
	first, ok := c.prefixes[id]
	if !ok {
		return nil, fmt.Errorf("content view of %s: no directory %s: %w", c.root.Short(), id.Short(), store.ErrNotFound)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.loaded {
		if err := c.load(ctx); err != nil {
			return nil, err // tried again on the next lookup
		}
	}
	if t, ok := c.trees[id]; ok {
		return t, nil
	}
	t := &store.Tree{} // a prefix no content of the commit has, after a walk
	if c.records != nil {
		// The list is sorted: the prefix's records are one run.
		n := len(c.records) / contentsRecordSize
		lo := sort.Search(n, func(i int) bool { return c.records[i*contentsRecordSize] >= first })
		for i := lo; i < n && c.records[i*contentsRecordSize] == first; i++ {
			t.Entries = append(t.Entries, contentRecord(c.records[i*contentsRecordSize:]))
		}
	}
	c.trees[id] = t
	return t, nil
}

// Materialize puts a content in the Store's cache.
func (c *contentLower) Materialize(ctx context.Context, e *store.Entry) (string, error) {
	return c.lower.Materialize(ctx, e)
}

// load reads the contents list, or, where there is none (a gc swept it),
// walks the commit and makes every prefix's directory.
func (c *contentLower) load(ctx context.Context) error {
	if records, err := readContents(c.list); err == nil {
		c.records, c.loaded = records, true
		return nil
	}
	contents, err := walkContents(ctx, c.lower, c.root)
	if err != nil {
		return fmt.Errorf("content view of %s: %w", c.root.Short(), err)
	}
	sortContents(contents)
	for _, x := range contents {
		e := contentEntry(x.ID, x.Kind, x.Size)
		id := c.contentID(e.Name[:2])
		if c.trees[id] == nil {
			c.trees[id] = &store.Tree{}
		}
		c.trees[id].Entries = append(c.trees[id].Entries, e)
	}
	c.loaded = true
	return nil
}

// walkContents lists the file contents of the commit root, each once.
func walkContents(ctx context.Context, lower interface {
	Tree(ctx context.Context, id store.ID) (*store.Tree, error)
}, root store.ID) ([]store.Content, error) {
	var contents contentList
	walked := map[store.ID]bool{}
	var walk func(id store.ID) error
	walk = func(id store.ID) error {
		if id.IsZero() || walked[id] {
			return nil
		}
		walked[id] = true
		t, err := lower.Tree(ctx, id)
		if err != nil {
			return err
		}
		for i := range t.Entries {
			if e := &t.Entries[i]; e.Type == store.TypeDir {
				if err := walk(e.Object); err != nil {
					return err
				}
			} else {
				contents.add(e)
			}
		}
		return nil
	}
	err := walk(root)
	return contents.contents, err
}

// hasContent reports whether the entry e is a file with data: one the
// image redirects to its content.
func hasContent(e *store.Entry) bool { return e.Type == store.TypeFile && e.Size > 0 }

// contentList gathers the contents of a commit's entries, each once.
type contentList struct {
	contents []store.Content
	listed   map[store.ID]struct{}
}

func (l *contentList) add(e *store.Entry) {
	if !hasContent(e) {
		return
	}
	if l.listed == nil {
		l.listed = map[store.ID]struct{}{}
	}
	if _, ok := l.listed[e.Object]; ok {
		return
	}
	l.listed[e.Object] = struct{}{}
	l.contents = append(l.contents, store.Content{ID: e.Object, Kind: e.ObjectKind, Size: e.Size})
}

func contentEntry(id store.ID, kind store.Kind, size int64) store.Entry {
	return store.Entry{Name: id.String(), Type: store.TypeFile, Mode: 0o444, Size: size, Object: id, ObjectKind: kind}
}

// A contents list holds a commit's contents sorted by ID, a record each:
// the ID, its object kind, its size (8 bytes, big-endian).
const (
	contentsSuffix     = ".contents"
	contentsRecordSize = len(store.ID{}) + 1 + 8
)

func sortContents(contents []store.Content) {
	slices.SortFunc(contents, func(a, b store.Content) int { return bytes.Compare(a.ID[:], b.ID[:]) })
}

// writeContents writes the contents list at path: beside it, then renamed
// into place, so a reader sees a whole list or none.
func writeContents(path string, contents []store.Content) error {
	sortContents(contents)
	b := make([]byte, 0, len(contents)*contentsRecordSize)
	for _, c := range contents {
		b = append(b, c.ID[:]...)
		b = append(b, byte(c.Kind))
		b = binary.BigEndian.AppendUint64(b, uint64(c.Size))
	}
	f, err := os.CreateTemp(filepath.Dir(path), ".tmp-")
	if err != nil {
		return err
	}
	defer os.Remove(f.Name())
	_, err = f.Write(b)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(f.Name(), path)
	}
	return err
}

// readContents reads the contents list at path, checking that it is whole
// records in order.
func readContents(path string) ([]byte, error) {
	if path == "" {
		return nil, os.ErrNotExist
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	if len(b)%contentsRecordSize != 0 {
		return nil, fmt.Errorf("contents list %s: %d bytes, not whole records", path, len(b))
	}
	for i := contentsRecordSize; i < len(b); i += contentsRecordSize {
		if bytes.Compare(b[i-contentsRecordSize:i-contentsRecordSize+32], b[i:i+32]) >= 0 {
			return nil, fmt.Errorf("contents list %s: out of order at record %d", path, i/contentsRecordSize)
		}
	}
	return b, nil
}

// contentRecord is the view's entry of the list's record r.
func contentRecord(r []byte) store.Entry {
	return contentEntry(store.ID(r[:32]), store.Kind(r[32]), int64(binary.BigEndian.Uint64(r[33:41])))
}

// TreeContents lists the file contents of the commit root, each once, in
// the order of a walk of its tree (depth first, names in order): the
// order in which a reader that walks the
// tree (find, grep -r, a build) meets them, which store.DB.Ready checks
// them in.
func TreeContents(ctx context.Context, lower interface {
	Tree(ctx context.Context, id store.ID) (*store.Tree, error)
}, root store.ID) ([]store.Content, error) {
	contents, err := walkContents(ctx, lower, root)
	if err != nil {
		return nil, fmt.Errorf("contents of %s: %w", root.Short(), err)
	}
	return contents, nil
}

// Contents lists the file contents of the commit root, each once (for the
// Store's Prefetch): from the contents list MetaImage wrote beside the
// image under cacheDir (a Store's cache directory), or, where there is
// none, from a walk of the commit.
func Contents(ctx context.Context, lower interface {
	Tree(ctx context.Context, id store.ID) (*store.Tree, error)
}, cacheDir string, root store.ID) ([]store.Content, error) {
	if records, err := readContents(contentsPath(cacheDir, root)); err == nil {
		out := make([]store.Content, 0, len(records)/contentsRecordSize)
		for i := 0; i < len(records); i += contentsRecordSize {
			e := contentRecord(records[i:])
			out = append(out, store.Content{ID: e.Object, Kind: e.ObjectKind, Size: e.Size})
		}
		return out, nil
	}
	contents, err := walkContents(ctx, lower, root)
	if err != nil {
		return nil, fmt.Errorf("contents of %s: %w", root.Short(), err)
	}
	return contents, nil
}
