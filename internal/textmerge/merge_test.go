package textmerge

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"layerfs.dev/layerfs/internal/testenv"
)

func text(ls ...string) []byte {
	if len(ls) == 0 {
		return []byte{}
	}
	return []byte(strings.Join(ls, "\n") + "\n")
}

func TestMerge(t *testing.T) {
	base := text("a", "b", "c", "d", "e", "f", "g")
	for _, tc := range []struct {
		name         string
		ours, theirs []byte
		want         []byte
		conflicts    int
	}{
		{"one side", text("a", "B", "c", "d", "e", "f", "g"), base, text("a", "B", "c", "d", "e", "f", "g"), 0},
		{"apart", text("A", "b", "c", "d", "e", "f", "g"), text("a", "b", "c", "d", "e", "f", "G"), text("A", "b", "c", "d", "e", "f", "G"), 0},
		{"same change", text("a", "X", "c", "d", "e", "f", "g"), text("a", "X", "c", "d", "e", "f", "g"), text("a", "X", "c", "d", "e", "f", "g"), 0},
		{"one line between", text("a", "B", "c", "d", "e", "f", "g"), text("a", "b", "c", "D", "e", "f", "g"), text("a", "B", "c", "D", "e", "f", "g"), 0},
		{"touching", text("a", "B", "c", "d", "e", "f", "g"), text("a", "b", "C", "d", "e", "f", "g"),
			text("a", "<<<<<<< ours", "B", "c", "=======", "b", "C", ">>>>>>> theirs", "d", "e", "f", "g"), 1},
		{"overlap", text("a", "X", "c", "d", "e", "f", "g"), text("a", "Y", "c", "d", "e", "f", "g"),
			text("a", "<<<<<<< ours", "X", "=======", "Y", ">>>>>>> theirs", "c", "d", "e", "f", "g"), 1},
		{"insert at one place", text("a", "b", "c", "1", "d", "e", "f", "g"), text("a", "b", "c", "2", "d", "e", "f", "g"),
			text("a", "b", "c", "<<<<<<< ours", "1", "=======", "2", ">>>>>>> theirs", "d", "e", "f", "g"), 1},
		{"delete and modify", text("a", "c", "d", "e", "f", "g"), text("a", "B", "c", "d", "e", "f", "g"),
			text("a", "<<<<<<< ours", "=======", "B", ">>>>>>> theirs", "c", "d", "e", "f", "g"), 1},
		{"both delete", text("a", "c", "d", "e", "f", "g"), text("a", "c", "d", "e", "f", "g"), text("a", "c", "d", "e", "f", "g"), 0},
		{"common lines leave the conflict", text("a", "X", "b2", "Y", "c", "d", "e", "f", "g"), text("a", "Z", "b2", "W", "c", "d", "e", "f", "g"),
			text("a", "<<<<<<< ours", "X", "b2", "Y", "=======", "Z", "b2", "W", ">>>>>>> theirs", "c", "d", "e", "f", "g"), 1},
		{"all gone", text(), base, text(), 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := Merge(base, tc.ours, tc.theirs, Options{})
			require.Equal(t, string(tc.want), string(got.Text))
			require.Equal(t, tc.conflicts, got.Conflicts)
			require.Equal(t, tc.conflicts > 0, HasMarkers(got.Text))
		})
	}
}

func TestMergePrefer(t *testing.T) {
	base := text("a", "b", "c", "d", "e")
	ours := text("A", "X", "c", "d", "e")
	theirs := text("a", "Y", "c", "d", "E")
	got := Merge(base, ours, theirs, Options{Prefer: PreferOurs})
	require.Equal(t, string(text("A", "X", "c", "d", "E")), string(got.Text))
	require.Zero(t, got.Conflicts)
	got = Merge(base, ours, theirs, Options{Prefer: PreferTheirs})
	require.Equal(t, string(text("a", "Y", "c", "d", "E")), string(got.Text), "ours' A conflicts with theirs' Y (they touch)")
}

