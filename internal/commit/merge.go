package commit

import (
	"context"
	"fmt"
	"path"
	"slices"
	"strings"

	"layerfs.dev/layerfs/internal/store"
	"layerfs.dev/layerfs/internal/textmerge"
)

// ConflictKind says why a path could not be merged.
type ConflictKind string

// The kinds of conflict. Where one side deleted and the other changed, the
// sides of the Conflict tell which did what.
const (
	// ConflictContent: both sides changed a text file and their line
	// changes overlap.
	ConflictContent ConflictKind = "content"
	// ConflictBinary: both sides changed a binary file (or one larger than
	// MergeOptions.TextLimit) differently.
	ConflictBinary ConflictKind = "binary"
	// ConflictAddAdd: both sides added the path, with different content.
	ConflictAddAdd ConflictKind = "add/add"
	// ConflictModifyDelete: one side changed what the other deleted.
	ConflictModifyDelete ConflictKind = "modify/delete"
	// ConflictFileDirectory: one side has a directory where the other has
	// a file (or symlink, ...), and the directory keeps content.
	ConflictFileDirectory ConflictKind = "file/directory"
	// ConflictType: the sides changed the path to different types (file,
	// symlink, device, ...).
	ConflictType ConflictKind = "type"
	// ConflictSymlink: both sides changed a symlink's target differently.
	ConflictSymlink ConflictKind = "symlink"
	// ConflictSpecial: both sides changed a device's number differently.
	ConflictSpecial ConflictKind = "special"
	// ConflictMetadata: both sides changed the owner or an extended
	// attribute of the path differently.
	ConflictMetadata ConflictKind = "metadata"
	// ConflictRenameRename: the sides renamed one file to two paths.
	ConflictRenameRename ConflictKind = "rename/rename"
	// ConflictRenameDelete: one side renamed a file the other deleted.
	ConflictRenameDelete ConflictKind = "rename/delete"
)

// ConflictSide is one side of a conflict: the path it has the entry at
// (renames move it) and the entry, nil where that side has none.
type ConflictSide struct {
	Path  string       `json:"path"`
	Entry *store.Entry `json:"entry,omitempty"`
}

// Conflict is one path the merge could not decide.
type Conflict struct {
	Path   string       `json:"path"`
	Kind   ConflictKind `json:"kind"`
	Base   ConflictSide `json:"base"`
	Ours   ConflictSide `json:"ours"`
	Theirs ConflictSide `json:"theirs"`
	// Markers is set when the merged tree (MergeOptions.Markers) holds the
	// file at Path with conflict markers; otherwise it holds one side's
	// entry there (ours', or the side that did not delete it).
	Markers bool `json:"markers,omitempty"`
	// Moved, for a file/directory conflict in a tree with markers, is where
	// the file went so that the directory could stay at Path.
	Moved string `json:"moved,omitempty"`
}

// Paths are the paths a conflict involves: Path, and for a file renamed
// to two paths, both of them.
func (c *Conflict) Paths() []string {
	out := []string{c.Path}
	if c.Kind == ConflictRenameRename {
		for _, s := range []ConflictSide{c.Ours, c.Theirs} {
			if !slices.Contains(out, s.Path) {
				out = append(out, s.Path)
			}
		}
	}
	return out
}

// DefaultTextLimit is the largest file whose sides Merge merges line by
// line; a larger file changed on both sides is a binary conflict.
const DefaultTextLimit = 8 << 20

