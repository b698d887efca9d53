package commit

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"layerfs.dev/layerfs/internal/store"
)

func TestDiff(t *testing.T) {
	db := newDB(t)
	a := t.TempDir()
	w := func(dir, p, s string) {
		require.NoError(t, os.MkdirAll(filepath.Dir(filepath.Join(dir, p)), 0o755))
		require.NoError(t, os.WriteFile(filepath.Join(dir, p), []byte(s), 0o644))
	}
	w(a, "same/x", "x")
	w(a, "mod", "1")
	w(a, "gone", "g")
	w(a, "gonedir/y", "y")
	w(a, "t2d", "file")
	w(a, "d2t/z", "z")
	require.NoError(t, os.Chmod(filepath.Join(a, "same"), 0o755))
	b := filepath.Join(t.TempDir(), "b")
	require.NoError(t, os.CopyFS(b, os.DirFS(a)))
	// CopyFS does not keep mtimes: give both sides the same.
	for _, dir := range []string{a, b} {
		require.NoError(t, filepath.Walk(dir, func(p string, fi os.FileInfo, err error) error {
			require.NoError(t, err)
			return os.Chtimes(p, fi.ModTime().Truncate(0).AddDate(-1, 0, 0).Round(1e9), fi.ModTime().AddDate(-1, 0, 0).Round(1e9))
		}))
	}
	require.NoError(t, filepath.Walk(b, func(p string, fi os.FileInfo, err error) error {
		rel, _ := filepath.Rel(b, p)
		ai, _ := os.Lstat(filepath.Join(a, rel))
		return os.Chtimes(p, ai.ModTime(), ai.ModTime())
	}))
	from, _ := capture(t, db, a)
	w(b, "mod", "2")
	require.NoError(t, os.Remove(filepath.Join(b, "gone")))
	require.NoError(t, os.RemoveAll(filepath.Join(b, "gonedir")))
	require.NoError(t, os.Remove(filepath.Join(b, "t2d")))
	w(b, "t2d/inner", "i")
	require.NoError(t, os.RemoveAll(filepath.Join(b, "d2t")))
	w(b, "d2t", "now a file")
	w(b, "new/deep/file", "n")
	for _, p := range []string{".", "same", "same/x"} { // restore what the edits touched
		ai, _ := os.Lstat(filepath.Join(a, p))
		require.NoError(t, os.Chtimes(filepath.Join(b, p), ai.ModTime(), ai.ModTime()))
	}
	to, _ := capture(t, db, b)

	all, next, err := Diff(t.Context(), db, from, to, "", 0)
	require.NoError(t, err)
	if next != "" {
		t.Errorf("next = %q without a limit", next)
	}
	got := []string{}
	for _, d := range all {
		got = append(got, fmt.Sprintf("%s %s", d.Kind, d.Path))
	}
	want := []string{
		"removed d2t/z", "type-changed d2t", "removed gone", "removed gonedir", "removed gonedir/y",
		"modified mod", "added new", "added new/deep", "added new/deep/file", "type-changed t2d", "added t2d/inner",
	}
	slices.Sort(got)
	slices.Sort(want)
	assert.Equal(t, want, got, "diff")
	// Path order: a directory before its contents, components bytewise.
	for i := 1; i < len(all); i++ {
		if ComparePaths(all[i-1].Path, all[i].Path) >= 0 {
			t.Errorf("out of order: %q before %q", all[i-1].Path, all[i].Path)
		}
	}
	// Pages of every size add up to the whole list.
	for limit := 1; limit <= len(all)+1; limit++ {
		var paged []Difference
		cursor := ""
		for range 100 {
			page, nxt, err := Diff(t.Context(), db, from, to, cursor, limit)
			require.NoError(t, err)
			if len(page) > limit {
				t.Fatalf("limit %d: page of %d", limit, len(page))
			}
			paged = append(paged, page...)
			if nxt == "" {
				break
			}
			cursor = nxt
		}
		if len(paged) != len(all) {
			t.Fatalf("limit %d: pages hold %d differences, want %d", limit, len(paged), len(all))
		}
		for i := range all {
			if paged[i].Path != all[i].Path || paged[i].Kind != all[i].Kind {
				t.Fatalf("limit %d: page item %d is %s %s, want %s %s", limit, i, paged[i].Kind, paged[i].Path, all[i].Kind, all[i].Path)
			}
		}
	}
	// Equal trees: nothing, without reading them.
	if d, _, err := Diff(t.Context(), db, from, from, "", 0); err != nil || len(d) != 0 {
		t.Errorf("diff of a tree with itself: %v %v", d, err)
	}
	// From the empty tree everything is added.
	d, _, err := Diff(t.Context(), db, store.ZeroID, from, "", 0)
	require.NoError(t, err)
	if len(d) != 9 {
		t.Errorf("diff from the empty tree: %d differences, want 9 (every path)", len(d))
	}
	for _, x := range d {
		if x.Kind != Added {
			t.Errorf("%s %s, want added", x.Kind, x.Path)
		}
	}
}

func TestComparePaths(t *testing.T) {
	cases := []struct {
		a, b string
		want int
	}{
		{"a", "a", 0}, {"a", "a/b", -1}, {"a/b", "a.b", -1}, {"a.b", "a/b", 1}, {"a/b", "a/c", -1}, {"b", "a/z", 1}, {"a/b/c", "a/b", 1},
	}
	for _, c := range cases {
		if got := ComparePaths(c.a, c.b); got != c.want {
			t.Errorf("ComparePaths(%q, %q) = %d, want %d", c.a, c.b, got, c.want)
		}
	}
}
