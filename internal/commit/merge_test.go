package commit

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"layerfs.dev/layerfs/internal/store"
	"layerfs.dev/layerfs/internal/textmerge"
)

// ent describes one entry of a test tree: a file's content, a symlink's
// target ("->target"), or a directory (a path that others lie below, or
// "dir" for an empty one); mode 0 is 0644 (0755 for directories).
type ent struct {
	data  string
	mode  uint32
	mtime int64
	uid   uint32
	link  uint64
	xattr string // "name=value"
}

// treeOf stores a tree of the paths in spec (intermediate directories are
// made with mode 0755, mtime 1).
func treeOf(t *testing.T, w Writer, ch *Chunker, spec map[string]ent) store.ID {
	t.Helper()
	var build func(dir string) store.ID
	build = func(dir string) store.ID {
		names := map[string]bool{}
		for p := range spec {
			if dir == "" || isAncestor(dir, p) {
				rel := p
				if dir != "" {
					rel = p[len(dir)+1:]
				}
				names[strings.SplitN(rel, "/", 2)[0]] = true
			}
		}
		tr := &store.Tree{}
		for _, name := range sortedSet(names) {
			p := join(dir, name)
			e, ok := spec[p]
			x := store.Entry{Name: name, MtimeNs: max(e.mtime, 1), UID: e.uid, Link: e.link}
			if e.xattr != "" {
				k, v, _ := strings.Cut(e.xattr, "=")
				x.Xattrs = []store.Xattr{{Name: k, Value: []byte(v)}}
			}
			switch {
			case !ok || e.data == "dir":
				x.Type, x.Mode, x.ObjectKind, x.Object = store.TypeDir, 0o755, store.KindTree, build(p)
				if e.mode != 0 {
					x.Mode = e.mode
				}
			case strings.HasPrefix(e.data, "->"):
				x.Type, x.Mode, x.Target, x.Size = store.TypeSymlink, 0o777, e.data[2:], int64(len(e.data)-2)
			default:
				obj, kind, err := storeBytes(w, ch, []byte(e.data))
				require.NoError(t, err)
				x.Type, x.Mode, x.Object, x.ObjectKind, x.Size = store.TypeFile, 0o644, obj, kind, int64(len(e.data))
				if e.mode != 0 {
					x.Mode = e.mode
				}
			}
			tr.Entries = append(tr.Entries, x)
		}
		id, err := w.PutTree(tr)
		require.NoError(t, err)
		return id
	}
	return build("")
}

func sortedSet(m map[string]bool) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	for i := 1; i < len(out); i++ {
		for j := i; j > 0 && out[j] < out[j-1]; j-- {
			out[j], out[j-1] = out[j-1], out[j]
		}
	}
	return out
}

// flat lists a tree as path -> entry.
func flat(t *testing.T, r Reader, id store.ID) map[string]store.Entry {
	t.Helper()
	out := map[string]store.Entry{}
	var walk func(id store.ID, dir string)
	walk = func(id store.ID, dir string) {
		if id.IsZero() {
			return
		}
		tr, err := r.Tree(t.Context(), id)
		require.NoError(t, err)
		for _, e := range tr.Entries {
			p := join(dir, e.Name)
			out[p] = e
			if e.Type == store.TypeDir {
				walk(e.Object, p)
			}
		}
	}
	walk(id, "")
	return out
}

type mergeEnv struct {
	t  *testing.T
	db *store.DB
	p  *pending
	ch *Chunker
}

func newMergeEnv(t *testing.T) *mergeEnv {
	db := newDB(t)
	b, err := db.NewBatch(t.Context())
	require.NoError(t, err)
	t.Cleanup(b.Abort)
	ch, err := NewChunker(DefaultParams)
	require.NoError(t, err)
	return &mergeEnv{t: t, db: db, p: newPending(b, db), ch: ch}
}

func (e *mergeEnv) merge(base, ours, theirs map[string]ent, opts *MergeOptions) (MergeResult, map[string]store.Entry) {
	e.t.Helper()
	res, err := Merge(e.t.Context(), e.p, e.p, treeOf(e.t, e.p, e.ch, base), treeOf(e.t, e.p, e.ch, ours), treeOf(e.t, e.p, e.ch, theirs), opts)
	require.NoError(e.t, err)
	if res.Tree.IsZero() {
		return res, nil
	}
	return res, flat(e.t, e.p, res.Tree)
}