func TestMergeLastLine(t *testing.T) {
	base := []byte("a\nb\nc")
	got := Merge(base, []byte("a\nb\nX"), []byte("A\nb\nc"), Options{})
	require.Equal(t, "A\nb\nX", string(got.Text), "a last line without a newline keeps it")
	got = Merge(base, []byte("a\nb\nX"), []byte("a\nb\nY"), Options{OursLabel: "ws-1", TheirsLabel: "main"})
	require.Equal(t, "a\nb\n<<<<<<< ws-1\nX\n=======\nY\n>>>>>>> main\n", string(got.Text))
}

func TestIsText(t *testing.T) {
	require.True(t, IsText([]byte("plain\n")))
	require.True(t, IsText(nil))
	require.False(t, IsText([]byte("bin\x00ary")))
	require.True(t, IsText(append(bytes.Repeat([]byte("x"), textProbe), 0)), "a NUL past the first 8000 bytes")
}

func TestDiffIsMinimal(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for i := 0; i < 500; i++ {
		a, b := make([]int, r.IntN(40)), make([]int, r.IntN(40))
		for j := range a {
			a[j] = r.IntN(4)
		}
		for j := range b {
			b[j] = r.IntN(4)
		}
		for _, alg := range []Algorithm{Myers, Histogram} {
			hs := diffBy(alg, a, b)
			edits := 0
			// Apply the hunks to a: it must give b.
			var got []int
			ai := 0
			for _, h := range hs {
				got = append(got, a[ai:h.A]...)
				got = append(got, b[h.B:h.B+h.NB]...)
				ai = h.A + h.NA
				edits += h.NA + h.NB
			}
			got = append(got, a[ai:]...)
			require.Equal(t, fmt.Sprint(b), fmt.Sprint(got), "case %d, diff %d", i, alg)
			if alg == Myers {
				require.Equal(t, len(a)+len(b)-2*lcs(a, b), edits, "case %d: not a shortest edit script", i)
			}
		}
	}
}

func lcs(a, b []int) int {
	t := make([][]int, len(a)+1)
	for i := range t {
		t[i] = make([]int, len(b)+1)
	}
	for i := len(a) - 1; i >= 0; i-- {
		for j := len(b) - 1; j >= 0; j-- {
			if a[i] == b[j] {
				t[i][j] = t[i+1][j+1] + 1
			} else {
				t[i][j] = max(t[i+1][j], t[i][j+1])
			}
		}
	}
	return t[0][0]
}

// TestMergeMatchesGitMergeFile merges random edits of texts whose lines are
// all distinct (so that any two correct diffs agree) with Merge and with
// git merge-file, and wants the same bytes and the same verdict.
func TestMergeMatchesGitMergeFile(t *testing.T) {
	git, err := exec.LookPath("git")
	if err != nil {
		testenv.Skip(t, "no git to compare with")
	}
	seed := mergeSeed()
	t.Logf("seed %d (LAYERFS_MERGE_SEED, a number or random, sets it)", seed)
	r := rand.New(rand.NewPCG(seed, 7))
	dir := t.TempDir()
	cases := 300
	if testing.Short() {
		cases = 50
	}
	var clean, conflicted int
	for i := 0; i < cases; i++ {
		g := &lineGen{r: r}
		base := g.text(r.IntN(30))
		ours, theirs := g.edit(base), g.edit(base)
		paths := [3]string{}
		for j, b := range [][]byte{ours, base, theirs} {
			paths[j] = filepath.Join(dir, fmt.Sprint(j))
			require.NoError(t, os.WriteFile(paths[j], b, 0o644))
		}
		out, err := exec.Command(git, "merge-file", "-p", "-L", "ours", "-L", "base", "-L", "theirs", paths[0], paths[1], paths[2]).Output()
		var exit *exec.ExitError
		if err != nil && !errors.As(err, &exit) {
			t.Fatalf("git merge-file: %v", err)
		}
		got := Merge(base, ours, theirs, Options{})
		gitConflicts := 0
		if exit != nil {
			gitConflicts = exit.ExitCode()
		}
		if got.Conflicts == 0 {
			clean++
		} else {
			conflicted++
		}
		if string(got.Text) != string(out) || got.Conflicts != gitConflicts {
			t.Fatalf("case %d (seed %d): conflicts %d, git %d\nbase:\n%s\nours:\n%s\ntheirs:\n%s\ngot:\n%s\ngit:\n%s",
				i, seed, got.Conflicts, gitConflicts, base, ours, theirs, got.Text, out)
		}
	}
	t.Logf("%d cases: %d clean, %d conflicted", cases, clean, conflicted)
}

