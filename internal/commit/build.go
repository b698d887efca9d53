package commit

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"runtime"
	"slices"
	"strings"

	"github.com/zeebo/blake3"
	"golang.org/x/sys/unix"

	"layerfs.dev/layerfs/internal/dirfd"
	"layerfs.dev/layerfs/internal/store"
	"layerfs.dev/layerfs/wire/errclass"
)

// Change is one edit of a tree, as a workspace hands it to Build.
type Change struct {
	// Path is slash-separated and relative: never "", never absolute, with
	// no empty, "." or ".." components.
	Path string
	// Delete removes Path and everything under it. Deleting a path that does
	// not exist is not an error (a whiteout over nothing).
	Delete bool
	// Entry sets Path to this entry as is: its object is already stored (a
	// renamed lower file or directory). Its Name is taken from Path. A moved
	// directory whose own metadata changed is passed with the new metadata;
	// changes below it apply to its stored tree. A directory entry whose
	// Object is ZeroID is an empty directory (filled by changes below it).
	Entry *store.Entry
	// Source, when Delete is false and Entry is nil, is where Path is
	// captured from (a file, symlink, directory, device, ...): below Root
	// when Root is set, else a host path.
	Source string
	// Root, when set, is a host directory Source is relative to. Source is
	// then reached from it through directory descriptors, at any depth (a
	// host path past PATH_MAX works), never through a symlink and never
	// above Root.
	Root string
	// Recursive, for a Source directory, captures its whole subtree and
	// replaces Path's subtree; otherwise only the directory's own metadata
	// changes and its children come from the base plus other Changes.
	Recursive bool
	// HideXattrs are prefixes of extended attribute names not captured
	// from Source or from anything below it: those an overlay upper layer
	// keeps for itself (its opaque directories, redirects, metacopies),
	// which are the layer's, not the file's.
	HideXattrs []string
}

// Errors of Build.
var (
	ErrInvalidPath   = errclass.New(errclass.Invalid, "invalid path")
	ErrInvalidChange = errclass.New(errclass.Invalid, "invalid change")
)

// ValidPath checks a change path: relative, slash-separated, no empty, "."
// or ".." components, no NUL bytes.
func ValidPath(p string) error {
	if p == "" || strings.IndexByte(p, 0) >= 0 {
		return fmt.Errorf("path %q: %w", p, ErrInvalidPath)
	}
	for c := range strings.SplitSeq(p, "/") {
		if c == "" || c == "." || c == ".." {
			return fmt.Errorf("path %q: %w", p, ErrInvalidPath)
		}
	}
	return nil
}

// node is one path of the change set: its change, if any, and the changes
// below it.
type node struct {
	change   *Change
	children map[string]*node
}

func (n *node) child(name string) *node {
	if n.children == nil {
		n.children = map[string]*node{}
	}
	c := n.children[name]
	if c == nil {
		c = &node{}
		n.children[name] = c
	}
	return c
}

// onlyDeletes reports whether every change at and below n deletes.
func (n *node) onlyDeletes() bool {
	if n.change != nil && !n.change.Delete {
		return false
	}
	for _, c := range n.children {
		if !c.onlyDeletes() {
			return false
		}
	}
	return true
}

// pdir is a directory being built: the entries of its stored base tree,
// shared and never modified, overlaid with the names this build touched.
// Touching one name of a huge directory therefore copies nothing but the
// final tree.
type pdir struct {
	base []store.Entry      // sorted; read-only (decoded trees are shared)
	over map[string]*pentry // names read for change, set or deleted
}

type pentry struct {
	e       store.Entry
	dir     *pdir // non-nil: a directory whose tree is rebuilt from this
	deleted bool
}

func (d *pdir) setOver(p *pentry) {
	if d.over == nil {
		d.over = map[string]*pentry{}
	}
	d.over[p.e.Name] = p
}

// get returns the entry called name, or nil. A base entry is copied into
// the overlay, so that what the caller changes in it is kept.
func (d *pdir) get(name string) *pentry {
	if p, ok := d.over[name]; ok {
		if p.deleted {
			return nil
		}
		return p
	}
	i, ok := slices.BinarySearchFunc(d.base, name, func(e store.Entry, n string) int { return strings.Compare(e.Name, n) })
	if !ok {
		return nil
	}
	p := &pentry{e: d.base[i]}
	d.setOver(p)
	return p
}

