package commit

import (
	"bufio"
	"bytes"
	"crypto/sha1"
	"fmt"
	"maps"
	"math/rand/v2"
	"os"
	"os/exec"
	"path"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"layerfs.dev/layerfs/internal/store"
	"layerfs.dev/layerfs/internal/testenv"
)

// TestMergeMatchesGit is the differential test of Merge: random trees and
// random edits on two sides (line edits, adds, deletes, exact renames, mode
// changes, symlinks, type changes, directories replaced by files and files
// by directories) are built as LayerFS trees and as git commits (one
// git fast-import), and merged by Merge and by git merge-tree --write-tree
// (one process for all cases). Wherever git merges cleanly, Merge must be
// clean with the same tree (compared by git tree id: the same paths,
// bytes and modes; git keeps no empty directories, so they are left out);
// wherever git reports conflicts, Merge must report conflicts on the same
// paths (git's "path~branch" names for files it moved aside count as path).
//
// The inputs stay where two correct merges agree: every content is unique
// (git pairs renames by similarity, Merge only exact ones), and directory
// rename detection is off in git (Merge does not detect renamed
// directories; see Merge). LAYERFS_MERGE_SEED repeats a run,
// LAYERFS_MERGE_CASES sets its size.
func TestMergeMatchesGit(t *testing.T) {
	git, err := exec.LookPath("git")
	if err != nil {
		testenv.Skip(t, "no git to compare with")
	}
	if out, err := exec.Command(git, "merge-tree", "-h").CombinedOutput(); !bytes.Contains(out, []byte("--write-tree")) {
		testenv.Skip(t, fmt.Sprintf("git merge-tree has no --write-tree (git 2.38 or later needed): %v", err))
	}
	seed := uint64(38)
	switch s := os.Getenv("LAYERFS_MERGE_SEED"); s {
	case "random":
		seed = rand.Uint64()
	case "":
	default:
		fmt.Sscan(s, &seed)
	}
	cases := 3000
	if s := os.Getenv("LAYERFS_MERGE_CASES"); s != "" {
		fmt.Sscan(s, &cases)
	}
	if testing.Short() {
		cases = 300
	}
	t.Logf("seed %d, %d cases (LAYERFS_MERGE_SEED, a number or random, and LAYERFS_MERGE_CASES repeat it)", seed, cases)
	r := rand.New(rand.NewPCG(seed, 11))
	var all []*mergeCase
	for i := range cases {
		all = append(all, newMergeCase(r, i))
	}

	// git: one fast-import of every case, one merge-tree of them all.
	repo := t.TempDir()
	run := gitIn(t, git, repo)
	run(nil, "init", "-q", "-b", "main")
	var stream bytes.Buffer
	for _, c := range all {
		c.fastImport(&stream)
	}
	run(stream.Bytes(), "fast-import", "--quiet")
	var lines bytes.Buffer
	for _, c := range all {
		fmt.Fprintf(&lines, "c%d-ours c%d-theirs\n", c.n, c.n)
	}
	gitOut := parseMergeTree(t, run(lines.Bytes(), "-c", "merge.directoryRenames=false", "merge-tree", "--write-tree", "--stdin", "-z"))
	require.Len(t, gitOut, len(all), "merge-tree results")
	gitRen := gitRenames(t, run, all)
	gitRenCount := 0
	for _, sides := range gitRen {
		gitRenCount += len(sides[0]) + len(sides[1])
	}

	// LayerFS.
	ctx := t.Context()
	db := newDB(t)
	b, err := db.NewBatch(ctx)
	require.NoError(t, err)
	defer b.Abort()
	ch, err := NewChunker(DefaultParams)
	require.NoError(t, err)
	var clean, conflicted, renames, dropped, bySimilarity int
	kinds := map[ConflictKind]int{}
	for i, c := range all {
		p := newPending(b, db)
		trees := [3]store.ID{}
		for j, files := range []map[string]*fileSpec{c.base, c.ours, c.theirs} {
			trees[j] = putFiles(t, p, ch, files, "")
		}
		res, err := Merge(ctx, p, p, trees[0], trees[1], trees[2], &MergeOptions{OursLabel: fmt.Sprintf("c%d-ours", c.n), TheirsLabel: fmt.Sprintf("c%d-theirs", c.n)})
		require.NoError(t, err, "case %d (seed %d)", i, seed)
		g := gitOut[i]
		renames += int(res.Stats.Renames)
		if !sameRenames(t, p, trees, gitRen[i]) {
			bySimilarity++
			continue
		}
		if kept, drops := gitDropsRename(c, res.Conflicts); drops > 0 && slices.Equal(conflictPaths(kept), g.paths) {
			dropped++
			continue
		}
		if g.clean {
			clean++
			if !res.Clean {
				t.Fatalf("case %d (seed %d): git merges cleanly, Merge finds %+v\n%+v\n%s\ngit's tree:\n%s", i, seed, conflictPaths(res.Conflicts), res.Conflicts, c, run(nil, "ls-tree", "-r", g.tree))
			}
			got := gitTreeID(t, p, res.Tree)
			if got != g.tree {
				want := run(nil, "ls-tree", "-r", g.tree)
				t.Fatalf("case %d (seed %d): merged tree differs from git's\n%s\ngit's tree:\n%s\nLayerFS's tree:\n%s", i, seed, c, want, listTree(t, p, res.Tree))
			}
		} else {
			conflicted++
			if res.Clean {
				t.Fatalf("case %d (seed %d): git finds conflicts at %v, Merge merges cleanly\n%s\nLayerFS's tree:\n%s", i, seed, g.paths, c, listTree(t, p, res.Tree))
			}
			if got := conflictPaths(res.Conflicts); !slices.Equal(got, g.paths) {
				t.Fatalf("case %d (seed %d): conflicts at %v, git's at %v\nconflicts: %+v\ngit: %s\n%s\ngit's tree:\n%s", i, seed, got, g.paths, res.Conflicts, g.messages, c,
					run(nil, "ls-tree", "-r", g.tree))
			}
			for _, cf := range res.Conflicts {
				kinds[cf.Kind]++
			}
		}
		if i%200 == 199 {
			require.NoError(t, b.Flush(ctx))
		}
	}
	t.Logf("%d cases: %d clean, %d conflicted, %d renames followed (git finds %d), %d where git drops a rename (see gitDropsRename), %d where git pairs other renames (see gitRenames); conflicts by kind %v",
		len(all), clean, conflicted, renames, gitRenCount, dropped, bySimilarity, kinds)
}