// lineGen makes texts of distinct lines and random edits of them.
type lineGen struct {
	r *rand.Rand
	n int
}

func (g *lineGen) line() string { g.n++; return fmt.Sprintf("line %d-%x\n", g.n, g.r.Uint32()) }

func (g *lineGen) text(n int) []byte {
	var b []byte
	for range n {
		b = append(b, g.line()...)
	}
	return b
}

// edit changes, inserts and deletes lines at random.
func (g *lineGen) edit(base []byte) []byte {
	var out []byte
	ls := lines(base)
	p := g.r.Float64() * 0.3
	for _, l := range ls {
		if g.r.Float64() < p/3 {
			out = append(out, g.line()...)
		}
		switch x := g.r.Float64(); {
		case x < p/2:
			// deleted
		case x < p:
			out = append(out, g.line()...)
		default:
			out = append(out, l...)
		}
	}
	if g.r.Float64() < p {
		out = append(out, g.line()...)
	}
	return out
}

// TestMergeMatchesGitMergeFileCode is TestMergeMatchesGitMergeFile on
// texts like code, where lines repeat ("}", blank lines, "return err") and
// where real histories differ from random edits: both sides apply the same
// patch (a cherry-pick) beside edits of their own, and edits meet at both
// ends of a hunk. Such changes can sit at several places; Merge must
// place them where git does and merge what git merges.
func TestMergeMatchesGitMergeFileCode(t *testing.T) {
	git, err := exec.LookPath("git")
	if err != nil {
		testenv.Skip(t, "no git to compare with")
	}
	seed := mergeSeed()
	t.Logf("seed %d (LAYERFS_MERGE_SEED, a number or random, sets it)", seed)
	r := rand.New(rand.NewPCG(seed, 9))
	dir := t.TempDir()
	cases := 600
	if testing.Short() {
		cases = 100
	}
	var clean, conflicted, differ int
	for i := range cases {
		g := &codeGen{lineGen{r: r}}
		base, ours, theirs := g.sides()
		paths := [3]string{}
		for j, b := range [][]byte{ours, base, theirs} {
			paths[j] = filepath.Join(dir, fmt.Sprint(j))
			require.NoError(t, os.WriteFile(paths[j], b, 0o644))
		}
		out, err := exec.Command(git, "merge-file", "-p", "-L", "ours", "-L", "base", "-L", "theirs", paths[0], paths[1], paths[2]).Output()
		var exit *exec.ExitError
		if err != nil && !errors.As(err, &exit) {
			t.Fatalf("git merge-file: %v", err)
		}
		got := Merge(base, ours, theirs, Options{})
		gitConflicts := 0
		if exit != nil {
			gitConflicts = exit.ExitCode()
		}
		if gitConflicts == 0 {
			clean++
		} else {
			conflicted++
		}
		if string(got.Text) == string(out) && got.Conflicts == gitConflicts {
			continue
		}
		differ++
		msg := fmt.Sprintf("case %d (seed %d): conflicts %d, git %d\nbase:\n%s\nours:\n%s\ntheirs:\n%s\ngot:\n%s\ngit:\n%s",
			i, seed, got.Conflicts, gitConflicts, base, ours, theirs, got.Text, out)
		if got.Conflicts == 0 && gitConflicts == 0 {
			// Two clean merges that differ: never.
			t.Error(msg)
		} else {
			t.Log(msg)
		}
	}
	t.Logf("%d cases: %d clean, %d conflicted by git; %d differ", cases, clean, conflicted, differ)
	// git's Myers diff prepares the lines (those found once, or in many
	// places) before it searches, and so picks another of the shortest
	// scripts now and then, where lines repeat: the two then place a
	// change apart, and one of them finds a conflict the other does not.
	if differ > cases/50 {
		t.Errorf("%d of %d cases differ from git merge-file (more than 2%%)", differ, cases)
	}
}