func (d *pdir) set(p *pentry) { d.setOver(p) }

func (d *pdir) remove(name string) {
	d.setOver(&pentry{e: store.Entry{Name: name}, deleted: true})
}

// each calls fn for every live entry: base entries not overlaid, then the
// overlay's (in no particular order).
func (d *pdir) each(fn func(p *pentry, base *store.Entry) error) error {
	for i := range d.base {
		if _, ok := d.over[d.base[i].Name]; !ok {
			if err := fn(nil, &d.base[i]); err != nil {
				return err
			}
		}
	}
	for _, p := range d.over {
		if !p.deleted {
			if err := fn(p, nil); err != nil {
				return err
			}
		}
	}
	return nil
}

// builder holds one Build's state.
type builder struct {
	r      Reader
	w      Writer
	c      *contents
	stats  *Stats
	prog   *Progress
	links  map[[2]uint64]*linkGroup
	counts map[store.ID]store.CommitStats // memo of stored subtree totals
	srcs   sources
}

type linkGroup struct {
	paths   []string
	entries []*store.Entry
}

// workers is how many files are captured at once into w: Options.Workers,
// else as many as w asks for (a shared Store, whose probes wait on round
// trips) or the cores.
func (o *Options) workers(w Writer) int {
	if o != nil && o.Workers > 0 {
		return o.Workers
	}
	if cw, ok := w.(interface{ Concurrency() int }); ok && cw.Concurrency() > 0 {
		return cw.Concurrency()
	}
	return runtime.GOMAXPROCS(0)
}

func (o *Options) chunker() (*Chunker, error) {
	p := DefaultParams
	if o != nil && o.Chunking != (Params{}) {
		p = o.Chunking
	}
	return NewChunker(p)
}

func (o *Options) progress() *Progress {
	if o == nil {
		return nil
	}
	return o.Progress
}

// Build applies changes to the tree base (ZeroID: the empty tree) and
// returns the new root tree. It visits only the changed paths and their
// ancestors: untouched subtrees keep their ids, and one changed file in a
// tree of any size writes one tree per ancestor. Changes are applied in
// path order, parents before children, so a change below a replaced
// directory edits the replacement. Each path may appear once. New objects
// go to w; nothing is durable until the caller flushes its batch.
func Build(ctx context.Context, w Writer, r Reader, base store.ID, changes []Change, opts *Options) (store.ID, Stats, error) {
	root := &node{}
	for i := range changes {
		ch := &changes[i]
		if err := ValidPath(ch.Path); err != nil {
			return store.ZeroID, Stats{}, fmt.Errorf("change %d: %w", i, err)
		}
		if n := btoi(ch.Delete) + btoi(ch.Entry != nil) + btoi(ch.Source != ""); n != 1 {
			return store.ZeroID, Stats{}, fmt.Errorf("change %d (%q): set exactly one of Delete, Entry and Source: %w", i, ch.Path, ErrInvalidChange)
		}
		if ch.Root != "" && ch.Source != "" {
			if err := ValidPath(ch.Source); err != nil {
				return store.ZeroID, Stats{}, fmt.Errorf("change %d: source: %w", i, err)
			}
		}
		n := root
		for c := range strings.SplitSeq(ch.Path, "/") {
			n = n.child(c)
		}
		if n.change != nil {
			return store.ZeroID, Stats{}, fmt.Errorf("change %d: path %q appears twice: %w", i, ch.Path, ErrInvalidChange)
		}
		n.change = ch
	}
	return build(ctx, w, r, base, root, "", opts)
}

// CaptureDir captures the directory dir, recursively, as a new root tree.
func CaptureDir(ctx context.Context, w Writer, r Reader, dir string, opts *Options) (store.ID, Stats, error) {
	fi, err := os.Lstat(dir)
	if err != nil {
		return store.ZeroID, Stats{}, fmt.Errorf("capture: %w", err)
	}
	if !fi.IsDir() {
		return store.ZeroID, Stats{}, fmt.Errorf("capture %s: not a directory", dir)
	}
	return build(ctx, w, r, store.ZeroID, &node{}, dir, opts)
}