// gitIn runs git in repo, with stdin, and returns its output; git's own
// configuration and the user's are left out.
func gitIn(t *testing.T, git, repo string) func(stdin []byte, args ...string) []byte {
	return func(stdin []byte, args ...string) []byte {
		cmd := exec.Command(git, args...)
		cmd.Dir = repo
		cmd.Stdin = bytes.NewReader(stdin)
		cmd.Env = append(os.Environ(), "GIT_CONFIG_NOSYSTEM=1", "HOME="+repo)
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		require.NoError(t, err, "git %v: %s", args, stderr.Bytes())
		return out
	}
}

// gitRenames are the renames git finds on each side of each case (diff-tree
// -M, its 50% threshold): old path -> new. Unique contents do not rule out
// that git pairs files Merge does not: git scores similarity by a hash of
// each line (of each 64 bytes of a binary) into a small table, so two
// unrelated lines of a short file can collide and reach the threshold.
// Such a case is outside what the two can agree on (see sameRenames).
// run runs git in the repository of the cases.
func gitRenames(t *testing.T, run func(stdin []byte, args ...string) []byte, all []*mergeCase) [][2]map[string]string {
	t.Helper()
	trees := map[string]string{}
	for _, l := range strings.Split(strings.TrimSpace(string(run(nil, "for-each-ref", "--format=%(refname:short) %(tree)", "refs/heads/"))), "\n") {
		ref, tree, _ := strings.Cut(l, " ")
		trees[ref] = tree
	}
	var pairs bytes.Buffer
	type at struct{ n, side int }
	header := map[string][]at{}
	out := make([][2]map[string]string, len(all))
	for i, c := range all {
		out[i] = [2]map[string]string{{}, {}}
		for side, name := range []string{"ours", "theirs"} {
			line := trees[fmt.Sprintf("c%d-base", c.n)] + " " + trees[fmt.Sprintf("c%d-%s", c.n, name)]
			header[line] = append(header[line], at{i, side})
			pairs.WriteString(line + "\n")
		}
	}
	// diff-tree --stdin echoes each pair of trees, then their changes.
	var cur []at
	for _, l := range strings.Split(string(run(pairs.Bytes(), "diff-tree", "--stdin", "-r", "-M", "--name-status")), "\n") {
		if h, ok := header[l]; ok {
			cur = h[:1]
			header[l] = h[1:]
		} else if f := strings.Split(l, "\t"); strings.HasPrefix(l, "R") && len(f) == 3 && len(cur) == 1 {
			out[cur[0].n][cur[0].side][f[1]] = f[2]
		}
	}
	return out
}