// codeGen makes texts like code and the edits of TestMergeMatchesGitMergeFileCode.
type codeGen struct{ lineGen }

var commonLines = []string{"}\n", "\n", "\treturn err\n", "\t}\n", "\treturn nil\n"}

func (g *codeGen) line() string {
	if g.r.IntN(10) < 3 {
		return commonLines[g.r.IntN(len(commonLines))]
	}
	return g.lineGen.line()
}

func (g *codeGen) block(n int) []string {
	var out []string
	for range n {
		out = append(out, g.line())
	}
	return out
}

// sides makes a base and two sides: a patch both apply (a cherry-pick)
// beside edits of each; or edits at both ends of a region on one side
// against one inside or beside it on the other.
func (g *codeGen) sides() (base, ours, theirs []byte) {
	b := g.block(5 + g.r.IntN(30))
	o, t := slices.Clone(b), slices.Clone(b)
	switch g.r.IntN(2) {
	case 0:
		at := g.r.IntN(len(b))
		del := g.r.IntN(3)
		patch := g.block(1 + g.r.IntN(6))
		o, t = splice(o, at, del, patch), splice(t, at, del, patch)
		o, t = g.edits(o), g.edits(t)
	default:
		at := g.r.IntN(len(b))
		n := min(2+g.r.IntN(5), len(b)-at)
		o = splice(o, at+n-1, 1, g.block(1))
		o = splice(o, at, 1, g.block(1))
		switch x := at + g.r.IntN(n+2) - 1; {
		case x >= 0 && x < len(t):
			t = splice(t, x, 1, g.block(g.r.IntN(3)))
		default:
			t = splice(t, len(t), 0, g.block(1))
		}
	}
	join := func(ls []string) []byte { return []byte(strings.Join(ls, "")) }
	return join(b), join(o), join(t)
}

// edits changes a line or two of ls at random places.
func (g *codeGen) edits(ls []string) []string {
	for range g.r.IntN(3) {
		at := g.r.IntN(len(ls) + 1)
		ls = splice(ls, at, min(g.r.IntN(2), len(ls)-at), g.block(g.r.IntN(3)))
	}
	return ls
}

// splice replaces del lines of ls at at by ins.
func splice(ls []string, at, del int, ins []string) []string {
	del = min(del, len(ls)-at)
	return slices.Concat(ls[:at], ins, ls[at+del:])
}

// TestMergeSamePatchSlides: both sides add one function; its lines ("}",
// a blank line) let each side's diff place it at several places. Placed
// alike (as git's diff does), it is one change, taken once, beside
// theirs' edit.
func TestMergeSamePatchSlides(t *testing.T) {
	base := text("f {", "}", "", "g {", "}")
	ours := text("f {", "}", "", "h {", "}", "", "g {", "}")
	theirs := text("f {", "}", "", "h {", "}", "", "g {", "\tx", "}")
	got := Merge(base, ours, theirs, Options{})
	require.Equal(t, 0, got.Conflicts, "%s", got.Text)
	require.Equal(t, string(theirs), string(got.Text))
}