// sources opens the sources of a build's changes: each Root once, and the
// directory of the last Source reached below it, which the next change (a
// sibling, in path order) most often shares.
type sources struct {
	roots   map[string]int
	lastKey [2]string // root, directory
	lastFd  int
}

// at names chg's source; the At is valid until the next call or close.
func (s *sources) at(chg *Change) (dirfd.At, error) {
	if chg.Root == "" {
		return dirfd.At{Dir: unix.AT_FDCWD, Name: chg.Source}, nil
	}
	dir, name := dirfd.Split(chg.Source)
	if s.lastKey == [2]string{chg.Root, dir} && s.lastFd >= 0 {
		return dirfd.At{Dir: s.lastFd, Name: name}, nil
	}
	rfd, ok := s.roots[chg.Root]
	if !ok {
		var err error
		if rfd, err = dirfd.OpenRoot(chg.Root); err != nil {
			return dirfd.At{}, fmt.Errorf("source root: %w", err)
		}
		if s.roots == nil {
			s.roots = map[string]int{}
		}
		s.roots[chg.Root] = rfd
	}
	a, err := dirfd.Beneath(rfd, chg.Source)
	if err != nil {
		return dirfd.At{}, fmt.Errorf("source %s: %w", chg.Source, err)
	}
	s.dropLast()
	s.lastKey, s.lastFd = [2]string{chg.Root, dir}, a.Dir
	return a, nil
}

func (s *sources) dropLast() {
	if s.lastFd >= 0 {
		unix.Close(s.lastFd)
	}
	s.lastKey, s.lastFd = [2]string{}, -1
}