// sameRenames reports whether Merge finds on each side of the trees (base,
// ours, theirs) the renames git found (want).
func sameRenames(t *testing.T, r Reader, trees [3]store.ID, want [2]map[string]string) bool {
	m, err := newMerger(&MergeOptions{})
	require.NoError(t, err)
	m.r = r
	for side := range 2 {
		ds, _, err := Diff(t.Context(), r, trees[0], trees[side+1], "", 0)
		require.NoError(t, err)
		got, err := m.findRenames(t.Context(), ds)
		require.NoError(t, err)
		if !maps.Equal(got, want[side]) {
			return false
		}
	}
	return true
}

// gitDropsRename finds the one place the merges knowingly differ: one side
// renames a file onto a path where the other side has something (its own
// add, or its own rename), and the other side turned the file into a
// symlink. git then keeps the other side's entry at the path and drops
// the renamed file without a word; Merge reports an add/add conflict
// there. It returns the conflicts but those, and how many it left out.
func gitDropsRename(c *mergeCase, cs []Conflict) (kept []Conflict, drops int) {
	for _, cf := range cs {
		if cf.Kind == ConflictAddAdd && renamedOntoSymlinked(c, cf.Path) {
			drops++
			continue
		}
		kept = append(kept, cf)
	}
	return kept, drops
}

func renamedOntoSymlinked(c *mergeCase, p string) bool {
	for _, sides := range [][2]map[string]*fileSpec{{c.ours, c.theirs}, {c.theirs, c.ours}} {
		renamer, other := sides[0], sides[1]
		dst := renamer[p]
		if dst == nil || c.base[p] != nil {
			continue
		}
		for src, bf := range c.base {
			if !bf.symlink && bytes.Equal(bf.data, dst.data) && renamer[src] == nil && other[src] != nil && other[src].symlink {
				return true
			}
		}
	}
	return false
}

// conflictPaths is the sorted set of the paths the conflicts involve.
func conflictPaths(cs []Conflict) []string {
	var out []string
	for i := range cs {
		for _, p := range cs[i].Paths() {
			if !slices.Contains(out, p) {
				out = append(out, p)
			}
		}
	}
	slices.Sort(out)
	return out
}

// fileSpec is one non-directory entry of a case: a file's content and
// mode, or a symlink's target.
type fileSpec struct {
	symlink bool
	data    []byte
	mode    uint32 // 0o644 or 0o755 for files
	mtime   int64  // 0: the time every entry has; a touch sets another
}

// mergeCase is one random merge: a base and two sides, as paths.
type mergeCase struct {
	n                  int
	base, ours, theirs map[string]*fileSpec
	edits              [2][]string
	touched            map[string]bool // paths whose content the side being edited changed, or renamed to
	code               bool            // texts repeat lines, as code does (see line)
	r                  *rand.Rand
	uniq               int
}

func (c *mergeCase) String() string {
	var b strings.Builder
	show := func(name string, fs map[string]*fileSpec) {
		fmt.Fprintf(&b, "%s:\n", name)
		for _, p := range sortedPaths(fs) {
			f := fs[p]
			switch {
			case f.symlink:
				fmt.Fprintf(&b, "  %s -> %s\n", p, f.data)
			default:
				fmt.Fprintf(&b, "  %s %o %q\n", p, f.mode, f.data)
			}
		}
	}
	show("base", c.base)
	fmt.Fprintf(&b, "ours' edits %v, theirs' %v\n", c.edits[0], c.edits[1])
	show("ours", c.ours)
	show("theirs", c.theirs)
	return b.String()
}

// touchedFile reports whether f is at a path the side edited or renamed to.
func (c *mergeCase) touchedFile(fs map[string]*fileSpec, f *fileSpec) bool {
	for p := range c.touched {
		if fs[p] == f {
			return true
		}
	}
	return false
}