func (e *mergeEnv) content(x store.Entry) string {
	b, err := readContent(e.t.Context(), e.p, &x)
	require.NoError(e.t, err)
	return string(b)
}

func TestMergeMetadata(t *testing.T) {
	e := newMergeEnv(t)
	base := map[string]ent{"a": {data: "1\n2\n3\n4\n5\n", mtime: 10}, "d/x": {data: "x"}, "s": {data: "->t"}}
	ours := map[string]ent{"a": {data: "1\n2\n3\n4\n5\n", mtime: 10, mode: 0o755}, "d/x": {data: "x", uid: 7}, "s": {data: "->t"}}
	theirs := map[string]ent{"a": {data: "1\n2\n3\n4\nfive\n", mtime: 20}, "d/x": {data: "x", xattr: "user.k=v"}, "s": {data: "->t"}}
	res, got := e.merge(base, ours, theirs, nil)
	require.True(t, res.Clean, "%+v", res.Conflicts)
	require.Equal(t, uint32(0o755), got["a"].Mode, "ours' chmod +x beside theirs' edit")
	require.Equal(t, "1\n2\n3\n4\nfive\n", e.content(got["a"]))
	require.EqualValues(t, 20, got["a"].MtimeNs, "the changing side's time")
	require.EqualValues(t, 7, got["d/x"].UID, "ours' owner")
	require.Equal(t, []store.Xattr{{Name: "user.k", Value: []byte("v")}}, got["d/x"].Xattrs, "theirs' xattr")

	// Both changed the owner differently: a metadata conflict.
	res, _ = e.merge(base, ours, map[string]ent{"a": base["a"], "d/x": {data: "x", uid: 8}, "s": base["s"]}, nil)
	require.False(t, res.Clean)
	require.Equal(t, ConflictMetadata, res.Conflicts[0].Kind)
	require.Equal(t, "d/x", res.Conflicts[0].Path)
}

// TestMergeDirectoryMetadataKeepsOursBelow: theirs changes a directory's
// mode while ours changes a file in it; the merged directory has theirs'
// mode and ours' file.
func TestMergeDirectoryMetadataKeepsOursBelow(t *testing.T) {
	e := newMergeEnv(t)
	base := map[string]ent{"d": {data: "dir"}, "d/x": {data: "x"}, "d/y": {data: "y"}}
	ours := map[string]ent{"d": {data: "dir"}, "d/x": {data: "x2"}, "d/y": {data: "y"}}
	theirs := map[string]ent{"d": {data: "dir", mode: 0o700}, "d/x": {data: "x"}, "d/y": {data: "y"}, "d/z": {data: "z"}}
	res, got := e.merge(base, ours, theirs, nil)
	require.True(t, res.Clean, "%+v", res.Conflicts)
	require.Equal(t, uint32(0o700), got["d"].Mode)
	require.Equal(t, "x2", e.content(got["d/x"]))
	require.Equal(t, "z", e.content(got["d/z"]))
}

