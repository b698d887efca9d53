package engine

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"testing"

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
	ctx := context.Background()
	for _, recursive := range []bool{false, true} {
		whole, err := listBelow(ctx, root, "", recursive, "", 0)
		if err != nil || whole.Next != "" {
			t.Fatalf("recursive=%v: %+v %v", recursive, whole, err)
		}
		var want []string
		for _, e := range whole.Entries {
			want = append(want, e.Path)
		}
		if recursive && !slices.Equal(want, []string{"a", "a/x", "a/x/1", "a/x/2", "a/y", "abs-out", "b", "c", "c/d", "c/d/e", "c/d/e/f", "in-link", "rel-out", "sub", "sub/inside", "sub/z"}) {
			t.Fatalf("recursive order: %q", want)
		}
		for limit := 1; limit <= len(want); limit++ {
			var got []string
			cursor := ""
			for pages := 0; ; pages++ {
				if pages > len(want) {
					t.Fatalf("limit %d: paging does not end", limit)
				}
				page, err := listBelow(ctx, root, "", recursive, cursor, limit)
				if err != nil {
					t.Fatal(err)
				}
				for _, e := range page.Entries {
					got = append(got, e.Path)
				}
				if page.Next == "" {
					break
				}
				cursor = page.Next
			}
			if !slices.Equal(got, want) {
				t.Errorf("recursive=%v limit %d: got %q, want %q", recursive, limit, got, want)
			}
		}
	}
}

// TestListStatStayInside: symlinks are reported, never followed out; a
// listing through a symlink that leaves, or with "..", is refused.
func TestListStatStayInside(t *testing.T) {
	_, _, root := workspaceWithTraps(t)
	ctx := context.Background()
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
	if _, err := statBelow(root, "rel-out/secret"); !errors.Is(err, errclass.Invalid) {
		t.Errorf("stat through rel-out: %v", err)
	}
	if _, err := statBelow(root, "missing"); !errors.Is(err, errclass.NotFound) {
		t.Errorf("stat missing: %v", err)
	}
	if _, err := listBelow(ctx, root, "sub/inside", false, "", 0); !errors.Is(err, errclass.Invalid) {
		t.Errorf("list of a file: %v", err)
	}
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