func sortedPaths(fs map[string]*fileSpec) []string {
	out := make([]string, 0, len(fs))
	for p := range fs {
		out = append(out, p)
	}
	slices.Sort(out)
	return out
}

func newMergeCase(r *rand.Rand, n int) *mergeCase {
	c := &mergeCase{n: n, r: r, base: map[string]*fileSpec{}, code: r.IntN(2) == 0}
	for range 3 + r.IntN(10) {
		if p, ok := c.freePath(c.base); ok {
			c.base[p] = c.content(r.IntN(10) < 7, r.IntN(10) == 0)
		}
	}
	c.ours, c.theirs = clone(c.base), clone(c.base)
	if r.IntN(4) == 0 {
		// A cherry-pick: the same patch on both sides, before their own
		// edits (which may edit the same file beside it).
		if p, ok := c.pick(c.base, isText); ok {
			patched := c.editLines(c.base[p].data)
			c.ours[p].data, c.theirs[p].data = patched, slices.Clone(patched)
			c.edits[0], c.edits[1] = []string{"cherry-pick " + p}, []string{"cherry-pick " + p}
		}
	}
	for side, fs := range []map[string]*fileSpec{c.ours, c.theirs} {
		c.touched = map[string]bool{}
		for range 1 + r.IntN(4) {
			c.edits[side] = append(c.edits[side], c.edit(fs))
		}
	}
	return c
}

func clone(fs map[string]*fileSpec) map[string]*fileSpec {
	out := map[string]*fileSpec{}
	for p, f := range fs {
		g := *f
		out[p] = &g
	}
	return out
}

// codeLines are lines code repeats: a case with code set draws a quarter
// of its text lines from them, so that changes can sit at several places
// and the line diffs' choices count (git merge-tree's is the histogram
// diff).
var codeLines = []string{"}\n", "\n", "\treturn err\n", "\t}\n", "\treturn nil\n"}

// line is a line of text: unique, or in a case like code, now and then one
// of codeLines.
func (c *mergeCase) line() string {
	if c.code && c.r.IntN(4) == 0 {
		return codeLines[c.r.IntN(len(codeLines))]
	}
	return c.token() + "\n"
}

// token is unique in the whole run.
func (c *mergeCase) token() string {
	c.uniq++
	return fmt.Sprintf("c%d-%d-%x", c.n, c.uniq, c.r.Uint32())
}

// content is a new text (lines of unique tokens), binary or symlink.
func (c *mergeCase) content(text, symlink bool) *fileSpec {
	switch {
	case symlink:
		return &fileSpec{symlink: true, data: []byte("target-" + c.token())}
	case text:
		var b []byte
		for range 1 + c.r.IntN(8) {
			b = append(b, c.line()...)
		}
		return &fileSpec{data: b, mode: 0o644}
	}
	return &fileSpec{data: []byte("bin\x00" + c.token()), mode: 0o644}
}

var (
	mergeDirs  = []string{"d0", "d1", "d2"}
	mergeFiles = []string{"f0", "f1", "f2", "f3", "f4"}
)

// freePath picks a path that can be added to fs: no file is an ancestor
// of it, and it is no ancestor of a file.
func (c *mergeCase) freePath(fs map[string]*fileSpec) (string, bool) {
	for range 20 {
		var parts []string
		for range c.r.IntN(3) {
			parts = append(parts, mergeDirs[c.r.IntN(len(mergeDirs))])
		}
		parts = append(parts, mergeFiles[c.r.IntN(len(mergeFiles))])
		if p := strings.Join(parts, "/"); c.fits(fs, p) {
			return p, true
		}
	}
	return "", false
}

func (c *mergeCase) fits(fs map[string]*fileSpec, p string) bool {
	if _, ok := fs[p]; ok {
		return false
	}
	for q := range fs {
		if isAncestor(q, p) || isAncestor(p, q) {
			return false
		}
	}
	return true
}

func (c *mergeCase) pick(fs map[string]*fileSpec, ok func(*fileSpec) bool) (string, bool) {
	var ps []string
	for _, p := range sortedPaths(fs) {
		if ok(fs[p]) {
			ps = append(ps, p)
		}
	}
	if len(ps) == 0 {
		return "", false
	}
	return ps[c.r.IntN(len(ps))], true
}

