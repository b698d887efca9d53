package store

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
)

func TestProjectsLayersBranches(t *testing.T) {
	eachBackend(t, func(t *testing.T, newDB func(testing.TB) *DB) {
		ctx := context.Background()
		db := newDB(t)
		c1 := commitFiles(t, db, ZeroID, "one", map[string][]byte{"a": []byte("1")})
		c2 := commitFiles(t, db, c1, "two", map[string][]byte{"a": []byte("2")})
		tree := mustCommit(t, db, c1).Root

		if _, err := db.CreateProject(ctx, "Bad", c1); !errors.Is(err, ErrInvalidName) {
			t.Fatalf("bad name: %v", err)
		}
		if _, err := db.CreateProject(ctx, "p", tree); !errors.Is(err, ErrNotFound) {
			t.Fatalf("project on a tree id: %v", err)
		}
		if ps, _ := db.Projects(ctx); len(ps) != 0 {
			t.Fatalf("failed creates left projects: %+v", ps)
		}
		if _, err := db.CreateProject(ctx, "p", c1); err != nil {
			t.Fatal(err)
		}
		if _, err := db.CreateProject(ctx, "p", c2); !errors.Is(err, ErrExists) {
			t.Fatalf("duplicate project: %v", err)
		}
		if _, err := db.Project(ctx, "nope"); !errors.Is(err, ErrNotFound) {
			t.Fatalf("unknown project: %v", err)
		}
		b, err := db.Branch(ctx, "p", DefaultBranch)
		if err != nil || b.Head != c1 {
			t.Fatalf("main = %+v, %v", b, err)
		}
		l, err := db.AddLayer(ctx, "p", c2)
		if err != nil || l.Index != 2 {
			t.Fatalf("AddLayer = %+v, %v", l, err)
		}
		if _, err := db.AddLayer(ctx, "nope", c2); !errors.Is(err, ErrNotFound) {
			t.Fatalf("AddLayer unknown project: %v", err)
		}
		if _, err := db.AddLayer(ctx, "p", tree); !errors.Is(err, ErrNotFound) {
			t.Fatalf("AddLayer of a non-commit: %v", err)
		}
		ls, err := db.Layers(ctx, "p")
		if err != nil || len(ls) != 2 || ls[0].Commit != c1 || ls[1].Commit != c2 || ls[1].Index != 2 {
			t.Fatalf("Layers = %+v, %v", ls, err)
		}
		if _, err := db.CreateBranch(ctx, "p", "feat", c2); err != nil {
			t.Fatal(err)
		}
		for _, bad := range []struct {
			project, name string
			head          ID
			want          error
		}{
			{"p", "feat", c1, ErrExists},
			{"p", "Feat", c1, ErrInvalidName},
			{"p", "x/y", c1, ErrInvalidName},
			{"nope", "x", c1, ErrNotFound},
			{"p", "x", tree, ErrNotFound},
		} {
			if _, err := db.CreateBranch(ctx, bad.project, bad.name, bad.head); !errors.Is(err, bad.want) {
				t.Errorf("CreateBranch(%q, %q) = %v, want %v", bad.project, bad.name, err, bad.want)
			}
		}
		bs, err := db.Branches(ctx, "p")
		if err != nil || len(bs) != 2 || bs[0].Name != "feat" || bs[1].Name != "main" {
			t.Fatalf("Branches = %+v, %v", bs, err)
		}
		if err := db.DeleteBranch(ctx, "p", "feat"); err != nil {
			t.Fatal(err)
		}
		if err := db.DeleteBranch(ctx, "p", "feat"); !errors.Is(err, ErrNotFound) {
			t.Fatalf("second delete: %v", err)
		}
		if _, err := db.Branches(ctx, "nope"); !errors.Is(err, ErrNotFound) {
			t.Fatalf("Branches of unknown project: %v", err)
		}
		p, err := db.Project(ctx, "p")
		if err != nil || p.Layers != 2 || p.Branches != 1 {
			t.Fatalf("Project = %+v, %v", p, err)
		}
	})
}

