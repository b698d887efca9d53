package overlay

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"path"
	"sort"
	"syscall"

	"golang.org/x/sys/unix"

	"layerfs.dev/layerfs/internal/commit"
	"layerfs.dev/layerfs/internal/dirfd"
	"layerfs.dev/layerfs/internal/store"
)

// ChangeSet is the result of Changes: apply Changes to the tree Base with
// commit.Build. Changes list each path of the merged view that differs from
// Base once, parents before children, in the order they apply: a Delete, a
// known Entry (lower content that moved or whose metadata changed, a
// renamed lower directory, or a new directory, the empty tree, filled by
// later changes), or a Source below Root, the upper directory (Recursive for
// a whole new subtree).
type ChangeSet struct {
	Base    store.ID
	Changes []commit.Change
	// Upper is the scan of a kernel-written upper the set was listed
	// from (see ChangesSince), nil otherwise.
	Upper   *UpperState
	seq     uint64
	full    bool
	emitted map[string]bool // paths of emitted files
	linked  []*Node         // emitted hard-linked files, to emit all names of
}

// dirtyEnt records that a name in a directory changed since the last
// commit, or that something below it did.
type dirtyEnt struct {
	seq     uint64
	inBase  bool // the name existed in the merged view before its first change
	changed bool // the name's binding, content or metadata changed
	meta    bool // only the directory's own metadata changed
	walk    bool // descendants have dirty entries
}

func (o *Overlay) dirtyEnt(d *Node, name string) *dirtyEnt {
	ds := d.dir
	if ds.dirty == nil {
		ds.dirty = map[string]*dirtyEnt{}
	}
	e := ds.dirty[name]
	if e == nil {
		e = &dirtyEnt{inBase: ds.children[name] != nil}
		ds.dirty[name] = e
	}
	return e
}

// touch marks d/name changed. Call it before the change, so the entry
// records whether the name was there before. Needs o.mu.
func (o *Overlay) touch(d *Node, name string, meta bool) {
	if d == nil || d.dir == nil {
		return
	}
	o.seq++
	e := o.dirtyEnt(d, name)
	if !e.changed {
		e.changed, e.meta = true, meta
	} else if !meta {
		e.meta = false
	}
	e.seq = o.seq
	o.markWalk(d)
}

// markWalk records on d's ancestors that d has dirty entries.
func (o *Overlay) markWalk(d *Node) {
	for p := d; p != o.root && p.parent != nil; p = p.parent {
		e := o.dirtyEnt(p.parent, p.name)
		if e.walk {
			return
		}
		e.walk = true
	}
}

// touchMeta marks directory d's own metadata (its mtime) changed.
func (o *Overlay) touchMeta(d *Node) {
	if d != o.root && d.parent != nil {
		o.touch(d.parent, d.name, true)
	}
}

// touchNode marks every name of n changed.
func (o *Overlay) touchNode(n *Node) {
	if n.IsDir() {
		o.touchMeta(n)
		return
	}
	if n.parent != nil {
		o.touch(n.parent, n.name, false)
	}
	for _, a := range n.aliases {
		o.touch(a.parent, a.name, false)
	}
}

var errRetry = errors.New("overlay changed while listing changes")

// Changes lists what differs between the merged view and the base tree
// (ChangeSet.Base: the last commit's root, see MarkCommitted, or
// Config.Base). It visits only dirty paths; after a remount it describes
// every top-level name instead (see emitRemount). Files open for writing
// always count as changed.
func (o *Overlay) Changes(ctx context.Context) (*ChangeSet, error) {
	for try := 0; ; try++ {
		need := o.dirsToLoad()
		for _, d := range need {
			if err := o.loadUpperSubtree(ctx, d); err != nil {
				return nil, err
			}
		}
		var baseNames []string
		o.mu.RLock()
		full, base := o.rootDirty, o.base
		o.mu.RUnlock()
		if full && !base.IsZero() && base != o.lowerRoot {
			t, err := o.lower.Tree(ctx, base)
			if err != nil {
				return nil, fmt.Errorf("changes: base tree: %w", err)
			}
			for i := range t.Entries {
				baseNames = append(baseNames, t.Entries[i].Name)
			}
		}
		cs, err := o.changesLocked(baseNames)
		if errors.Is(err, errRetry) && try < 10 {
			continue
		}
		return cs, err
	}
}

