package commit

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"

	"layerfs.dev/layerfs/internal/store"
	"layerfs.dev/layerfs/internal/textmerge"
)

// sameEntry reports whether a and b are the same entry (names aside);
// two nils are.
func sameEntry(a, b *store.Entry) bool {
	if a == nil || b == nil {
		return a == b
	}
	return sameMeta(a, b) && a.Object == b.Object && a.Size == b.Size
}

// timeOnly reports whether e differs from b in its modification time
// alone: a touch, a tool that rewrote the same bytes, a checkout.
func timeOnly(b, e *store.Entry) bool {
	if b == nil || e == nil || b.MtimeNs == e.MtimeNs {
		return false
	}
	x := *e
	x.MtimeNs = b.MtimeNs
	return sameEntry(b, &x)
}

func dirPart(e *store.Entry) *store.Entry {
	if e != nil && e.Type == store.TypeDir {
		return e
	}
	return nil
}

func leafPart(e *store.Entry) *store.Entry {
	if e != nil && e.Type != store.TypeDir {
		return e
	}
	return nil
}

// resolveNode decides the merged entry of n once its kids are decided: a
// directory's fate depends on what survives below it.
func (m *merger) resolveNode(ctx context.Context, n *mnode) error {
	kids := n.sortedKids()
	for _, k := range kids {
		if err := ctx.Err(); err != nil {
			return err
		}
		if err := m.resolveNode(ctx, k); err != nil {
			return err
		}
	}
	if n == m.root || (!n.inDiff && n.b == nil && n.o == nil && n.t == nil) {
		// The root, or a directory on all three sides that only has
		// changes below it: it stays as it is.
		return nil
	}
	survives, allT := false, true
	for _, k := range kids {
		survives = survives || k.res != nil || k.through()
		allT = allT && k.asT
	}
	leaf, err := m.resolveLeaf(ctx, n, leafPart(n.b), leafPart(n.o), leafPart(n.t))
	if err != nil {
		return fmt.Errorf("%s: %w", n.path, err)
	}
	dir := m.resolveDir(n, dirPart(n.b), dirPart(n.o), dirPart(n.t), survives)
	switch {
	case leaf != nil && dir != nil:
		m.fileDirectory(n, leaf, dir)
	case dir != nil:
		n.res = dir
	default:
		n.res = leaf
	}
	if c := n.conflict; c != nil && m.opts.Prefer != textmerge.PreferNone {
		m.preferRename(n, c)
	}
	if n.keep != nil && n.aside == nil && n.conflict != nil && m.opts.Prefer == textmerge.PreferNone {
		n.aside, n.aside2 = n.keep, n.path+"~"+strings.ReplaceAll(m.labels[n.keepSide], "/", "_")
	}
	switch t := n.tTree; {
	case n.res == nil:
		n.asT = t == nil
	case n.res.Type == store.TypeDir:
		n.asT = n.inT && t != nil && t.Type == store.TypeDir && sameMeta(n.res, t) && allT
	default:
		n.asT = sameEntry(n.res, t)
	}
	return nil
}

// through reports whether n is a directory kept on every side with changes
// below it only.
func (n *mnode) through() bool { return !n.inDiff && n.b == nil && n.o == nil && n.t == nil }

// conflict records a conflict at n: one per path, so a later one (the
// file/directory conflict that follows a leaf's) replaces an earlier one.
func (m *merger) conflict(n *mnode, kind ConflictKind, markers bool) {
	c := Conflict{Path: n.path, Kind: kind, Base: ConflictSide{n.path, n.b}, Ours: ConflictSide{n.path, n.o}, Theirs: ConflictSide{n.path, n.t}, Markers: markers}
	if n.conflict != nil && n.conflict.Path == n.path {
		*n.conflict = c
		return
	}
	n.conflict = &c
	m.conflicts = append(m.conflicts, &c)
}

// pick is the entry of the side Prefer names, or fallback when none does.
func (m *merger) pick(o, t, fallback *store.Entry) *store.Entry {
	switch m.opts.Prefer {
	case textmerge.PreferOurs:
		return o
	case textmerge.PreferTheirs:
		return t
	}
	return fallback
}