func mustCommit(t *testing.T, db *DB, id ID) *Commit {
	t.Helper()
	c, err := db.Commit(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestSetBranchHeadCAS(t *testing.T) {
	eachBackend(t, func(t *testing.T, newDB func(testing.TB) *DB) {
		ctx := context.Background()
		db := newDB(t)
		c1 := commitFiles(t, db, ZeroID, "one", map[string][]byte{"a": []byte("1")})
		c2 := commitFiles(t, db, c1, "two", map[string][]byte{"a": []byte("2")})
		c3 := commitFiles(t, db, c1, "three", map[string][]byte{"a": []byte("3")})
		if _, err := db.CreateProject(ctx, "p", c1); err != nil {
			t.Fatal(err)
		}
		steps := []struct {
			expect, head ID
			want         Publish
			after        ID
		}{
			{c1, c2, PublishCreated, c2},
			{c1, c2, PublishUpToDate, c2},  // retried publish of the same commit
			{c1, c3, PublishHeadMoved, c2}, // someone else moved it: nothing changes
			{c2, c3, PublishCreated, c3},
			{ZeroID, c3, PublishUpToDate, c3},
		}
		for i, s := range steps {
			got, err := db.SetBranchHead(ctx, "p", "main", s.expect, s.head)
			if err != nil || got != s.want {
				t.Fatalf("step %d: got %v, %v; want %v", i, got, err, s.want)
			}
			b, _ := db.Branch(ctx, "p", "main")
			if b.Head != s.after {
				t.Fatalf("step %d: head %s, want %s", i, b.Head.Short(), s.after.Short())
			}
		}
		tree := mustCommit(t, db, c1).Root
		if _, err := db.SetBranchHead(ctx, "p", "main", c3, tree); !errors.Is(err, ErrNotFound) {
			t.Fatalf("head to a non-commit: %v", err)
		}
		if _, err := db.SetBranchHead(ctx, "p", "nope", c3, c1); !errors.Is(err, ErrNotFound) {
			t.Fatalf("unknown branch: %v", err)
		}
		if _, err := db.SetBranchHead(ctx, "nope", "main", c3, c1); !errors.Is(err, ErrNotFound) {
			t.Fatalf("unknown project: %v", err)
		}
		if PublishHeadMoved.String() != "head-moved" || PublishUpToDate.String() != "up-to-date" || PublishCreated.String() != "created" {
			t.Fatal("Publish names")
		}
	})
}

func TestResolveRef(t *testing.T) {
	eachBackend(t, func(t *testing.T, newDB func(testing.TB) *DB) {
		ctx := context.Background()
		db := newDB(t)
		var commits []ID
		for i := 0; i < 40; i++ {
			commits = append(commits, commitFiles(t, db, ZeroID, "c", map[string][]byte{"f": randBytes(uint64(i), 10)}))
		}
		c1 := commits[0]
		if _, err := db.CreateProject(ctx, "p", c1); err != nil {
			t.Fatal(err)
		}
		if _, err := db.AddLayer(ctx, "p", commits[1]); err != nil {
			t.Fatal(err)
		}
		if _, err := db.CreateBranch(ctx, "p", "dev", commits[2]); err != nil {
			t.Fatal(err)
		}
		// A branch whose name is hex shadows a prefix.
		if _, err := db.CreateBranch(ctx, "p", commits[4].String()[:6], commits[3]); err != nil {
			t.Fatal(err)
		}
		ok := map[string]ID{
			"layer:1":                                c1,
			"layer:2":                                commits[1],
			"main":                                   c1,
			"dev":                                    commits[2],
			commits[5].String():                      commits[5],
			commits[5].String()[:10]:                 commits[5],
			strings.ToUpper(commits[6].String()[:8]): commits[6],
			commits[4].String()[:6]:                  commits[3],
			commits[4].String()[:7]:                  commits[4],
		}
		for ref, want := range ok {
			got, err := db.ResolveRef(ctx, "p", ref)
			if err != nil || got != want {
				t.Errorf("ResolveRef(%q) = %s, %v; want %s", ref, got.Short(), err, want.Short())
			}
		}
		tree := mustCommit(t, db, c1).Root
		notFound := []string{"layer:3", "layer:0", "layer:x", "nope", "abc", tree.String(), tree.String()[:12], "zzzz", ""}
		for _, ref := range notFound {
			if _, err := db.ResolveRef(ctx, "p", ref); !errors.Is(err, ErrNotFound) {
				t.Errorf("ResolveRef(%q) = %v, want ErrNotFound", ref, err)
			}
		}
		if _, err := db.ResolveRef(ctx, "nope", "main"); !errors.Is(err, ErrNotFound) {
			t.Errorf("unknown project: %v", err)
		}
		// Ambiguity: search commit messages until two ids share 5 hex digits
		// (a birthday search over hashes only), then store both.
		root := mustCommit(t, db, c1).Root
		seen := map[string]*Commit{}
		var pair [2]*Commit
		var prefix string
		for i := 0; pair[0] == nil; i++ {
			c := &Commit{Root: root, Message: fmt.Sprint("amb ", i)}
			p := Hash(KindCommit, c.Encode()).String()[:5]
			if o, ok := seen[p]; ok {
				pair, prefix = [2]*Commit{o, c}, p
			}
			seen[p] = c
		}
		b, _ := db.NewBatch(ctx)
		for _, c := range pair {
			if _, err := b.PutCommit(c); err != nil {
				t.Fatal(err)
			}
		}
		if err := b.Flush(ctx); err != nil {
			t.Fatal(err)
		}
		for _, ref := range []string{prefix, prefix[:4]} {
			_, err := db.ResolveRef(ctx, "p", ref)
			if !errors.Is(err, ErrAmbiguous) || !strings.Contains(err.Error(), Hash(KindCommit, pair[0].Encode()).Short()) {
				t.Errorf("ResolveRef(%q) = %v, want ErrAmbiguous naming the candidates", ref, err)
			}
		}
	})
}

// TestDeleteBranchUnderWorkspace: a branch a workspace stands on cannot be
// deleted, by any caller of the Store; once the workspace's record is gone
// it can.
func TestDeleteBranchUnderWorkspace(t *testing.T) {
	eachBackend(t, func(t *testing.T, newDB func(testing.TB) *DB) {
		ctx := context.Background()
		db := newDB(t)
		c := commitFiles(t, db, ZeroID, "c", map[string][]byte{"a": []byte("a")})
		if _, err := db.CreateProject(ctx, "p", c); err != nil {
			t.Fatal(err)
		}
		if _, err := db.CreateBranch(ctx, "p", "other", c); err != nil {
			t.Fatal(err)
		}
		w := Workspace{ID: "ws-1", Project: "p", Branch: DefaultBranch, Base: c, Head: c, MountPath: "/m", UpperDir: "/u", State: "mounted"}
		if _, err := db.CreateWorkspace(ctx, w); err != nil {
			t.Fatal(err)
		}
		err := db.DeleteBranch(ctx, "p", DefaultBranch)
		if !errors.Is(err, ErrBusy) || !strings.Contains(err.Error(), "ws-1") {
			t.Fatalf("delete of a branch under a workspace = %v, want ErrBusy naming ws-1", err)
		}
		if _, err := db.Branch(ctx, "p", DefaultBranch); err != nil {
			t.Fatalf("the refused delete removed the branch: %v", err)
		}
		// Another branch of the same project is not protected.
		if err := db.DeleteBranch(ctx, "p", "other"); err != nil {
			t.Fatal(err)
		}
		if err := db.DeleteWorkspace(ctx, "ws-1"); err != nil {
			t.Fatal(err)
		}
		if err := db.DeleteBranch(ctx, "p", DefaultBranch); err != nil {
			t.Fatalf("delete after the workspace ended: %v", err)
		}
	})
}