func isText(f *fileSpec) bool { return !f.symlink && !bytes.Contains(f.data, []byte{0}) }
func isFile(f *fileSpec) bool { return !f.symlink }
func isLink(f *fileSpec) bool { return f.symlink }
func anyEntry(*fileSpec) bool { return true }
func dirsOf(fs map[string]*fileSpec) []string {
	var out []string
	for p := range fs {
		for d := path.Dir(p); d != "."; d = path.Dir(d) {
			if !slices.Contains(out, d) {
				out = append(out, d)
			}
		}
	}
	slices.Sort(out)
	return out
}

// edit makes one random change to fs and says what it was.
func (c *mergeCase) edit(fs map[string]*fileSpec) string {
	r := c.r
	switch r.IntN(14) {
	case 0, 1, 2:
		// A renamed file is never edited on the same side: git would
		// pair it with its old path by similarity, Merge only by content.
		if p, ok := c.pick(fs, func(f *fileSpec) bool { return isText(f) && !c.touchedFile(fs, f) }); ok {
			c.touched[p] = true
			fs[p].data = c.editLines(fs[p].data)
			return "edit " + p
		}
	case 3:
		if p, ok := c.freePath(fs); ok {
			fs[p] = c.content(r.IntN(10) < 6, r.IntN(5) == 0)
			return "add " + p
		}
	case 4:
		if p, ok := c.pick(fs, anyEntry); ok {
			delete(fs, p)
			return "delete " + p
		}
	case 5:
		if p, ok := c.pick(fs, func(f *fileSpec) bool { return isFile(f) && !c.touchedFile(fs, f) }); ok {
			if q, ok := c.freePath(fs); ok {
				fs[q] = fs[p]
				delete(fs, p)
				c.touched[q] = true
				return "rename " + p + " " + q
			}
		}
	case 6:
		if p, ok := c.pick(fs, isFile); ok {
			fs[p].mode ^= 0o111
			return "chmod " + p
		}
	case 7:
		if p, ok := c.pick(fs, isLink); ok {
			fs[p].data = []byte("target-" + c.token())
			return "retarget " + p
		}
		if p, ok := c.pick(fs, isFile); ok {
			fs[p] = c.content(false, true)
			return "file to symlink " + p
		}
	case 8:
		if ds := dirsOf(fs); len(ds) > 0 {
			d := ds[r.IntN(len(ds))]
			for p := range fs {
				if isAncestor(d, p) {
					delete(fs, p)
				}
			}
			fs[d] = c.content(true, false)
			return "dir to file " + d
		}
	case 9:
		if p, ok := c.pick(fs, anyEntry); ok {
			delete(fs, p)
			fs[p+"/"+mergeFiles[r.IntN(len(mergeFiles))]] = c.content(true, false)
			return "file to dir " + p
		}
	case 10:
		if p, ok := c.pick(fs, isLink); ok {
			fs[p] = c.content(true, false)
			return "symlink to file " + p
		}
		if p, ok := c.pick(fs, isText); ok {
			fs[p] = c.content(false, false)
			return "text to binary " + p
		}
	case 11:
		// A rename with a small edit: one line of four or more, so that
		// the file stays well above git's 50% similarity.
		if p, ok := c.pick(fs, func(f *fileSpec) bool {
			return isText(f) && !c.touchedFile(fs, f) && bytes.Count(f.data, []byte("\n")) >= 4
		}); ok {
			if q, ok := c.freePath(fs); ok {
				ls := bytes.SplitAfter(fs[p].data, []byte("\n"))
				ls[r.IntN(len(ls)-1)] = []byte(c.token() + "\n")
				fs[q] = &fileSpec{data: bytes.Join(ls, nil), mode: fs[p].mode}
				delete(fs, p)
				c.touched[q] = true
				return "rename with edit " + p + " " + q
			}
		}
	case 12:
		// Edits at both ends of a text: its first and last lines.
		if p, ok := c.pick(fs, func(f *fileSpec) bool { return isText(f) && !c.touchedFile(fs, f) }); ok {
			ls := bytes.SplitAfter(fs[p].data, []byte("\n"))
			ls[0] = []byte(c.token() + "\n")
			if n := len(ls) - 2; n > 0 {
				ls[n] = []byte(c.token() + "\n")
			}
			c.touched[p] = true
			fs[p].data = bytes.Join(ls, nil)
			return "edit ends " + p
		}
	case 13:
		// Time alone: git sees no change.
		if p, ok := c.pick(fs, anyEntry); ok {
			fs[p].mtime = 2e9 + int64(r.IntN(1000))
			return "touch " + p
		}
	}
	if p, ok := c.freePath(fs); ok {
		fs[p] = c.content(true, false)
		return "add " + p
	}
	return "nothing"
}