// resolveLeaf decides the non-directory part of a path (files, symlinks,
// devices, ...) from its three entries, each nil or not a directory.
func (m *merger) resolveLeaf(ctx context.Context, n *mnode, b, o, t *store.Entry) (*store.Entry, error) {
	switch {
	case sameEntry(o, t):
		return o, nil
	case sameEntry(b, o):
		return t, nil
	case sameEntry(b, t):
		return o, nil
	case timeOnly(b, o) != timeOnly(b, t):
		// Time alone is not a modification: the other side's change (a
		// delete, a new content, a new type) is taken, with the later
		// time when it keeps an entry.
		side, other := o, t
		if timeOnly(b, t) {
			side, other = t, o
		}
		if other == nil {
			return nil, nil
		}
		out := *other
		out.MtimeNs = max(out.MtimeNs, side.MtimeNs)
		return &out, nil
	case o == nil || t == nil:
		// One side deleted what the other changed; with markers the
		// changed entry stays.
		m.conflict(n, ConflictModifyDelete, false)
		return m.pick(o, t, cmp.Or(o, t)), nil
	case o.Type != t.Type:
		kind := ConflictType
		if b == nil {
			kind = ConflictAddAdd
		}
		m.conflict(n, kind, false)
		return m.pick(o, t, o), nil
	}
	if b != nil && b.Type != o.Type {
		b = nil // both changed the type the same way: an add on each side
	}
	out := *o
	ownTime := false // the content is new or conflicted: mergeContent set the time
	switch o.Type {
	case store.TypeFile:
		var err error
		if ownTime, err = m.mergeContent(ctx, n, b, o, t, &out); err != nil {
			return nil, err
		}
	case store.TypeSymlink:
		if !merge3(m, n, &out.Target, b, o, t, func(e *store.Entry) string { return e.Target }, ConflictSymlink) {
			return m.pick(o, t, o), nil
		}
		out.Size = int64(len(out.Target))
	default:
		if !merge3(m, n, &out.Rdev, b, o, t, func(e *store.Entry) uint64 { return e.Rdev }, ConflictSpecial) {
			return m.pick(o, t, o), nil
		}
	}
	m.mergeMeta(n, b, o, t, &out, ownTime)
	return &out, nil
}

// merge3 merges one field three ways into *dst: the changed side's value,
// or a conflict of kind (then false) when both changed it differently.
func merge3[T comparable](m *merger, n *mnode, dst *T, b, o, t *store.Entry, get func(*store.Entry) T, kind ConflictKind) bool {
	ov, tv := get(o), get(t)
	switch {
	case ov == tv:
		*dst = ov
	case b != nil && get(b) == ov:
		*dst = tv
	case b != nil && get(b) == tv:
		*dst = ov
	default:
		m.conflict(n, kind, false)
		return false
	}
	return true
}

// mergeContent merges a file's content into out (ours' entry to begin
// with): a side's when only it changed, else a line merge of texts. It
// reports whether it decided out's modification time too (a merged or
// conflicted content).
func (m *merger) mergeContent(ctx context.Context, n *mnode, b, o, t *store.Entry, out *store.Entry) (bool, error) {
	sameContent := func(x, y *store.Entry) bool { return x.Object == y.Object && x.Size == y.Size }
	switch {
	case sameContent(o, t):
		return false, nil
	case b != nil && sameContent(b, o):
		out.Object, out.ObjectKind, out.Size, out.Link = t.Object, t.ObjectKind, t.Size, t.Link
		return false, nil
	case b != nil && sameContent(b, t):
		return false, nil
	}
	kind := ConflictContent
	if b == nil {
		kind = ConflictAddAdd
	}
	if o.Size > m.limit || t.Size > m.limit || (b != nil && b.Size > m.limit) {
		return true, m.binaryConflict(n, b, o, t, out)
	}
	oc, err := readContent(ctx, m.r, o)
	if err != nil {
		return false, err
	}
	tc, err := readContent(ctx, m.r, t)
	if err != nil {
		return false, err
	}
	var bc []byte
	if b != nil {
		if bc, err = readContent(ctx, m.r, b); err != nil {
			return false, err
		}
	}
	if !textmerge.IsText(oc) || !textmerge.IsText(tc) || !textmerge.IsText(bc) {
		return true, m.binaryConflict(n, b, o, t, out)
	}
	m.textMerges++
	res := textmerge.Merge(bc, oc, tc, textmerge.Options{OursLabel: m.labels[0], TheirsLabel: m.labels[1], Prefer: m.opts.Prefer,
		Diff: textmerge.Histogram})
	if res.Conflicts > 0 {
		m.conflict(n, kind, m.opts.Markers)
		if !m.opts.Markers {
			return true, nil // no tree is written
		}
	}
	obj, k, err := storeBytes(m.w, m.ch, res.Text)
	if err != nil {
		return false, fmt.Errorf("store merged content: %w", err)
	}
	out.Object, out.ObjectKind, out.Size = obj, k, int64(len(res.Text))
	out.MtimeNs = max(o.MtimeNs, t.MtimeNs)
	out.Link = 0
	if o.Link != 0 || t.Link != 0 {
		n.linkKey = [2]uint64{o.Link, t.Link}
	}
	return true, nil
}