// TestMergeMatchesGitMergeTree merges texts like code (as
// TestMergeMatchesGitMergeFileCode makes them) with the histogram diff and
// with git merge-tree --write-tree, whose merge (merge-ort) diffs by the
// histogram: a one-file tree per side, one fast-import and one merge-tree
// for all cases. The merged file must hold the same bytes, its conflicts
// marked alike (merge-tree labels them with the branches' names).
func TestMergeMatchesGitMergeTree(t *testing.T) {
	git, err := exec.LookPath("git")
	if err != nil {
		testenv.Skip(t, "no git to compare with")
	}
	seed := mergeSeed()
	r := rand.New(rand.NewPCG(seed, 13))
	cases := 1000
	if testing.Short() {
		cases = 200
	}
	t.Logf("seed %d, %d cases (LAYERFS_MERGE_SEED, a number or random, sets it)", seed, cases)
	repo := t.TempDir()
	run := func(stdin []byte, args ...string) []byte {
		cmd := exec.Command(git, args...)
		cmd.Dir = repo
		cmd.Stdin = bytes.NewReader(stdin)
		cmd.Env = append(os.Environ(), "GIT_CONFIG_NOSYSTEM=1", "HOME="+repo)
		out, err := cmd.Output()
		require.NoError(t, err, "git %v", args)
		return out
	}
	run(nil, "init", "-q", "-b", "main")
	type side3 struct{ base, ours, theirs []byte }
	all := make([]side3, cases)
	var stream, pairs bytes.Buffer
	for i := range all {
		g := &codeGen{lineGen{r: r}}
		b, o, th := g.sides()
		all[i] = side3{b, o, th}
		for j, data := range [][]byte{b, o, th} {
			fmt.Fprintf(&stream, "commit refs/heads/%c%d\nmark :%d\ncommitter t <t@t> 1 +0000\ndata 0\n", "bot"[j], i, 3*i+j+1)
			if j > 0 {
				fmt.Fprintf(&stream, "from :%d\n", 3*i+1)
			}
			fmt.Fprintf(&stream, "deleteall\nM 100644 inline f\ndata %d\n%s\n\n", len(data), data)
		}
		fmt.Fprintf(&pairs, "o%d t%d\n", i, i)
	}
	run(stream.Bytes(), "fast-import", "--quiet")
	f := strings.Split(string(run(pairs.Bytes(), "merge-tree", "--write-tree", "--stdin", "-z")), "\x00")
	var trees []string
	var clean []bool
	for k := 0; k < len(f) && f[k] != ""; {
		ok, tree := f[k] == "1", f[k+1]
		k += 2
		for f[k] != "" { // conflicted entries
			k++
		}
		k++
		if !ok {
			for f[k] != "" { // messages: a count of paths, the paths, a type, the text
				var n int
				fmt.Sscan(f[k], &n)
				k += n + 3
			}
			k++
		}
		trees, clean = append(trees, tree), append(clean, ok)
	}
	require.Len(t, trees, cases)
	var objs bytes.Buffer
	for _, tree := range trees {
		objs.WriteString(tree + ":f\n")
	}
	out := run(objs.Bytes(), "cat-file", "--batch")
	var differ, conflicted int
	for i, c := range all {
		hdr, rest, _ := bytes.Cut(out, []byte("\n"))
		var size int
		if fs := strings.Fields(string(hdr)); len(fs) == 3 {
			fmt.Sscan(fs[2], &size)
		} else {
			size = -1 // missing: an empty merge
		}
		var want []byte
		if size >= 0 {
			want, out = rest[:size], rest[size+1:]
		} else {
			want, out = []byte{}, rest
		}
		got := Merge(c.base, c.ours, c.theirs, Options{Diff: Histogram, OursLabel: fmt.Sprintf("o%d", i), TheirsLabel: fmt.Sprintf("t%d", i)})
		if !clean[i] {
			conflicted++
		}
		if string(got.Text) != string(want) || (got.Conflicts == 0) != clean[i] {
			differ++
			t.Errorf("case %d (seed %d): conflicts %d, git clean %v\nbase:\n%s\nours:\n%s\ntheirs:\n%s\ngot:\n%s\ngit:\n%s",
				i, seed, got.Conflicts, clean[i], c.base, c.ours, c.theirs, got.Text, want)
		}
	}
	t.Logf("%d cases: %d conflicted by git; %d differ", cases, conflicted, differ)
}

// mergeSeed is the seed of a differential test: fixed, so that CI runs the
// same cases, unless LAYERFS_MERGE_SEED sets one or asks for a random one.
func mergeSeed() uint64 {
	seed := uint64(38)
	switch s := os.Getenv("LAYERFS_MERGE_SEED"); s {
	case "":
	case "random":
		seed = rand.Uint64()
	default:
		fmt.Sscan(s, &seed)
	}
	return seed
}
