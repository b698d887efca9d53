package store_test

import (
	"context"
	"fmt"
	"io"
	"log"
	"os"

	"layerfs.dev/layerfs/internal/store"
)

// Store one file as a commit, make it a project, fork a branch and read the
// file back through a reference.
func Example() {
	ctx := context.Background()
	dir, err := os.MkdirTemp("", "layerfs-example")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	db, err := store.Init(ctx, dir, store.Options{})
	if err != nil {
		log.Fatal(err)
	}
	defer db.Close()

	// Write: a chunk, the tree naming it and a commit, durable at Flush.
	b, err := db.NewBatch(ctx)
	if err != nil {
		log.Fatal(err)
	}
	data := []byte("hello, layerfs\n")
	chunk := store.Hash(store.KindChunk, data)
	if _, err := b.PutChunk(chunk, data); err != nil {
		log.Fatal(err)
	}
	root, err := b.PutTree(&store.Tree{Entries: []store.Entry{{
		Name: "hello.txt", Type: store.TypeFile, Mode: 0o644, Size: int64(len(data)),
		Object: chunk, ObjectKind: store.KindChunk,
	}}})
	if err != nil {
		log.Fatal(err)
	}
	first, err := b.PutCommit(&store.Commit{Root: root, Message: "first"})
	if err != nil {
		log.Fatal(err)
	}
	if err := b.Flush(ctx); err != nil {
		log.Fatal(err)
	}

	// History: the project's layer 1 and branch main, then a fork.
	if _, err := db.CreateProject(ctx, "demo", first); err != nil {
		log.Fatal(err)
	}
	if _, err := db.CreateBranch(ctx, "demo", "feature", first); err != nil {
		log.Fatal(err)
	}

	// Read back through a reference.
	id, err := db.ResolveRef(ctx, "demo", "layer:1")
	if err != nil {
		log.Fatal(err)
	}
	c, err := db.Commit(ctx, id)
	if err != nil {
		log.Fatal(err)
	}
	t, err := db.Tree(ctx, c.Root)
	if err != nil {
		log.Fatal(err)
	}
	e, _ := t.Find("hello.txt")
	r, err := db.OpenContent(ctx, e)
	if err != nil {
		log.Fatal(err)
	}
	defer r.Close()
	got, err := io.ReadAll(r)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("%s: %q\n", c.Message, got)

	branches, _ := db.Branches(ctx, "demo")
	for _, br := range branches {
		fmt.Println(br.Name, br.Head == first)
	}
	// Output:
	// first: "hello, layerfs\n"
	// feature true
	// main true
}

// GC collects what no branch, layer or workspace reaches.
func ExampleDB_GC() {
	ctx := context.Background()
	dir, _ := os.MkdirTemp("", "layerfs-example")
	defer os.RemoveAll(dir)
	db, err := store.Init(ctx, dir, store.Options{})
	if err != nil {
		log.Fatal(err)
	}
	defer db.Close()
	b, _ := db.NewBatch(ctx)
	root, _ := b.PutTree(&store.Tree{})
	orphan, _ := b.PutCommit(&store.Commit{Root: root, Message: "never published"})
	if err := b.Flush(ctx); err != nil {
		log.Fatal(err)
	}
	st, err := db.GC(ctx, store.GCOptions{})
	if err != nil {
		log.Fatal(err)
	}
	ok, _ := db.HasCommit(ctx, orphan)
	fmt.Println(st.DeadObjects, ok)
	// Output: 2 false
}