// binaryConflict settles content that cannot be merged by lines: a
// conflict keeping ours' bytes, or the preferred side's.
func (m *merger) binaryConflict(n *mnode, b, o, t *store.Entry, out *store.Entry) error {
	kind := ConflictBinary
	if b == nil {
		kind = ConflictAddAdd
	}
	m.conflict(n, kind, false)
	if m.opts.Prefer == textmerge.PreferTheirs {
		out.Object, out.ObjectKind, out.Size, out.Link = t.Object, t.ObjectKind, t.Size, t.Link
	}
	return nil
}

// mergeMeta merges what an entry holds besides its content into out: the
// mode bit by bit, the owner and each extended attribute three ways, and
// (unless ownTime) the modification time: the changing side's, the later
// one when both changed it. b may be nil (an add on both sides).
func (m *merger) mergeMeta(n *mnode, b, o, t *store.Entry, out *store.Entry, ownTime bool) {
	bm := o.Mode & t.Mode // an add on both sides: a bit either side set is set
	if b != nil {
		bm = b.Mode
	}
	changed := o.Mode ^ bm
	out.Mode = o.Mode&changed | t.Mode&^changed
	uid, gid := o.UID, o.GID
	if merge3(m, n, &uid, b, o, t, func(e *store.Entry) uint32 { return e.UID }, ConflictMetadata) &&
		merge3(m, n, &gid, b, o, t, func(e *store.Entry) uint32 { return e.GID }, ConflictMetadata) {
		out.UID, out.GID = uid, gid
	} else if p := m.pick(o, t, o); p != nil {
		out.UID, out.GID = p.UID, p.GID
	}
	out.Xattrs = m.mergeXattrs(n, b, o, t)
	if ownTime {
		return
	}
	switch {
	case o.MtimeNs == t.MtimeNs, b != nil && b.MtimeNs == t.MtimeNs:
		out.MtimeNs = o.MtimeNs
	case b != nil && b.MtimeNs == o.MtimeNs:
		out.MtimeNs = t.MtimeNs
	default:
		out.MtimeNs = max(o.MtimeNs, t.MtimeNs)
	}
}

// mergeXattrs merges extended attributes name by name.
func (m *merger) mergeXattrs(n *mnode, b, o, t *store.Entry) []store.Xattr {
	get := func(e *store.Entry, name string) (string, bool) {
		if e == nil {
			return "", false
		}
		for _, x := range e.Xattrs {
			if x.Name == name {
				return string(x.Value), true
			}
		}
		return "", false
	}
	var names []string
	for _, e := range []*store.Entry{b, o, t} {
		if e == nil {
			continue
		}
		for _, x := range e.Xattrs {
			if !slices.Contains(names, x.Name) {
				names = append(names, x.Name)
			}
		}
	}
	slices.Sort(names)
	var out []store.Xattr
	for _, name := range names {
		bv, bok := get(b, name)
		ov, ook := get(o, name)
		tv, tok := get(t, name)
		v, ok := ov, ook
		switch {
		case ook == tok && ov == tv:
		case bok == ook && bv == ov:
			v, ok = tv, tok
		case bok == tok && bv == tv:
		default:
			m.conflict(n, ConflictMetadata, false)
			if m.opts.Prefer == textmerge.PreferTheirs {
				v, ok = tv, tok
			}
		}
		if ok {
			out = append(out, store.Xattr{Name: name, Value: []byte(v)})
		}
	}
	return out
}

// resolveDir decides the directory part of a path. A directory one side
// deleted stays when something below it survives the merge.
func (m *merger) resolveDir(n *mnode, b, o, t *store.Entry, survives bool) *store.Entry {
	switch {
	case o != nil && t != nil:
		out := *o
		m.mergeMeta(n, b, o, t, &out, false)
		return &out
	case o != nil:
		if b == nil || survives {
			return o
		}
	case t != nil:
		if b == nil || survives {
			return t
		}
	}
	return nil
}

// fileDirectory settles a path that is a directory on one side and a file
// (or symlink, ...) on the other, both kept by the merge: a conflict. With
// markers the directory stays and the file moves to "path~side"; Prefer
// takes the preferred side's type.
func (m *merger) fileDirectory(n *mnode, leaf, dir *store.Entry) {
	m.conflict(n, ConflictFileDirectory, false)
	oursIsDir := n.o != nil && n.o.Type == store.TypeDir
	switch m.opts.Prefer {
	case textmerge.PreferOurs:
		n.res = cmpIf(oursIsDir, dir, leaf)
		return
	case textmerge.PreferTheirs:
		n.res = cmpIf(!oursIsDir, dir, leaf)
		return
	}
	n.res = dir
	side := m.labels[1]
	if !oursIsDir {
		side = m.labels[0]
	}
	n.aside = leaf
	n.aside2 = n.path + "~" + strings.ReplaceAll(side, "/", "_")
	n.conflict.Moved = n.aside2
}

func cmpIf(c bool, a, b *store.Entry) *store.Entry {
	if c {
		return a
	}
	return b
}

