package image

import (
	"archive/tar"
	"context"
	"errors"
	"fmt"
	"io"
	"path"
	"slices"
	"strings"

	"layerfs.dev/layerfs/internal/commit"
	"layerfs.dev/layerfs/internal/store"
)

// OCI whiteouts: a file .wh.NAME deletes NAME of the layers below; a file
// .wh..wh..opq makes its directory opaque (the layers below contribute
// nothing to it).
const (
	whiteoutPrefix = ".wh."
	opaqueMarker   = ".wh..wh..opq"
)

// layerChange is what a layer does to one path.
type layerChange struct {
	entry  *store.Entry // the path's new entry; nil: deleted
	opaque bool         // a directory whose base children are gone
	keep   bool         // a directory over the base's: its children stay
	link   string       // a hard link to this path (of the layer or the base)
}

// applier turns one layer's tar stream into changes of its base tree.
type applier struct {
	r       commit.Reader
	base    store.ID
	cw      *commit.ContentWriter
	digest  string // the layer's, for messages
	changes map[string]*layerChange
	links   []string // paths of hard links, in the order found
}

// badLayer is a layer refused: the error names the layer and the path.
func (a *applier) bad(p, format string, args ...any) error {
	return fmt.Errorf("%w: layer %s: %s: %s", ErrBadLayer, short(a.digest), showPath(p), fmt.Sprintf(format, args...))
}

func showPath(p string) string {
	if p == "" {
		return "/"
	}
	return "/" + p
}

// cleanName is a tar entry's name as a path of the tree: relative, clean,
// "" for the root. A name that leads out of the root is refused.
func (a *applier) cleanName(name string) (string, error) {
	if strings.IndexByte(name, 0) >= 0 {
		return "", a.bad(name, "a NUL byte in the name")
	}
	p := path.Clean("/" + name)
	// Clean of a rooted path drops every leading "..": look at the name
	// itself for a component that climbs.
	for c := range strings.SplitSeq(strings.Trim(name, "/"), "/") {
		if c == ".." {
			return "", a.bad(name, "the path leads out of the root")
		}
	}
	return strings.TrimPrefix(p, "/"), nil
}

// apply reads the layer's tar stream to its end and records its changes.
func (a *applier) apply(ctx context.Context, r io.Reader) error {
	tr := tar.NewReader(r)
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return a.finishLinks(ctx)
		}
		if err != nil {
			return fmt.Errorf("%w: layer %s: read the archive: %w", ErrBadLayer, short(a.digest), err)
		}
		if err := a.entry(ctx, h, tr); err != nil {
			return err
		}
	}
}

// entry applies one tar header (and its content, from tr).
func (a *applier) entry(ctx context.Context, h *tar.Header, tr io.Reader) error {
	if h.Typeflag == tar.TypeXGlobalHeader {
		return nil
	}
	p, err := a.cleanName(h.Name)
	if err != nil {
		return err
	}
	dir, base := path.Split(p)
	dir = strings.TrimSuffix(dir, "/")
	if strings.HasPrefix(base, whiteoutPrefix) {
		return a.whiteout(ctx, dir, base)
	}
	if p == "" {
		return nil // the root's own entry: the root keeps its attributes
	}
	if err := a.parents(ctx, dir); err != nil {
		return err
	}
	e := &store.Entry{Name: base, Mode: uint32(h.Mode) & 0o7777, UID: uint32(h.Uid), GID: uint32(h.Gid),
		MtimeNs: h.ModTime.UnixNano(), Xattrs: xattrsOf(h)}
	switch h.Typeflag {
	case tar.TypeReg:
		e.Type, e.Size = store.TypeFile, h.Size
		if e.Object, e.ObjectKind, err = a.cw.Store(ctx, tr, h.Size); err != nil {
			if errors.Is(err, io.ErrUnexpectedEOF) {
				return a.bad(p, "the archive ends inside the file (%d bytes)", h.Size)
			}
			return fmt.Errorf("layer %s: %s: %w", short(a.digest), showPath(p), err)
		}
	case tar.TypeDir:
		return a.dir(ctx, p, e)
	case tar.TypeSymlink:
		// A symlink's target is data: it is resolved in the sandbox's
		// root, never while importing.
		e.Type, e.Target, e.Size = store.TypeSymlink, h.Linkname, int64(len(h.Linkname))
	case tar.TypeLink:
		return a.hardLink(ctx, p, h.Linkname)
	case tar.TypeFifo:
		e.Type = store.TypeFIFO
	case tar.TypeChar, tar.TypeBlock:
		return a.bad(p, "a device node (%d:%d): images may not bring devices", h.Devmajor, h.Devminor)
	default:
		return a.bad(p, "unsupported tar entry type %q", h.Typeflag)
	}
	a.changes[p] = &layerChange{entry: e}
	return nil
}