func TestMergeConflictKinds(t *testing.T) {
	e := newMergeEnv(t)
	base := map[string]ent{"text": {data: "a\nb\nc\n"}, "bin": {data: "\x00b"}, "gone": {data: "g\n"}, "link": {data: "->x"}, "dir/f": {data: "f"}, "ren": {data: "renamed content\n"}}
	ours := map[string]ent{"text": {data: "a\nB\nc\n"}, "bin": {data: "\x00o"}, "gone": {data: "g2\n"}, "link": {data: "->y"}, "dir": {data: "now a file"},
		"ren1": {data: "renamed content\n"}, "new": {data: "ours\n"}}
	theirs := map[string]ent{"text": {data: "a\nβ\nc\n"}, "bin": {data: "\x00t"}, "link": {data: "->z"}, "dir/f": {data: "f2"}, "ren2": {data: "renamed content\n"}, "new": {data: "theirs\n"}}
	res, _ := e.merge(base, ours, theirs, nil)
	require.False(t, res.Clean)
	got := map[string]ConflictKind{}
	for _, c := range res.Conflicts {
		got[c.Path] = c.Kind
	}
	require.Equal(t, map[string]ConflictKind{
		"text": ConflictContent, "bin": ConflictBinary, "gone": ConflictModifyDelete, "link": ConflictSymlink,
		"dir": ConflictFileDirectory, "dir/f": ConflictModifyDelete, "ren": ConflictRenameRename, "new": ConflictAddAdd,
	}, got)
	for _, c := range res.Conflicts {
		if c.Path == "ren" {
			require.Equal(t, []string{"ren", "ren1", "ren2"}, c.Paths())
		}
		if c.Path == "bin" {
			require.NotNil(t, c.Ours.Entry)
			require.NotEqual(t, c.Ours.Entry.Object, c.Theirs.Entry.Object, "each side's object")
		}
	}

	// With markers: the text holds them, the file of the file/directory
	// conflict moves aside, ours' binary stays.
	res, tree := e.merge(base, ours, theirs, &MergeOptions{Markers: true, OursLabel: "ws", TheirsLabel: "main"})
	require.False(t, res.Clean)
	require.Equal(t, "a\n<<<<<<< ws\nB\n=======\nβ\n>>>>>>> main\nc\n", e.content(tree["text"]))
	require.Equal(t, "\x00o", e.content(tree["bin"]))
	require.Equal(t, store.TypeDir, tree["dir"].Type)
	require.Equal(t, "now a file", e.content(tree["dir~ws"]))
	require.Equal(t, "f2", e.content(tree["dir/f"]), "theirs' change of a file ours deleted stays")
	require.Contains(t, tree, "ren1")
	require.Contains(t, tree, "ren2")

	// Preferring a side settles everything.
	for _, pref := range []textmerge.Prefer{textmerge.PreferOurs, textmerge.PreferTheirs} {
		res, tree := e.merge(base, ours, theirs, &MergeOptions{Prefer: pref})
		require.True(t, res.Clean)
		require.Empty(t, res.Conflicts)
		if pref == textmerge.PreferOurs {
			require.Equal(t, "a\nB\nc\n", e.content(tree["text"]))
			require.Equal(t, store.TypeFile, tree["dir"].Type)
			require.Contains(t, tree, "ren1")
			require.NotContains(t, tree, "ren2")
			require.Equal(t, "y", tree["link"].Target)
		} else {
			require.Equal(t, "a\nβ\nc\n", e.content(tree["text"]))
			require.Equal(t, store.TypeDir, tree["dir"].Type)
			require.NotContains(t, tree, "ren1")
			require.Contains(t, tree, "ren2")
			require.NotContains(t, tree, "gone")
		}
	}
}

func TestMergeFollowsRenames(t *testing.T) {
	e := newMergeEnv(t)
	base := map[string]ent{"old/name": {data: "1\n2\n3\n4\n"}, "keep": {data: "k"}}
	ours := map[string]ent{"new/place": {data: "1\n2\n3\n4\n"}, "keep": {data: "k"}}
	theirs := map[string]ent{"old/name": {data: "1\n2\n3\nfour\n", mode: 0o755}, "keep": {data: "k"}}
	res, got := e.merge(base, ours, theirs, nil)
	require.True(t, res.Clean, "%+v", res.Conflicts)
	require.EqualValues(t, 1, res.Stats.Renames)
	require.NotContains(t, got, "old/name")
	require.NotContains(t, got, "old")
	require.Equal(t, "1\n2\n3\nfour\n", e.content(got["new/place"]), "theirs' edit lands at ours' new path")
	require.Equal(t, uint32(0o755), got["new/place"].Mode)
	// The other way round gives the same tree.
	res2, _ := e.merge(base, theirs, ours, nil)
	require.Equal(t, res.Tree, res2.Tree, "merge is symmetric here")

	// A rename of a file the other side deleted conflicts.
	res, _ = e.merge(base, ours, map[string]ent{"keep": {data: "k"}}, nil)
	require.False(t, res.Clean)
	require.Equal(t, ConflictRenameDelete, res.Conflicts[0].Kind)
	require.Equal(t, "new/place", res.Conflicts[0].Path)
}