// preferRename settles a rename conflict by the preferred side: a
// destination the preferred side does not have is dropped.
func (m *merger) preferRename(n *mnode, c *Conflict) {
	keep := c.Ours
	if m.opts.Prefer == textmerge.PreferTheirs {
		keep = c.Theirs
	}
	switch c.Kind {
	case ConflictRenameRename:
		if n.path != keep.Path {
			n.res = nil
		}
	case ConflictRenameDelete:
		if keep.Entry == nil {
			n.res = nil
		}
	}
}

// fixLinks gives the hard-linked files merged line by line one Link per
// group: the paths that had the same Links on both sides and got the same
// content, derived like a capture's from the content and the first path.
func (m *merger) fixLinks() {
	type key struct {
		links [2]uint64
		obj   store.ID
	}
	groups := map[key][]*mnode{}
	var walk func(n *mnode)
	walk = func(n *mnode) {
		if n.linkKey != ([2]uint64{}) && n.res != nil && n.res.Type == store.TypeFile {
			k := key{n.linkKey, n.res.Object}
			groups[k] = append(groups[k], n)
		}
		for _, k := range n.kids {
			walk(k)
		}
	}
	walk(m.root)
	for k, ns := range groups {
		if len(ns) < 2 {
			continue
		}
		first := ns[0].path
		for _, n := range ns {
			if ComparePaths(n.path, first) < 0 {
				first = n.path
			}
		}
		link := linkValue(k.obj, first)
		for _, n := range ns {
			n.res.Link = link
		}
	}
}

// emitKids writes the changes from ours that turn it into the merged tree
// below n, parents before children.
func (m *merger) emitKids(ctx context.Context, n *mnode, out *[]Change) error {
	for _, k := range n.sortedKids() {
		if err := m.emit(ctx, k, out); err != nil {
			return err
		}
	}
	return nil
}

func (m *merger) emit(ctx context.Context, n *mnode, out *[]Change) error {
	if n.through() {
		return m.emitKids(ctx, n, out)
	}
	o := n.oTree
	switch {
	case n.res == nil:
		if o != nil {
			*out = append(*out, Change{Path: n.path, Delete: true})
		}
	case n.res.Type != store.TypeDir:
		if !sameEntry(n.res, o) {
			*out = append(*out, Change{Path: n.path, Entry: n.res})
		}
	case o != nil && o.Type == store.TypeDir:
		if !sameMeta(n.res, o) {
			if !n.inO {
				// Ours' tree here is not the base's: look it up.
				var err error
				if o, err = lookupEntry(ctx, m.r, m.rootOurs, n.path); err != nil {
					return err
				}
			}
			e := *n.res
			e.Object, e.ObjectKind = o.Object, store.KindTree
			*out = append(*out, Change{Path: n.path, Entry: &e})
		}
		if err := m.emitKids(ctx, n, out); err != nil {
			return err
		}
	case n.asT:
		*out = append(*out, Change{Path: n.path, Entry: n.tTree})
	default:
		e := *n.res
		e.Object, e.ObjectKind = store.ZeroID, store.KindTree
		*out = append(*out, Change{Path: n.path, Entry: &e})
		if err := m.emitKids(ctx, n, out); err != nil {
			return err
		}
	}
	if n.aside != nil {
		p, err := m.freeName(ctx, n.aside2)
		if err != nil {
			return err
		}
		n.conflict.Moved = p
		*out = append(*out, Change{Path: p, Entry: n.aside})
	}
	return nil
}

// freeName is p, or p with a number added, that names nothing in the
// merged tree: where a moved file can go.
func (m *merger) freeName(ctx context.Context, p string) (string, error) {
	for i := 1; ; i++ {
		cand := p
		if i > 1 {
			cand = fmt.Sprintf("%s_%d", p, i)
		}
		if n := m.byPath[cand]; n != nil && (n.res != nil || n.through()) {
			continue
		}
		if _, ok := m.byPath[cand]; !ok {
			// Not a path either side changed: it is in the merged tree as
			// it is in ours, which is where it is looked up.
			e, err := lookupEntry(ctx, m.r, m.rootOurs, cand)
			if err != nil {
				return "", err
			}
			if e != nil {
				continue
			}
		}
		return cand, nil
	}
}

// lookupEntry finds the entry at the path p of the tree root, or nil.
func lookupEntry(ctx context.Context, r Reader, root store.ID, p string) (*store.Entry, error) {
	id := root
	var ent *store.Entry
	for c := range strings.SplitSeq(p, "/") {
		if id.IsZero() || (ent != nil && ent.Type != store.TypeDir) {
			return nil, nil
		}
		t, err := r.Tree(ctx, id)
		if err != nil {
			return nil, err
		}
		e, ok := t.Find(c)
		if !ok {
			return nil, nil
		}
		ent, id = e, e.Object
	}
	return ent, nil
}