func (s *sources) close() {
	s.dropLast()
	for _, fd := range s.roots {
		unix.Close(fd)
	}
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

// build runs the changes under root against base, or, when rootSource is
// set, against a fresh capture of that directory.
func build(ctx context.Context, w Writer, r Reader, base store.ID, root *node, rootSource string, opts *Options) (store.ID, Stats, error) {
	ch, err := opts.chunker()
	if err != nil {
		return store.ZeroID, Stats{}, err
	}
	var stats Stats
	b := &builder{r: r, w: w, stats: &stats, prog: opts.progress(), links: map[[2]uint64]*linkGroup{}, counts: map[store.ID]store.CommitStats{}}
	b.srcs.lastFd = -1
	defer b.srcs.close()
	c, wctx := newContents(ctx, ch, w, &stats, b.prog, opts.workers(w))
	b.c = c
	var top *pdir
	err = func() error {
		if rootSource != "" {
			top = &pdir{}
			return b.walk(wctx, top, dirfd.At{Dir: unix.AT_FDCWD, Name: rootSource}, "", nil)
		}
		var err error
		if top, err = b.load(ctx, base); err != nil {
			return err
		}
		return b.apply(wctx, top, root, "")
	}()
	if werr := c.wait(); err == nil || errors.Is(err, context.Canceled) && werr != nil {
		err = werr
	}
	if err == nil {
		err = ctx.Err()
	}
	if err != nil {
		return store.ZeroID, stats, err
	}
	b.fixLinks()
	id, err := b.finish(top)
	return id, stats, err
}

// load makes a pdir over a stored tree.
func (b *builder) load(ctx context.Context, id store.ID) (*pdir, error) {
	d := &pdir{}
	if id.IsZero() {
		return d, nil
	}
	t, err := b.r.Tree(ctx, id)
	if err != nil {
		return nil, err
	}
	d.base = t.Entries
	return d, nil
}

// apply runs n's children's changes in dir, whose path is rel, in name
// order.
func (b *builder) apply(ctx context.Context, dir *pdir, n *node, rel string) error {
	names := make([]string, 0, len(n.children))
	for name := range n.children {
		names = append(names, name)
	}
	slices.Sort(names)
	for _, name := range names {
		if err := ctx.Err(); err != nil {
			return err
		}
		cn := n.children[name]
		path := join(rel, name)
		cur := dir.get(name)
		if cn.change == nil {
			if err := b.descend(ctx, cur, cn, path); err != nil {
				return err
			}
			continue
		}
		b.stats.Changes++
		var err error
		switch chg := cn.change; {
		case chg.Delete:
			err = b.remove(ctx, dir, cur, cn, name, path)
		case chg.Entry != nil:
			err = b.setEntry(ctx, dir, cur, cn, name, path)
		default:
			err = b.capture(ctx, dir, cur, cn, name, path)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// descend runs the changes below cn, which itself does not change, in the
// existing directory cur at path.
func (b *builder) descend(ctx context.Context, cur *pentry, cn *node, path string) error {
	if cur == nil || cur.e.Type != store.TypeDir {
		if cn.onlyDeletes() {
			return nil
		}
		what := "does not exist"
		if cur != nil {
			what = "is a " + cur.e.Type.String()
		}
		return fmt.Errorf("change below %q: it %s in the base and no change makes it a directory: %w", path, what, ErrInvalidChange)
	}
	if cur.dir == nil {
		d, err := b.load(ctx, cur.e.Object)
		if err != nil {
			return fmt.Errorf("%s: %w", path, err)
		}
		cur.dir = d
	}
	return b.apply(ctx, cur.dir, cn, path)
}

// remove deletes name, cur in the base, from dir; only deletes may be
// below it.
func (b *builder) remove(ctx context.Context, dir *pdir, cur *pentry, cn *node, name, path string) error {
	if cur != nil {
		if err := b.subtract(ctx, cur, true); err != nil {
			return err
		}
		dir.remove(name)
	}
	if !cn.onlyDeletes() {
		return fmt.Errorf("change below %q, which is deleted: %w", path, ErrInvalidChange)
	}
	return nil
}

// setEntry puts the change's stored entry at name in dir, in place of cur,
// and runs the changes below it.
func (b *builder) setEntry(ctx context.Context, dir *pdir, cur *pentry, cn *node, name, path string) error {
	pe := &pentry{e: *cn.change.Entry}
	pe.e.Name = name
	if err := (&store.Tree{Entries: []store.Entry{pe.e}}).Validate(); err != nil {
		return fmt.Errorf("change %q: %w", path, err)
	}
	if cur != nil {
		if err := b.subtract(ctx, cur, true); err != nil {
			return err
		}
	}
	if err := b.add(ctx, &pe.e); err != nil {
		return err
	}
	// A directory entry with the zero id is a new, empty directory: it
	// gets a real (empty) tree, as do directories changed below.
	if len(cn.children) > 0 || pe.e.Type == store.TypeDir && pe.e.Object.IsZero() {
		if pe.e.Type != store.TypeDir {
			return fmt.Errorf("change below %q, which becomes a %s: %w", path, pe.e.Type, ErrInvalidChange)
		}
		d, err := b.load(ctx, pe.e.Object)
		if err != nil {
			return fmt.Errorf("%s: %w", path, err)
		}
		pe.dir = d
		if err := b.apply(ctx, d, cn, path); err != nil {
			return err
		}
	}
	dir.set(pe)
	return nil
}

// capture reads the change's source into name in dir, in place of cur: a
// directory whole when the change is recursive, else the entry alone
// (keeping cur's children when both are directories); then it runs the
// changes below it.
func (b *builder) capture(ctx context.Context, dir *pdir, cur *pentry, cn *node, name, path string) error {
	chg := cn.change
	src, err := b.srcs.at(chg)
	if err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	e, st, err := statEntry(src, name, path, chg.HideXattrs)
	if err != nil {
		return err
	}
	b.stats.Entries++
	pe := &pentry{e: e}
	keepChildren := e.Type == store.TypeDir && !chg.Recursive && cur != nil && cur.e.Type == store.TypeDir
	if cur != nil {
		if err := b.subtract(ctx, cur, !keepChildren); err != nil {
			return err
		}
	}
	b.count(&pe.e)
	switch {
	case e.Type == store.TypeDir && chg.Recursive:
		pe.dir = &pdir{}
		if err := b.walk(ctx, pe.dir, src, path, chg.HideXattrs); err != nil {
			return err
		}
	case keepChildren:
		if pe.dir = cur.dir; pe.dir == nil {
			if pe.dir, err = b.load(ctx, cur.e.Object); err != nil {
				return fmt.Errorf("%s: %w", path, err)
			}
		}
	case e.Type == store.TypeDir:
		pe.dir = &pdir{}
	case e.Type == store.TypeFile:
		if err := b.file(ctx, src, path, st, &pe.e); err != nil {
			return err
		}
	}
	if len(cn.children) > 0 {
		if pe.dir == nil {
			return fmt.Errorf("change below %q, which becomes a %s: %w", path, pe.e.Type, ErrInvalidChange)
		}
		if err := b.apply(ctx, pe.dir, cn, path); err != nil {
			return err
		}
	}
	dir.set(pe)
	return nil
}

// file queues a regular file's content and joins it to its hard-link group.
func (b *builder) file(ctx context.Context, a dirfd.At, path string, st *unix.Stat_t, e *store.Entry) error {
	if st.Nlink > 1 {
		key := [2]uint64{st.Dev, st.Ino}
		if g := b.links[key]; g != nil {
			g.paths = append(g.paths, path)
			g.entries = append(g.entries, e)
			return nil // content is read once, for the first path
		}
		b.links[key] = &linkGroup{paths: []string{path}, entries: []*store.Entry{e}}
	}
	return b.c.add(ctx, a, path, st, e)
}

// fixLinks gives every hard-link group found in this build one content and
// one Link value, derived from the content and the group's first path so
// that capturing an unchanged tree again gives the same trees.
func (b *builder) fixLinks() {
	for _, g := range b.links {
		if len(g.entries) < 2 {
			continue
		}
		first := g.entries[0]
		link := linkValue(first.Object, slices.Min(g.paths))
		for _, e := range g.entries {
			e.Object, e.ObjectKind, e.Link = first.Object, first.ObjectKind, link
		}
	}
}

// linkValue is the Link of a hard-link group whose content is obj and
// whose first path (bytewise) is first: never 0.
func linkValue(obj store.ID, first string) uint64 {
	h := blake3.New()
	h.Write(obj[:])
	h.WriteString(first)
	var sum [32]byte
	h.Sum(sum[:0])
	return binary.LittleEndian.Uint64(sum[:8]) | 1
}

// walk captures the host directory a (tree path rel) into d, without the
// extended attributes hide names (see Change.HideXattrs). Each level
// holds its directory open while it captures the level below, and names
// what is in it relative to that descriptor: any depth works.
func (b *builder) walk(ctx context.Context, d *pdir, a dirfd.At, rel string, hide []string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	// O_NOFOLLOW: a directory swapped for a symlink after its lstat must
	// not lead the walk elsewhere.
	fd, err := a.OpenDir(unix.O_RDONLY)
	if err != nil {
		return fmt.Errorf("capture: open %s: %w", show(rel), err)
	}
	f := os.NewFile(uintptr(fd), show(rel))
	defer f.Close()
	names, err := f.Readdirnames(-1)
	if err != nil {
		return fmt.Errorf("capture: read dir %s: %w", show(rel), err)
	}
	slices.Sort(names)
	d.over = make(map[string]*pentry, len(names))
	for _, name := range names {
		ca, path := dirfd.At{Dir: fd, Name: name}, join(rel, name)
		e, st, err := statEntry(ca, name, path, hide)
		if err != nil {
			return fmt.Errorf("capture: %w", err)
		}
		b.stats.Entries++
		if b.prog != nil {
			b.prog.Entries.Add(1)
		}
		pe := &pentry{e: e}
		d.set(pe)
		b.count(&pe.e)
		switch e.Type {
		case store.TypeDir:
			pe.dir = &pdir{}
			if err := b.walk(ctx, pe.dir, ca, path, hide); err != nil {
				return err
			}
		case store.TypeFile:
			if err := b.file(ctx, ca, path, st, &pe.e); err != nil {
				return err
			}
		}
	}
	return nil
}

// finish stores d's tree bottom-up and returns its id.
func (b *builder) finish(d *pdir) (store.ID, error) {
	// The overlay's entries, sorted, merged into the (sorted) base.
	over := make([]store.Entry, 0, len(d.over))
	for _, p := range d.over {
		if p.deleted {
			continue
		}
		if p.dir != nil {
			id, err := b.finish(p.dir)
			if err != nil {
				return id, err
			}
			p.e.Object, p.e.ObjectKind = id, store.KindTree
		}
		over = append(over, p.e)
	}
	slices.SortFunc(over, func(x, y store.Entry) int { return strings.Compare(x.Name, y.Name) })
	t := &store.Tree{Entries: make([]store.Entry, 0, len(d.base)+len(over))}
	j := 0
	for i := range d.base {
		e := &d.base[i]
		if _, ok := d.over[e.Name]; ok {
			continue
		}
		for j < len(over) && over[j].Name < e.Name {
			t.Entries = append(t.Entries, over[j])
			j++
		}
		t.Entries = append(t.Entries, *e)
	}
	t.Entries = append(t.Entries, over[j:]...)
	id, err := b.w.PutTree(t)
	if err != nil {
		return id, fmt.Errorf("store tree: %w", err)
	}
	b.stats.Trees++
	return id, nil
}

// count adds one captured entry (not its children) to the delta.
func (b *builder) count(e *store.Entry) {
	switch e.Type {
	case store.TypeDir:
		b.stats.Delta.Dirs++
	case store.TypeFile:
		b.stats.Delta.Files++
		b.stats.Delta.Bytes += e.Size
	}
}

// add adds a stored entry and, for a directory, its stored subtree.
func (b *builder) add(ctx context.Context, e *store.Entry) error {
	s, err := b.totals(ctx, e)
	b.stats.Delta.Files += s.Files
	b.stats.Delta.Dirs += s.Dirs
	b.stats.Delta.Bytes += s.Bytes
	return err
}

// subtract removes an entry (and, when children is set, its subtree)
// from the delta. The entry may come from the base or from this build.
func (b *builder) subtract(ctx context.Context, p *pentry, children bool) error {
	s := store.CommitStats{}
	if p.e.Type == store.TypeDir && !children {
		s.Dirs = 1
	} else {
		var err error
		if s, err = b.ptotals(ctx, p); err != nil {
			return err
		}
	}
	b.stats.Delta.Files -= s.Files
	b.stats.Delta.Dirs -= s.Dirs
	b.stats.Delta.Bytes -= s.Bytes
	return nil
}

// ptotals counts an entry and everything below it, in memory where this
// build holds the directory, else in the store.
func (b *builder) ptotals(ctx context.Context, p *pentry) (store.CommitStats, error) {
	if p.dir == nil {
		return b.totals(ctx, &p.e)
	}
	s := store.CommitStats{Dirs: 1}
	err := p.dir.each(func(c *pentry, base *store.Entry) error {
		var sub store.CommitStats
		var err error
		if c != nil {
			sub, err = b.ptotals(ctx, c)
		} else {
			sub, err = b.totals(ctx, base)
		}
		s.Files += sub.Files
		s.Dirs += sub.Dirs
		s.Bytes += sub.Bytes
		return err
	})
	return s, err
}

// totals counts an entry and everything below it in the store.
func (b *builder) totals(ctx context.Context, e *store.Entry) (store.CommitStats, error) {
	switch e.Type {
	case store.TypeFile:
		return store.CommitStats{Files: 1, Bytes: e.Size}, nil
	case store.TypeDir:
		s, err := TreeTotals(ctx, b.r, e.Object, b.counts)
		s.Dirs++
		return s, err
	}
	return store.CommitStats{}, nil
}

// TreeTotals counts the files, directories (not the root) and file bytes
// of the stored tree id. memo, if not nil, caches subtree totals by id.
func TreeTotals(ctx context.Context, r Reader, id store.ID, memo map[store.ID]store.CommitStats) (store.CommitStats, error) {
	if s, ok := memo[id]; ok {
		return s, nil
	}
	var s store.CommitStats
	if id.IsZero() {
		return s, nil
	}
	t, err := r.Tree(ctx, id)
	if err != nil {
		return s, err
	}
	for i := range t.Entries {
		e := &t.Entries[i]
		switch e.Type {
		case store.TypeFile:
			s.Files++
			s.Bytes += e.Size
		case store.TypeDir:
			sub, err := TreeTotals(ctx, r, e.Object, memo)
			if err != nil {
				return s, err
			}
			s.Files += sub.Files
			s.Dirs += sub.Dirs + 1
			s.Bytes += sub.Bytes
		}
	}
	if memo != nil {
		memo[id] = s
	}
	return s, nil
}

// show names a tree path in a message ("." for the root).
func show(rel string) string {
	if rel == "" {
		return "."
	}
	return rel
}

func join(dir, name string) string {
	if dir == "" {
		return name
	}
	return dir + "/" + name
}