// dirsToLoad returns the directories whose whole upper subtree a Changes
// walk will describe.
func (o *Overlay) dirsToLoad() []*Node {
	o.mu.RLock()
	defer o.mu.RUnlock()
	if o.rootDirty {
		return []*Node{o.root}
	}
	var out []*Node
	var walk func(d *Node)
	walk = func(d *Node) {
		for name, e := range d.dir.dirty {
			c := d.dir.children[name]
			if c == nil || !c.IsDir() {
				continue
			}
			if e.changed && !e.meta {
				out = append(out, c)
			} else if e.walk && c.dir.loaded {
				walk(c)
			}
		}
	}
	walk(o.root)
	return out
}

// loadUpperSubtree loads d and every directory below it that has an upper
// directory.
func (o *Overlay) loadUpperSubtree(ctx context.Context, d *Node) error {
	if err := o.ensureLoaded(ctx, d); err != nil {
		return err
	}
	o.mu.RLock()
	var kids []*Node
	for _, c := range d.dir.children {
		if c.IsDir() && c.state != stateLower {
			kids = append(kids, c)
		}
	}
	o.mu.RUnlock()
	for _, c := range kids {
		if err := o.loadUpperSubtree(ctx, c); err != nil {
			return err
		}
	}
	return nil
}

func (o *Overlay) changesLocked(baseNames []string) (*ChangeSet, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	for n, files := range o.writers {
		o.touchNode(n)
		n.listed = fdStamp(files[0].Fd())
	}
	cs := &ChangeSet{Base: o.base, seq: o.seq, emitted: map[string]bool{}}
	var err error
	if o.rootDirty {
		cs.full = true
		err = o.emitRemount(cs, baseNames)
	} else {
		err = o.walkDirty(cs, o.root, "")
	}
	if err != nil {
		return nil, err
	}
	// A commit groups hard links by the upper inode among the files it
	// captures: every name of a hard-linked file it captures must be in
	// the change set, or the link is lost.
	for len(cs.linked) > 0 {
		n := cs.linked[0]
		cs.linked = cs.linked[1:]
		for _, a := range append([]alias{{n.parent, n.name}}, n.aliases...) {
			if a.parent == nil || a.parent.dir.children[a.name] != n {
				continue
			}
			p := join(o.relPath(a.parent), a.name)
			if !cs.emitted[p] {
				if err := o.emitFile(cs, n, a.parent, a.name, p); err != nil {
					return nil, err
				}
			}
		}
	}
	cs.emitted, cs.linked = nil, nil
	return cs, nil
}