// MergeOptions tune Merge. The zero value (or nil) reports conflicts and
// writes no tree when there are any.
type MergeOptions struct {
	// Prefer settles every conflict by that side (git's -X ours, -X
	// theirs): conflicted hunks of a text take its lines, any other
	// conflict its entry. The merge is then clean.
	Prefer textmerge.Prefer
	// Markers writes the merged tree even with conflicts: text conflicts
	// hold git-style markers, other conflicts one side's entry (see
	// Conflict).
	Markers bool
	// OursLabel and TheirsLabel name the sides in markers and in the
	// names of moved files ("path~label"); default "ours" and "theirs".
	OursLabel, TheirsLabel string
	// TextLimit bounds the files merged line by line (0: DefaultTextLimit).
	TextLimit int64
	// Chunking cuts merged contents (zero value: DefaultParams).
	Chunking Params
	// RenameThreshold is the similarity, in percent, from which a file a
	// side removed and one it added are a rename (0: DefaultRenameThreshold,
	// git's; 100: exact renames only). NoRenames finds none, as git's
	// --no-renames: a renamed file is a delete and an add.
	RenameThreshold int
	NoRenames       bool
}

// MergeStats tell what a merge visited and wrote.
type MergeStats struct {
	// Paths is the number of paths either side changed (with their
	// ancestors): what the merge visited.
	Paths      int64 `json:"paths"`
	Renames    int64 `json:"renames"`     // renames followed
	TextMerges int64 `json:"text_merges"` // files merged line by line
	// Build is the build of the merged tree on ours.
	Build Stats `json:"build"`
}

// MergeResult is the outcome of Merge.
type MergeResult struct {
	// Tree is the merged root tree: set when Clean, or when
	// MergeOptions.Markers asked for a tree with the conflicts in it.
	Tree      store.ID
	Clean     bool
	Conflicts []Conflict
	Stats     MergeStats
}

// Merge merges the trees ours and theirs, both descended from base
// (ZeroID: the empty tree), and stores the merged tree's new objects in w.
//
// It visits only the paths whose ids differ between base and a side (the
// two diffs), so its cost grows with what changed, not with the trees:
// subtrees equal on both sides, or changed on one side only, are never
// read. Per path:
//
//   - changed on one side only, that side's entry is taken; the same
//     change on both sides is taken once;
//   - a text file changed on both is merged line by line (package
//     textmerge): overlapping hunks conflict; a binary file, or one past
//     TextLimit, changed differently on both conflicts;
//   - the mode bits merge bit by bit apart from content (one side's chmod
//     +x and the other's edit both land); the owner and each extended
//     attribute merge on their own and conflict when both changed them
//     differently; the modification time is the changing side's, the
//     later one when both changed;
//   - time alone is not a modification: a side whose entry differs from
//     the base's in its modification time only (a touch, a formatter that
//     wrote the same bytes, a checkout) takes the other side's change, a
//     delete or a new content or type, with the later time (git, which
//     keeps no times, sees no change there either);
//   - add/add with different content, modify/delete, a file where the
//     other side keeps a directory, different new types, symlink targets
//     changed differently: typed conflicts (ConflictKind);
//   - a directory one side deleted stays when the other side's changes
//     under it survive; an empty directory neither side deleted stays;
//   - renames are followed: a regular file one side removed at one path
//     and added at another, with the same content (exact renames, same
//     base names first) or, as git finds them, a similar one (at least
//     RenameThreshold percent of its bytes in common by lines, best
//     scores first); the file is merged at the new path, so the other
//     side's edit of the old path lands there, beside the renaming
//     side's own edit. A file renamed to two different paths conflicts,
//     and so does a rename of a file the other side deleted. Renamed
//     directories are not detected (git's directory renames): a file the
//     other side added in the old directory stays there;
//   - hard links: files merged from hard-linked sides get one new Link per
//     group, derived from the merged content and the group's first path.
//
// The result is deterministic: the same three trees give the same tree
// id. Without Markers or Prefer, a merge with conflicts writes no tree.
func Merge(ctx context.Context, w Writer, r Reader, base, ours, theirs store.ID, opts *MergeOptions) (MergeResult, error) {
	switch {
	case ours == theirs, base == theirs:
		return MergeResult{Tree: ours, Clean: true}, nil
	case base == ours:
		return MergeResult{Tree: theirs, Clean: true}, nil
	}
	if opts == nil {
		opts = &MergeOptions{}
	}
	m, err := newMerger(opts)
	if err != nil {
		return MergeResult{}, err
	}
	m.w, m.r = w, r
	if err := m.collect(ctx, base, ours, theirs); err != nil {
		return MergeResult{}, fmt.Errorf("merge: %w", err)
	}
	m.renames()
	if err := m.resolveNode(ctx, m.root); err != nil {
		return MergeResult{}, fmt.Errorf("merge: %w", err)
	}
	m.fixLinks()
	res := MergeResult{Clean: len(m.conflicts) == 0 || opts.Prefer != textmerge.PreferNone,
		Stats: MergeStats{Paths: m.paths, Renames: m.followed, TextMerges: m.textMerges}}
	if !res.Clean && !opts.Markers {
		res.Conflicts = m.sortedConflicts()
		return res, nil
	}
	var changes []Change
	if err := m.emitKids(ctx, m.root, &changes); err != nil {
		return MergeResult{}, fmt.Errorf("merge: %w", err)
	}
	tree, st, err := Build(ctx, w, r, ours, changes, &Options{Chunking: opts.Chunking})
	if err != nil {
		return MergeResult{}, fmt.Errorf("merge: build the merged tree: %w", err)
	}
	res.Tree, res.Stats.Build = tree, st
	res.Conflicts = m.sortedConflicts()
	return res, nil
}

