package commit_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	"layerfs.dev/layerfs/internal/commit"
	"layerfs.dev/layerfs/internal/store"
)

// Example shows the life of a project: create it from a directory, fork a
// branch, commit a change made by Build, diff and check out.
func Example() {
	ctx := context.Background()
	tmp, _ := os.MkdirTemp("", "layerfs-example-")
	defer os.RemoveAll(tmp)
	db, err := store.Init(ctx, filepath.Join(tmp, "store"), store.Options{})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer db.Close()

	src := filepath.Join(tmp, "src")
	os.MkdirAll(filepath.Join(src, "docs"), 0o755)
	os.WriteFile(filepath.Join(src, "docs", "intro.md"), []byte("# Intro\n"), 0o644)
	_, first, _, err := commit.CreateProject(ctx, db, "demo", src, commit.Meta{Message: "import"}, nil)
	if err != nil {
		fmt.Println(err)
		return
	}
	if _, err := commit.Fork(ctx, db, "demo", "feature", "layer:1"); err != nil {
		fmt.Println(err)
		return
	}

	// A workspace hands its changes to FromChanges (Build, then Publish).
	os.WriteFile(filepath.Join(tmp, "new.txt"), []byte("hello\n"), 0o644)
	p, _, err := commit.FromChanges(ctx, db, "demo", "feature", first, []commit.Change{
		{Path: "docs/new.txt", Source: filepath.Join(tmp, "new.txt")},
	}, commit.Meta{Message: "add new.txt"}, nil)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("publish:", p.Result)

	c1, _ := db.Commit(ctx, first)
	c2, _ := db.Commit(ctx, p.Commit)
	diffs, _, _ := commit.Diff(ctx, db, c1.Root, c2.Root, "", 0)
	for _, d := range diffs {
		fmt.Println(d.Kind, d.Path)
	}

	out := filepath.Join(tmp, "out")
	if _, err := commit.Checkout(ctx, db, c2.Root, out, nil); err != nil {
		fmt.Println(err)
		return
	}
	b, _ := os.ReadFile(filepath.Join(out, "docs", "new.txt"))
	fmt.Printf("%q\n", b)
	// Output:
	// publish: created
	// added docs/new.txt
	// "hello\n"
}