// editLines changes, inserts and deletes lines; the result differs from
// data and is never empty.
func (c *mergeCase) editLines(data []byte) []byte {
	ls := bytes.SplitAfter(data, []byte("\n"))
	var out []byte
	for _, l := range ls {
		if len(l) == 0 {
			continue
		}
		if c.r.IntN(5) == 0 {
			out = append(out, c.line()...)
		}
		switch c.r.IntN(6) {
		case 0:
		case 1:
			out = append(out, c.line()...)
		default:
			out = append(out, l...)
		}
	}
	if c.r.IntN(4) == 0 || len(out) == 0 || bytes.Equal(out, data) {
		out = append(out, c.line()...)
	}
	return out
}

// fastImport writes the case's three commits as a fast-import stream:
// c<n>-base and, on it, c<n>-ours and c<n>-theirs.
func (c *mergeCase) fastImport(w *bytes.Buffer) {
	for j, name := range []string{"base", "ours", "theirs"} {
		fs := []map[string]*fileSpec{c.base, c.ours, c.theirs}[j]
		fmt.Fprintf(w, "commit refs/heads/c%d-%s\nmark :%d\ncommitter t <t@t> %d +0000\ndata 0\n", c.n, name, 3*c.n+j+1, 1000+j)
		if j > 0 {
			fmt.Fprintf(w, "from :%d\n", 3*c.n+1)
		}
		w.WriteString("deleteall\n")
		for _, p := range sortedPaths(fs) {
			f := fs[p]
			mode := fmt.Sprintf("%o", 0o100000|f.mode)
			if f.symlink {
				mode = "120000"
			}
			fmt.Fprintf(w, "M %s inline %s\ndata %d\n%s\n", mode, p, len(f.data), f.data)
		}
		w.WriteString("\n")
	}
}

// putFiles stores the files below dir of fs as a tree.
func putFiles(t *testing.T, w Writer, ch *Chunker, fs map[string]*fileSpec, dir string) store.ID {
	t.Helper()
	names := map[string]bool{}
	for p := range fs {
		rel := p
		if dir != "" {
			if !isAncestor(dir, p) {
				continue
			}
			rel = p[len(dir)+1:]
		}
		names[strings.SplitN(rel, "/", 2)[0]] = true
	}
	tr := &store.Tree{}
	for _, name := range slices.Sorted(func(yield func(string) bool) {
		for n := range names {
			if !yield(n) {
				return
			}
		}
	}) {
		p := join(dir, name)
		e := store.Entry{Name: name, MtimeNs: 1e9}
		f, ok := fs[p]
		if ok && f.mtime != 0 {
			e.MtimeNs = f.mtime
		}
		switch {
		case !ok:
			e.Type, e.Mode, e.ObjectKind = store.TypeDir, 0o755, store.KindTree
			e.Object = putFiles(t, w, ch, fs, p)
		case f.symlink:
			e.Type, e.Mode, e.Target, e.Size = store.TypeSymlink, 0o777, string(f.data), int64(len(f.data))
		default:
			obj, kind, err := storeBytes(w, ch, f.data)
			require.NoError(t, err)
			e.Type, e.Mode, e.Object, e.ObjectKind, e.Size = store.TypeFile, f.mode, obj, kind, int64(len(f.data))
		}
		tr.Entries = append(tr.Entries, e)
	}
	id, err := w.PutTree(tr)
	require.NoError(t, err)
	return id
}

// gitResult is one merge of merge-tree --stdin -z.
type gitResult struct {
	clean    bool
	tree     string
	paths    []string // conflicted paths, "path~branch" read as path
	messages string
}