// mnode is one path of the merge: its entries in the three trees and the
// paths below it that either side changed.
type mnode struct {
	name, path string
	// b, o, t are the entries the three-way decision uses: the path's in
	// base, ours and theirs, except where a followed rename brought
	// another path's entry here (or took it away).
	b, o, t *store.Entry
	// oTree and tTree are ours' and theirs' entries at the path as they
	// are: the merged tree is built on ours, so the decision is written as
	// the changes from it, and a directory the merge takes whole from
	// theirs is theirs' as it is.
	oTree, tTree *store.Entry
	inDiff       bool // the path itself differs between base and a side
	inO, inT     bool // ... between base and ours, between base and theirs
	// (a directory's entry outside its side's diff has that side's
	// metadata, but the base's tree: what changed below it is not in it)
	kids map[string]*mnode

	// The decision.
	res      *store.Entry // the merged entry (a directory's: its metadata); nil: absent
	asT      bool         // the merged path, and all below it, is theirs' as it is
	aside    *store.Entry // a file moved aside to asidePath (file/directory with markers)
	aside2   string
	conflict *Conflict
	linkKey  [2]uint64 // the sides' Links of a merged hard-linked file
	// keep is a side's (keepSide: 0 ours, 1 theirs) change of a file the
	// other side renamed here, where both have something: a tree with
	// markers keeps it beside the conflict.
	keep     *store.Entry
	keepSide int
}

func (n *mnode) kid(name string) *mnode {
	if n.kids == nil {
		n.kids = map[string]*mnode{}
	}
	k := n.kids[name]
	if k == nil {
		k = &mnode{name: name, path: join(n.path, name)}
		n.kids[name] = k
	}
	return k
}

func (n *mnode) sortedKids() []*mnode {
	out := make([]*mnode, 0, len(n.kids))
	for _, k := range n.kids {
		out = append(out, k)
	}
	slices.SortFunc(out, func(a, b *mnode) int { return strings.Compare(a.name, b.name) })
	return out
}

// merger holds one Merge's state.
type merger struct {
	opts       *MergeOptions
	ch         *Chunker
	limit      int64
	w          Writer
	r          Reader
	root       *mnode
	byPath     map[string]*mnode
	renO       map[string]string // ours' followed-or-not renames: old path -> new
	renT       map[string]string
	rootOurs   store.ID
	conflicts  []*Conflict
	paths      int64
	followed   int64
	textMerges int64
	labels     [2]string
}