func TestMergeHardLinks(t *testing.T) {
	e := newMergeEnv(t)
	base := map[string]ent{"a": {data: "1\n2\n3\n", link: 5}, "b": {data: "1\n2\n3\n", link: 5}}
	ours := map[string]ent{"a": {data: "one\n2\n3\n", link: 6}, "b": {data: "one\n2\n3\n", link: 6}}
	theirs := map[string]ent{"a": {data: "1\n2\nthree\n", link: 7}, "b": {data: "1\n2\nthree\n", link: 7}}
	res, got := e.merge(base, ours, theirs, nil)
	require.True(t, res.Clean, "%+v", res.Conflicts)
	require.Equal(t, "one\n2\nthree\n", e.content(got["a"]))
	require.NotZero(t, got["a"].Link)
	require.Equal(t, got["a"].Link, got["b"].Link, "the group stays one inode")
	require.Equal(t, got["a"].Object, got["b"].Object)
	// One side only changes the group: taken as it is.
	_, got = e.merge(base, ours, base, nil)
	require.EqualValues(t, 6, got["a"].Link)
	require.EqualValues(t, 6, got["b"].Link)
}

func TestMergeIsDeterministic(t *testing.T) {
	e := newMergeEnv(t)
	base := map[string]ent{"x": {data: "1\n2\n3\n"}, "d/y": {data: "y"}, "f": {data: "f"}}
	ours := map[string]ent{"x": {data: "0\n1\n2\n3\n"}, "d/y": {data: "y"}, "d/z": {data: "z"}, "g": {data: "f"}}
	theirs := map[string]ent{"x": {data: "1\n2\n3\n4\n"}, "d/y": {data: "Y"}, "f": {data: "f", mode: 0o600}}
	var trees []store.ID
	for range 5 {
		res, got := e.merge(base, ours, theirs, nil)
		require.True(t, res.Clean, "%+v", res.Conflicts)
		require.Equal(t, uint32(0o600), got["g"].Mode, "theirs' chmod follows ours' rename")
		trees = append(trees, res.Tree)
	}
	for _, id := range trees {
		require.Equal(t, trees[0], id)
	}
}

// treeCounter counts the trees read through it.
type treeCounter struct {
	Reader
	trees int
}

func (c *treeCounter) Tree(ctx context.Context, id store.ID) (*store.Tree, error) {
	c.trees++
	return c.Reader.Tree(ctx, id)
}

// TestMergeVisitsOnlyWhatChanged: a merge of two changed files in a tree of
// 4,000 files in 400 directories reads the trees on the paths to the
// changed files, not the tree.
func TestMergeVisitsOnlyWhatChanged(t *testing.T) {
	e := newMergeEnv(t)
	base := map[string]ent{}
	for d := range 400 {
		for f := range 10 {
			base[fmt.Sprintf("d%03d/f%d", d, f)] = ent{data: fmt.Sprint(d, f)}
		}
	}
	ours, theirs := map[string]ent{}, map[string]ent{}
	for k, v := range base {
		ours[k], theirs[k] = v, v
	}
	ours["d007/f1"] = ent{data: "ours"}
	theirs["d300/f2"] = ent{data: "theirs"}
	b, o, th := treeOf(t, e.p, e.ch, base), treeOf(t, e.p, e.ch, ours), treeOf(t, e.p, e.ch, theirs)
	r := &treeCounter{Reader: e.p}
	res, err := Merge(t.Context(), e.p, r, b, o, th, nil)
	require.NoError(t, err)
	require.True(t, res.Clean)
	require.LessOrEqual(t, r.trees, 12, "trees read (root and one directory per changed file, per side)")
	got := flat(t, e.p, res.Tree)
	require.Equal(t, "ours", e.content(got["d007/f1"]))
	require.Equal(t, "theirs", e.content(got["d300/f2"]))
	require.Len(t, got, 4400)
}