// parseMergeTree reads merge-tree --write-tree --stdin -z: per merge, the
// status (1 clean), the tree, the conflicted entries ("mode oid
// stage\tpath") up to an empty field, then the messages (a path count,
// the paths, a type, the text) up to an empty field.
func parseMergeTree(t *testing.T, out []byte) []gitResult {
	f := strings.Split(string(out), "\x00")
	var res []gitResult
	i := 0
	next := func() string {
		require.Less(t, i, len(f), "merge-tree output ends early")
		i++
		return f[i-1]
	}
	for i < len(f) && f[i] != "" {
		g := gitResult{clean: next() == "1", tree: next()}
		for e := next(); e != ""; e = next() {
			_, p, ok := strings.Cut(e, "\t")
			require.True(t, ok, "conflicted entry %q", e)
			if k := strings.LastIndex(p, "~"); k > 0 {
				p = p[:k]
			}
			if !slices.Contains(g.paths, p) {
				g.paths = append(g.paths, p)
			}
		}
		if !g.clean {
			for n := next(); n != ""; n = next() {
				var count int
				fmt.Sscan(n, &count)
				for range count {
					next()
				}
				next()
				g.messages += next()
			}
		}
		slices.Sort(g.paths)
		res = append(res, g)
	}
	return res
}

// gitTreeID is the id git gives the tree id: its files' and symlinks'
// blobs with their modes, empty directories left out ("" for an empty
// tree).
func gitTreeID(t *testing.T, r Reader, id store.ID) string {
	t.Helper()
	sum := gitTree(t, r, id)
	if sum == nil {
		sum = gitObject("tree", nil)
	}
	return fmt.Sprintf("%x", sum)
}

func gitObject(kind string, data []byte) []byte {
	h := sha1.New()
	fmt.Fprintf(h, "%s %d\x00", kind, len(data))
	h.Write(data)
	return h.Sum(nil)
}

func gitTree(t *testing.T, r Reader, id store.ID) []byte {
	tr, err := r.Tree(t.Context(), id)
	require.NoError(t, err)
	type ent struct {
		mode, name string
		sum        []byte
	}
	var es []ent
	for i := range tr.Entries {
		e := &tr.Entries[i]
		switch e.Type {
		case store.TypeDir:
			if sum := gitTree(t, r, e.Object); sum != nil {
				es = append(es, ent{"40000", e.Name, sum})
			}
		case store.TypeSymlink:
			es = append(es, ent{"120000", e.Name, gitObject("blob", []byte(e.Target))})
		case store.TypeFile:
			data, err := readContent(t.Context(), r, e)
			require.NoError(t, err)
			es = append(es, ent{fmt.Sprintf("%o", 0o100000|(e.Mode&0o755|0o644)), e.Name, gitObject("blob", data)})
		default:
			t.Fatalf("%s: a %s in a merged tree", e.Name, e.Type)
		}
	}
	if len(es) == 0 {
		return nil
	}
	// git orders a tree's entries by name, a directory's as if it ended in "/".
	key := func(e ent) string {
		if e.mode == "40000" {
			return e.name + "/"
		}
		return e.name
	}
	slices.SortFunc(es, func(a, b ent) int { return strings.Compare(key(a), key(b)) })
	var buf bytes.Buffer
	for _, e := range es {
		fmt.Fprintf(&buf, "%s %s\x00", e.mode, e.name)
		buf.Write(e.sum)
	}
	return gitObject("tree", buf.Bytes())
}

// listTree prints a tree's paths for a failure message.
func listTree(t *testing.T, r Reader, id store.ID) string {
	var b strings.Builder
	w := bufio.NewWriter(&b)
	var walk func(id store.ID, dir string)
	walk = func(id store.ID, dir string) {
		tr, err := r.Tree(t.Context(), id)
		require.NoError(t, err)
		for i := range tr.Entries {
			e := &tr.Entries[i]
			p := join(dir, e.Name)
			switch e.Type {
			case store.TypeDir:
				walk(e.Object, p)
			case store.TypeSymlink:
				fmt.Fprintf(w, "  %s -> %s\n", p, e.Target)
			default:
				data, _ := readContent(t.Context(), r, e)
				fmt.Fprintf(w, "  %s %o %q\n", p, e.Mode, data)
			}
		}
	}
	if !id.IsZero() {
		walk(id, "")
	}
	w.Flush()
	return b.String()
}