// xattrsOf is a header's extended attributes (PAX SCHILY.xattr.*), sorted.
func xattrsOf(h *tar.Header) []store.Xattr {
	var out []store.Xattr
	for k, v := range h.PAXRecords {
		if name, ok := strings.CutPrefix(k, "SCHILY.xattr."); ok {
			out = append(out, store.Xattr{Name: name, Value: []byte(v)})
		}
	}
	slices.SortFunc(out, func(x, y store.Xattr) int { return strings.Compare(x.Name, y.Name) })
	return out
}

// whiteout applies .wh.NAME or the opaque marker found in dir. A whiteout
// of what the image does not hold (or under a symlink) does nothing.
func (a *applier) whiteout(ctx context.Context, dir, base string) error {
	if base == opaqueMarker {
		if dir == "" {
			// The root made opaque: nothing of the base stays.
			a.base = store.ZeroID
			a.forgetBase("")
			return nil
		}
		c := a.changes[dir]
		if c == nil || c.entry == nil {
			e, err := a.lookup(ctx, dir)
			if err != nil {
				return err
			}
			if e == nil || e.Type != store.TypeDir {
				return nil // opaque over nothing: no effect
			}
			c = &layerChange{entry: dirEntry(e)}
			a.changes[dir] = c
		}
		c.opaque, c.keep = true, false
		a.forgetBase(dir)
		return nil
	}
	name := strings.TrimPrefix(base, whiteoutPrefix)
	if name == "" || name == "." || name == ".." {
		return a.bad(path.Join(dir, base), "a whiteout of no name")
	}
	p := path.Join(dir, name)
	e, err := a.lookup(ctx, p)
	if err != nil || e == nil {
		return err
	}
	a.changes[p] = &layerChange{}
	return nil
}

// forgetBase makes the directories the layer set below dir (all of them
// for "") new and empty: dir became opaque, so what the base held there
// is gone.
func (a *applier) forgetBase(dir string) {
	for p, c := range a.changes {
		if c.keep && (dir == "" || strings.HasPrefix(p, dir+"/")) {
			c.keep = false
			c.entry.Object = store.ZeroID
		}
	}
}

// dirEntry is a copy of the directory entry e with its metadata only.
func dirEntry(e *store.Entry) *store.Entry {
	d := *e
	return &d
}

// dir sets the directory p to e's metadata: over the base's directory
// (whose children stay) or as a new, empty one.
func (a *applier) dir(ctx context.Context, p string, e *store.Entry) error {
	e.Type, e.ObjectKind = store.TypeDir, store.KindTree
	if c := a.changes[p]; c != nil && c.entry != nil && c.entry.Type == store.TypeDir {
		// Set again: new metadata, what the layer did below stays.
		e.Object, e.ObjectKind = c.entry.Object, c.entry.ObjectKind
		c.entry = e
		return nil
	}
	old, err := a.lookup(ctx, p)
	if err != nil {
		return err
	}
	c := &layerChange{entry: e}
	if old != nil && old.Type == store.TypeDir {
		e.Object, e.ObjectKind = old.Object, old.ObjectKind
		c.keep = true
	}
	a.changes[p] = c
	return nil
}

// parents makes sure every directory above a path the layer writes is a
// directory: a missing one is created (0755, root's), as container
// engines do; a symlink or a file there is refused, since writing through
// it would land elsewhere.
func (a *applier) parents(ctx context.Context, dir string) error {
	if dir == "" {
		return nil
	}
	var p string
	for c := range strings.SplitSeq(dir, "/") {
		p = path.Join(p, c)
		e, err := a.lookup(ctx, p)
		if err != nil {
			return err
		}
		switch {
		case e == nil:
			a.changes[p] = &layerChange{entry: &store.Entry{Name: c, Type: store.TypeDir, Mode: 0o755, ObjectKind: store.KindTree}}
		case e.Type == store.TypeSymlink:
			return a.bad(p, "a layer writes below a symlink (to %q): it would write outside the directory", e.Target)
		case e.Type != store.TypeDir:
			return a.bad(p, "a layer writes below a %s", e.Type)
		}
	}
	return nil
}