func newMerger(opts *MergeOptions) (*merger, error) {
	ch, err := (&Options{Chunking: opts.Chunking}).chunker()
	if err != nil {
		return nil, err
	}
	m := &merger{opts: opts, ch: ch, limit: opts.TextLimit, root: &mnode{}, byPath: map[string]*mnode{}}
	if m.limit <= 0 {
		m.limit = DefaultTextLimit
	}
	m.labels = [2]string{opts.OursLabel, opts.TheirsLabel}
	if m.labels[0] == "" {
		m.labels[0] = "ours"
	}
	if m.labels[1] == "" {
		m.labels[1] = "theirs"
	}
	return m, nil
}

func (m *merger) node(p string) *mnode {
	if n := m.byPath[p]; n != nil {
		return n
	}
	n := m.root
	for c := range strings.SplitSeq(p, "/") {
		n = n.kid(c)
	}
	m.byPath[p] = n
	return n
}

// collect diffs each side against the base and puts every changed path,
// with its ancestors, in the tree of mnodes.
func (m *merger) collect(ctx context.Context, base, ours, theirs store.ID) error {
	dO, _, err := Diff(ctx, m.r, base, ours, "", 0)
	if err != nil {
		return fmt.Errorf("diff base and ours: %w", err)
	}
	dT, _, err := Diff(ctx, m.r, base, theirs, "", 0)
	if err != nil {
		return fmt.Errorf("diff base and theirs: %w", err)
	}
	inO := map[string]bool{}
	for i := range dO {
		d := &dO[i]
		n := m.node(d.Path)
		n.b, n.o, n.oTree, n.t, n.tTree, n.inDiff, n.inO = d.Old, d.New, d.New, d.Old, d.Old, true, true
		inO[d.Path] = true
	}
	for i := range dT {
		d := &dT[i]
		n := m.node(d.Path)
		if !inO[d.Path] {
			n.b, n.o, n.oTree = d.Old, d.Old, d.Old
		}
		n.t, n.tTree, n.inDiff, n.inT = d.New, d.New, true, true
	}
	m.paths = int64(len(m.byPath))
	m.rootOurs = ours
	if m.renO, err = m.findRenames(ctx, dO); err != nil {
		return fmt.Errorf("renames of ours: %w", err)
	}
	if m.renT, err = m.findRenames(ctx, dT); err != nil {
		return fmt.Errorf("renames of theirs: %w", err)
	}
	return nil
}

// exactRenames pairs the regular files one side removed with those it
// added, by content: a content removed at one path and added at another is
// a rename. Files of equal content pair by base name first, then in path
// order. Empty files are never renames, and a path whose file became a
// symlink was not removed (its type changed).
func exactRenames(ds []Difference) map[string]string {
	type key struct {
		obj  store.ID
		size int64
	}
	removed, added := map[key][]string{}, map[key][]string{}
	isFile := func(e *store.Entry) bool { return e != nil && e.Type == store.TypeFile && e.Size > 0 }
	for i := range ds {
		d := &ds[i]
		// A file that became a symlink (or device, ...) changed type: it
		// is neither a rename's source nor, the other way, its target.
		gone := func(e *store.Entry) bool { return e == nil || e.Type == store.TypeDir }
		if isFile(d.Old) && gone(d.New) {
			k := key{d.Old.Object, d.Old.Size}
			removed[k] = append(removed[k], d.Path)
		}
		if isFile(d.New) && gone(d.Old) {
			k := key{d.New.Object, d.New.Size}
			added[k] = append(added[k], d.Path)
		}
	}
	out := map[string]string{}
	for k, rs := range removed {
		as := added[k]
		if len(as) == 0 {
			continue
		}
		used := make([]bool, len(as))
		var left []string
		for _, r := range rs {
			j := slices.IndexFunc(as, func(a string) bool { return path.Base(a) == path.Base(r) })
			for j >= 0 && used[j] {
				next := slices.IndexFunc(as[j+1:], func(a string) bool { return path.Base(a) == path.Base(r) })
				if next < 0 {
					j = -1
					break
				}
				j += 1 + next
			}
			if j < 0 {
				left = append(left, r)
				continue
			}
			used[j] = true
			out[r] = as[j]
		}
		j := 0
		for _, r := range left {
			for j < len(as) && used[j] {
				j++
			}
			if j == len(as) {
				break
			}
			used[j] = true
			out[r] = as[j]
		}
	}
	return out
}

