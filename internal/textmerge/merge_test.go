package textmerge

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
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
		hs := diff(a, b)
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
		require.Equal(t, fmt.Sprint(b), fmt.Sprint(got), "case %d", i)
		require.Equal(t, len(a)+len(b)-2*lcs(a, b), edits, "case %d: not a shortest edit script", i)
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
	seed := rand.Uint64()
	if s := os.Getenv("LAYERFS_MERGE_SEED"); s != "" {
		fmt.Sscan(s, &seed)
	}
	t.Logf("seed %d (LAYERFS_MERGE_SEED repeats it)", seed)
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
