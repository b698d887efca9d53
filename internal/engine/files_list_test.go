package engine

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"layerfs.dev/layerfs/wire/errclass"
)

// TestListPages: every page size walks the same tree in the same order,
// without gaps or repeats, recursive or not.
func TestListPages(t *testing.T) {
	ws, _, root := workspaceWithTraps(t)
	for _, p := range []string{"a/x/1", "a/x/2", "a/y", "b", "c/d/e/f", "sub/z"} {
		os.MkdirAll(filepath.Join(ws, filepath.Dir(p)), 0o755)
		os.WriteFile(filepath.Join(ws, p), []byte(p), 0o644)
	}
	ctx := t.Context()
	for _, recursive := range []bool{false, true} {
		whole, err := listBelow(ctx, root, "", recursive, "", 0)
		if err != nil || whole.Next != "" {
			t.Fatalf("recursive=%v: %+v %v", recursive, whole, err)
		}
		var want []string
		for _, e := range whole.Entries {
			want = append(want, e.Path)
		}
		if recursive {
			require.Equal(t, []string{"a", "a/x", "a/x/1", "a/x/2", "a/y", "abs-out", "b", "c", "c/d", "c/d/e", "c/d/e/f", "in-link", "rel-out", "sub", "sub/inside", "sub/z"}, want, "recursive order")
		}
		for limit := 1; limit <= len(want); limit++ {
			var got []string
			cursor := ""
			for pages := 0; ; pages++ {
				if pages > len(want) {
					t.Fatalf("limit %d: paging does not end", limit)
				}
				page, err := listBelow(ctx, root, "", recursive, cursor, limit)
				require.NoError(t, err)
				for _, e := range page.Entries {
					got = append(got, e.Path)
				}
				if page.Next == "" {
					break
				}
				cursor = page.Next
			}
			assert.Equal(t, want, got, "recursive=%v limit %d", recursive, limit)
		}
	}
}

// TestListStatStayInside: symlinks are reported, never followed out; a
// listing through a symlink that leaves, or with "..", is refused.
func TestListStatStayInside(t *testing.T) {
	_, _, root := workspaceWithTraps(t)
	ctx := t.Context()
	fi, err := statBelow(root, "abs-out")
	if err != nil || fi.Type != "symlink" || fi.Target == "" {
		t.Errorf("stat abs-out = %+v, %v", fi, err)
	}
	if fi, err := statBelow(root, "sub/inside"); err != nil || fi.Type != "file" || fi.Size != 2 || fi.Mode != 0o644 {
		t.Errorf("stat sub/inside = %+v, %v", fi, err)
	}
	if fi, err := statBelow(root, ""); err != nil || fi.Type != "dir" || fi.Path != "." {
		t.Errorf("stat root = %+v, %v", fi, err)
	}
	for _, p := range []string{"abs-out", "rel-out", "abs-out/secret"} {
		if page, err := listBelow(ctx, root, p, true, "", 0); !errors.Is(err, errclass.Invalid) && !errors.Is(err, errclass.NotFound) {
			t.Errorf("list %s: %+v, %v (want refused)", p, page, err)
		}
	}
	_, err = statBelow(root, "rel-out/secret")
	assert.ErrorIs(t, err, errclass.Invalid, "stat through rel-out")
	_, err = statBelow(root, "missing")
	assert.ErrorIs(t, err, errclass.NotFound, "stat missing")
	_, err = listBelow(ctx, root, "sub/inside", false, "", 0)
	assert.ErrorIs(t, err, errclass.Invalid, "list of a file")
	// A symlink to a directory inside is followed only when named as the
	// listed directory, and a recursive walk does not descend through one.
	page, err := listBelow(ctx, root, "in-link", false, "", 0)
	if err != nil || len(page.Entries) != 1 || page.Entries[0].Path != "in-link/inside" {
		t.Errorf("list in-link = %+v, %v", page, err)
	}
	whole, _ := listBelow(ctx, root, "", true, "", 0)
	for _, e := range whole.Entries {
		if e.Path == "abs-out/secret" || e.Path == "rel-out/secret" || e.Path == "in-link/inside" {
			t.Errorf("walk followed a symlink: %s", e.Path)
		}
	}
}