func join(dir, name string) string {
	if dir == "" {
		return name
	}
	return dir + "/" + name
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

func (o *Overlay) walkDirty(cs *ChangeSet, d *Node, dir string) error {
	for _, name := range sortedKeys(d.dir.dirty) {
		e := d.dir.dirty[name]
		p := join(dir, name)
		c := d.dir.children[name]
		if c == nil {
			if e.changed && e.inBase {
				cs.Changes = append(cs.Changes, commit.Change{Path: p, Delete: true})
			}
			continue
		}
		if e.changed {
			if !c.IsDir() {
				if err := o.emitFile(cs, c, d, name, p); err != nil {
					return err
				}
				continue
			}
			if !e.meta {
				if err := o.emitFull(cs, c, p); err != nil {
					return err
				}
				continue
			}
			if err := o.emitDirMeta(cs, c, p); err != nil {
				return err
			}
		}
		if e.walk && c.IsDir() && c.dir.loaded {
			if err := o.walkDirty(cs, c, p); err != nil {
				return err
			}
		}
	}
	return nil
}

// emitRemount lists the changes after a remount, when the dirty set is
// gone: every top-level name of the merged view is described completely
// (relative to its lower), and top-level names only the base has are
// deleted, so the list is right whatever the base tree is.
func (o *Overlay) emitRemount(cs *ChangeSet, baseNames []string) error {
	d := o.root
	if !d.dir.loaded {
		return errRetry
	}
	sameBase := o.base == o.lowerRoot
	names := map[string]bool{}
	for _, n := range baseNames {
		names[n] = true
	}
	for name, c := range d.dir.children {
		if !sameBase || c.state != stateLower || lowerHas(d, name) == nil {
			names[name] = true
		}
	}
	for name := range d.dir.whiteouts {
		names[name] = true
	}
	for _, name := range sortedKeys(names) {
		c := d.dir.children[name]
		if c == nil {
			cs.Changes = append(cs.Changes, commit.Change{Path: name, Delete: true})
			continue
		}
		if err := o.emitFull(cs, c, name); err != nil {
			return err
		}
	}
	return nil
}

// emitFull describes node n at path p completely, relative to its lower.
func (o *Overlay) emitFull(cs *ChangeSet, n *Node, p string) error {
	if !n.IsDir() {
		return o.emitFile(cs, n, n.parent, n.name, p)
	}
	if n.state == stateLower {
		e := *n.lower
		e.Name = path.Base(p)
		cs.Changes = append(cs.Changes, commit.Change{Path: p, Entry: &e})
		return nil
	}
	if !n.dir.loaded {
		return errRetry
	}
	if n.dir.lowerTree == nil && o.pureUpper(n) {
		cs.Changes = append(cs.Changes, commit.Change{Path: p, Source: p, Root: o.upperDir, Recursive: true, HideXattrs: reservedXattrs})
		return nil
	}
	// The directory's own metadata over its lower tree, or over an empty
	// tree (store.ZeroID) for a new directory, then its upper entries.
	var tree store.ID
	if n.dir.lowerTree != nil {
		tree = n.dir.lowerID
	}
	e, err := o.dirEntryFromUpper(n, path.Base(p), tree)
	if err != nil {
		return err
	}
	cs.Changes = append(cs.Changes, commit.Change{Path: p, Entry: e})
	return o.emitDirBody(cs, n, p)
}

// emitDirBody describes the upper entries and whiteouts of d relative to
// d's lower tree.
func (o *Overlay) emitDirBody(cs *ChangeSet, d *Node, p string) error {
	if !d.dir.loaded {
		return errRetry
	}
	names := map[string]bool{}
	for name := range d.dir.whiteouts {
		names[name] = true
	}
	for name, c := range d.dir.children {
		if c.state != stateLower || lowerHas(d, name) == nil {
			names[name] = true
		}
	}
	for _, name := range sortedKeys(names) {
		c := d.dir.children[name]
		cp := join(p, name)
		if c == nil {
			cs.Changes = append(cs.Changes, commit.Change{Path: cp, Delete: true})
			continue
		}
		if err := o.emitFull(cs, c, cp); err != nil {
			return err
		}
	}
	return nil
}

// pureUpper reports whether d's whole subtree is plain upper files, which
// a commit can capture from disk as it is.
func (o *Overlay) pureUpper(d *Node) bool {
	if !d.dir.loaded || len(d.dir.whiteouts) > 0 || d.dir.redirect != "" {
		return false
	}
	for _, c := range d.dir.children {
		if c.state != stateUpper || len(c.aliases) > 0 {
			return false // hard links are emitted name by name
		}
		if c.IsDir() && (c.dir.lowerTree != nil || !o.pureUpper(c)) {
			return false
		}
	}
	return true
}

func (o *Overlay) emitDirMeta(cs *ChangeSet, n *Node, p string) error {
	if n.state == stateLower {
		return nil // unchanged lower metadata
	}
	cs.Changes = append(cs.Changes, commit.Change{Path: p, Source: p, Root: o.upperDir, HideXattrs: reservedXattrs})
	return nil
}

// emitFile describes the non-directory n, known as d/name, at path p.
func (o *Overlay) emitFile(cs *ChangeSet, n *Node, d *Node, name, p string) error {
	switch n.state {
	case stateLower:
		e := *n.lower
		e.Name = name
		cs.Changes = append(cs.Changes, commit.Change{Path: p, Entry: &e})
	case stateMeta:
		src, err := o.childAt(d, name)
		if err != nil {
			return fmt.Errorf("changes: %s: %w", p, err)
		}
		defer src.close()
		var st unix.Stat_t
		if err := unix.Fstatat(src.dir, src.name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			return fmt.Errorf("changes: %s: %w", p, err)
		}
		e := *n.lower
		e.Name = name
		e.Mode = st.Mode & 07777
		e.UID, e.GID = st.Uid, st.Gid
		e.MtimeNs = st.Mtim.Nano()
		e.Link = o.linkValue(n)
		xs, err := upperXattrs(src.entry())
		if err != nil {
			return err
		}
		e.Xattrs = xs
		cs.Changes = append(cs.Changes, commit.Change{Path: p, Entry: &e})
	default:
		cs.Changes = append(cs.Changes, commit.Change{Path: p, Source: p, Root: o.upperDir, HideXattrs: reservedXattrs})
	}
	if cs.emitted != nil {
		cs.emitted[p] = true
		if len(n.aliases) > 0 && n.state != stateLower {
			cs.linked = append(cs.linked, n)
		}
	}
	return nil
}

// linkValue is the Link of a metacopy's entries: one non-zero value for
// all names of a hard-linked node (the lower group's own when known), 0
// for a single name. Needs o.mu.
func (o *Overlay) linkValue(n *Node) uint64 {
	if len(n.aliases) == 0 {
		return 0
	}
	if n.lower.Link != 0 {
		return n.lower.Link
	}
	h := fnv.New64a()
	h.Write(n.lower.Object[:])
	h.Write([]byte(o.relPath(n)))
	return h.Sum64() | 1
}

func upperXattrs(a dirfd.At) ([]store.Xattr, error) {
	names, err := listxattrAt(a)
	if err != nil {
		if notSupported(err) {
			return nil, nil
		}
		return nil, fmt.Errorf("changes: %w", err)
	}
	var xs []store.Xattr
	sort.Strings(names)
	for _, n := range names {
		if reservedXattr(n) {
			continue
		}
		v, err := lgetxattr(a.Proc(), n)
		if err != nil {
			if errors.Is(err, syscall.ENODATA) {
				continue
			}
			return nil, fmt.Errorf("changes: %w", err)
		}
		xs = append(xs, store.Xattr{Name: n, Value: v})
	}
	return xs, nil
}

// dirEntryFromUpper describes the directory n, whose entries are the lower
// tree id (to be modified by later changes) and whose metadata is the
// upper's. Needs o.mu.
func (o *Overlay) dirEntryFromUpper(n *Node, name string, tree store.ID) (*store.Entry, error) {
	src, err := o.nodeAt(n)
	if err != nil {
		return nil, fmt.Errorf("changes: %s: %w", name, err)
	}
	defer src.close()
	var st unix.Stat_t
	if err := unix.Fstatat(src.dir, src.name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return nil, fmt.Errorf("changes: %s: %w", name, err)
	}
	xs, err := upperXattrs(src.entry())
	if err != nil {
		return nil, err
	}
	return &store.Entry{Name: name, Type: store.TypeDir, Mode: st.Mode & 07777, UID: st.Uid, GID: st.Gid,
		MtimeNs: st.Mtim.Nano(), Object: tree, ObjectKind: store.KindTree, Xattrs: xs}, nil
}

// MarkCommitted records that cs was committed as root newRoot: the next
// Changes is relative to it. Changes made after cs was listed stay dirty.
// The merged view does not change (the lower stays what it was mounted on).
func (o *Overlay) MarkCommitted(newRoot store.ID, cs *ChangeSet) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.base = newRoot
	if cs.full {
		o.rootDirty = false
	}
	o.prune(o.root, cs.seq)
}

// prune drops dirty entries listed at or before seq; it reports whether d
// still has any.
func (o *Overlay) prune(d *Node, seq uint64) bool {
	for name, e := range d.dir.dirty {
		if e.changed && e.seq <= seq {
			e.changed, e.meta = false, false
			e.inBase = d.dir.children[name] != nil
		}
		if e.walk {
			c := d.dir.children[name]
			e.walk = c != nil && c.IsDir() && o.prune(c, seq)
		}
		if !e.changed && !e.walk {
			delete(d.dir.dirty, name)
		}
	}
	return len(d.dir.dirty) > 0
}