// TestMergeTimeOnly: a side that changed only an entry's time (a touch)
// takes the other side's change, a delete, a new content or a new type,
// with the later time: never a conflict.
func TestMergeTimeOnly(t *testing.T) {
	e := newMergeEnv(t)
	base := map[string]ent{"rm": {data: "x\n", mtime: 10}, "edit": {data: "1\n2\n", mtime: 10}, "retype": {data: "f\n", mtime: 10},
		"late": {data: "1\n", mtime: 10}, "both": {data: "b\n", mtime: 10}, "d/f": {data: "in d\n", mtime: 10}}
	touched := map[string]ent{"rm": {data: "x\n", mtime: 30}, "edit": {data: "1\n2\n", mtime: 30}, "retype": {data: "f\n", mtime: 30},
		"late": {data: "1\n", mtime: 10}, "both": {data: "b\n", mtime: 30}, "d/f": {data: "in d\n", mtime: 30}}
	changed := map[string]ent{"edit": {data: "1\ntwo\n", mtime: 20}, "retype": {data: "->f", mtime: 20},
		"late": {data: "one\n", mtime: 20}, "both": {data: "b\n", mtime: 40}}
	for _, sides := range [][2]map[string]ent{{touched, changed}, {changed, touched}} {
		res, got := e.merge(base, sides[0], sides[1], nil)
		require.True(t, res.Clean, "%+v", res.Conflicts)
		for _, p := range []string{"rm", "d/f", "d"} {
			_, ok := got[p]
			require.False(t, ok, "%s: deleted on one side, touched on the other", p)
		}
		require.Equal(t, "1\ntwo\n", e.content(got["edit"]))
		require.EqualValues(t, 30, got["edit"].MtimeNs, "the later time")
		require.Equal(t, store.TypeSymlink, got["retype"].Type)
		require.EqualValues(t, 30, got["retype"].MtimeNs)
		require.Equal(t, "one\n", e.content(got["late"]))
		require.EqualValues(t, 20, got["late"].MtimeNs)
		require.EqualValues(t, 40, got["both"].MtimeNs, "both touched: the later time")
	}
}

// TestMergeSimilarRename: theirs renames a file and edits a line of it,
// ours edits another line at the old path; both edits land at the new
// path, as git merges them. With renames off the rename is a delete and
// an add, and ours' edit of what theirs deleted conflicts.
func TestMergeSimilarRename(t *testing.T) {
	e := newMergeEnv(t)
	base := map[string]ent{"old.go": {data: "1\n2\n3\n4\n5\n6\n7\n8\n"}, "other": {data: "o\n"}}
	ours := map[string]ent{"old.go": {data: "one\n2\n3\n4\n5\n6\n7\n8\n"}, "other": {data: "o\n"}}
	theirs := map[string]ent{"new.go": {data: "1\n2\n3\n4\n5\n6\n7\neight\n"}, "other": {data: "o\n"}}
	res, got := e.merge(base, ours, theirs, nil)
	require.True(t, res.Clean, "%+v", res.Conflicts)
	require.EqualValues(t, 1, res.Stats.Renames)
	require.NotContains(t, got, "old.go")
	require.Equal(t, "one\n2\n3\n4\n5\n6\n7\neight\n", e.content(got["new.go"]))

	for _, opts := range []*MergeOptions{{NoRenames: true}, {RenameThreshold: 100}, {RenameThreshold: 90}} {
		res, _ = e.merge(base, ours, theirs, opts)
		require.False(t, res.Clean, "%+v", opts)
		require.Equal(t, ConflictModifyDelete, res.Conflicts[0].Kind)
		require.Equal(t, "old.go", res.Conflicts[0].Path)
	}
	// Exact renames go with NoRenames too.
	theirs = map[string]ent{"new.go": base["old.go"], "other": {data: "o\n"}}
	res, _ = e.merge(base, ours, theirs, &MergeOptions{NoRenames: true})
	require.False(t, res.Clean)
	res, got = e.merge(base, ours, theirs, &MergeOptions{RenameThreshold: 100})
	require.True(t, res.Clean)
	require.Equal(t, "one\n2\n3\n4\n5\n6\n7\n8\n", e.content(got["new.go"]))
}