// renames follows each side's exact renames into the other side's view of
// the file, or records the conflict they make (see Merge).
func (m *merger) renames() {
	srcs := make([]string, 0, len(m.renT))
	for src := range m.renT {
		srcs = append(srcs, src)
	}
	slices.Sort(srcs)
	for _, src := range srcs {
		m.follow(src, m.renT[src], m.renO, true)
	}
	srcs = srcs[:0]
	for src := range m.renO {
		srcs = append(srcs, src)
	}
	slices.Sort(srcs)
	for _, src := range srcs {
		if _, both := m.renT[src]; both {
			continue // decided above
		}
		m.follow(src, m.renO[src], m.renT, false)
	}
}

// follow handles one side's rename of src to dst; other is the other
// side's renames and theirs says which side renamed.
func (m *merger) follow(src, dst string, other map[string]string, theirs bool) {
	s, d := m.node(src), m.node(dst)
	// The other side's view of src: the file (or symlink, ...) it kept
	// there; a directory put in its place is a deletion of the file.
	kept := leafPart(s.o)
	if !theirs {
		kept = leafPart(s.t)
	}
	switch odst, renamed := other[src]; {
	case renamed && odst == dst:
		// Both renamed it to the same path: merge there against the
		// base's file.
		d.b = s.b
	case renamed:
		// Called for theirs' renames only: ours' of the same file are
		// skipped by renames.
		c := Conflict{Path: src, Kind: ConflictRenameRename,
			Base: ConflictSide{src, s.b}, Ours: ConflictSide{odst, m.node(odst).o}, Theirs: ConflictSide{dst, d.t}}
		m.node(odst).conflict, d.conflict = &c, &c
		m.conflicts = append(m.conflicts, &c)
	case kept == nil || kept.Type != store.TypeFile:
		// The other side deleted what this one renamed, or made it
		// something else (a symlink, ...): the file is gone there, and
		// what took its place stays at src as that side's.
		c := Conflict{Path: dst, Kind: ConflictRenameDelete, Base: ConflictSide{src, s.b}}
		if theirs {
			c.Ours, c.Theirs = ConflictSide{src, kept}, ConflictSide{dst, d.t}
			s.t = s.b
		} else {
			c.Ours, c.Theirs = ConflictSide{dst, d.o}, ConflictSide{src, kept}
			s.o = s.b
		}
		d.conflict = &c
		m.conflicts = append(m.conflicts, &c)
	default:
		// The other side kept the file at src, changed or not: its file
		// goes to dst and is merged there against the base's, and src is
		// merged as if that side had not touched it (this side may have
		// put something new there). When the other side has something at
		// dst too, the two meet there (an add/add conflict), and a change
		// it made to src goes with the file: a tree with markers keeps it
		// beside the conflict, at "dst~side".
		m.followed++
		collide := (theirs && d.o != nil) || (!theirs && d.t != nil)
		switch {
		case theirs && !collide:
			d.b, d.o, s.o = s.b, kept, s.b
		case !theirs && !collide:
			d.b, d.t, s.t = s.b, kept, s.b
		default:
			if !sameEntry(kept, s.b) {
				d.keep, d.keepSide = kept, 0
				if !theirs {
					d.keepSide = 1
				}
			}
			if theirs {
				s.o = s.b
			} else {
				s.t = s.b
			}
		}
	}
}

// sortedConflicts are the conflicts in path order (none when Prefer
// settled them).
func (m *merger) sortedConflicts() []Conflict {
	if m.opts.Prefer != textmerge.PreferNone {
		return nil
	}
	out := make([]Conflict, 0, len(m.conflicts))
	for _, c := range m.conflicts {
		out = append(out, *c)
	}
	slices.SortStableFunc(out, func(a, b Conflict) int { return ComparePaths(a.Path, b.Path) })
	return out
}