// lookup is the entry at p as the layer leaves it so far: the layer's
// own, else the base's unless the layer deleted or made opaque a
// directory above it. nil: none.
func (a *applier) lookup(ctx context.Context, p string) (*store.Entry, error) {
	if c, ok := a.changes[p]; ok {
		return c.entry, nil
	}
	id := a.base
	var e *store.Entry
	var sofar string
	for c := range strings.SplitSeq(p, "/") {
		if sofar != "" {
			if ch, ok := a.changes[sofar]; ok {
				if ch.entry == nil || ch.opaque || ch.entry.Type != store.TypeDir {
					return nil, nil
				}
			}
		}
		sofar = path.Join(sofar, c)
		if id.IsZero() {
			return nil, nil
		}
		t, err := a.r.Tree(ctx, id)
		if err != nil {
			return nil, err
		}
		var ok bool
		if e, ok = t.Find(c); !ok {
			return nil, nil
		}
		if e.Type != store.TypeDir {
			id = store.ZeroID
		} else {
			id = e.Object
		}
	}
	return e, nil
}

// hardLink records p as a hard link to target, a regular file the
// archive wrote before it or the base holds; it gets its entry once the
// layer is read (finishLinks).
func (a *applier) hardLink(ctx context.Context, p, target string) error {
	t, err := a.cleanName(target)
	if err != nil {
		return a.bad(p, "a hard link to %q, which leads out of the root", target)
	}
	e, err := a.lookup(ctx, t)
	if err != nil {
		return err
	}
	if e == nil {
		return a.bad(p, "a hard link to %s, which the image does not hold", showPath(t))
	}
	if e.Type != store.TypeFile {
		return a.bad(p, "a hard link to %s, a %s", showPath(t), e.Type)
	}
	a.changes[p] = &layerChange{link: t}
	a.links = append(a.links, p)
	return nil
}

// finishLinks gives every hard link its target's entry and the group's
// Link value (the target's, or a new one derived from its content and
// path), and the target that Link too.
func (a *applier) finishLinks(ctx context.Context) error {
	for _, p := range a.links {
		c := a.changes[p]
		if c.link == "" {
			continue // replaced later in the archive
		}
		target, err := a.lookup(ctx, c.link)
		if err != nil {
			return err
		}
		if target == nil || target.Type != store.TypeFile {
			return a.bad(p, "a hard link to %s, which a later entry removed", showPath(c.link))
		}
		if target.Link == 0 {
			t := *target
			t.Link = commit.LinkValue(t.Object, c.link)
			a.changes[c.link] = &layerChange{entry: &t}
			target = &t
		}
		e := *target
		e.Name = path.Base(p)
		c.entry, c.link = &e, ""
	}
	return nil
}

// buildChanges lists the changes for commit.Build, parents first. An
// opaque directory is replaced by an empty one that its children in the
// layer fill; a directory over the base's keeps its tree.
func (a *applier) buildChanges() []commit.Change {
	a.prune()
	var changes []commit.Change
	for p, c := range a.changes {
		switch {
		case c.entry == nil:
			changes = append(changes, commit.Change{Path: p, Delete: true})
		case c.opaque:
			e := *c.entry
			e.Object = store.ZeroID
			changes = append(changes, commit.Change{Path: p, Entry: &e})
		default:
			changes = append(changes, commit.Change{Path: p, Entry: c.entry})
		}
	}
	slices.SortFunc(changes, func(x, y commit.Change) int { return commit.ComparePaths(x.Path, y.Path) })
	return changes
}

// prune drops the layer's changes below a path it deletes, as an engine
// that applies a layer in archive order deletes what it wrote there.
func (a *applier) prune() {
	for p, c := range a.changes {
		if c.entry != nil || p == "" {
			continue
		}
		for q := range a.changes {
			if strings.HasPrefix(q, p+"/") {
				delete(a.changes, q)
			}
		}
	}
}
