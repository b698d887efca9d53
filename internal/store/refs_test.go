package store

import (
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestProjectsLayersBranches(t *testing.T) {
	eachBackend(t, func(t *testing.T, newDB func(testing.TB) *DB) {
		ctx := t.Context()
		db := newDB(t)
		c1 := commitFiles(t, db, ZeroID, "one", map[string][]byte{"a": []byte("1")})
		c2 := commitFiles(t, db, c1, "two", map[string][]byte{"a": []byte("2")})
		tree := mustCommit(t, db, c1).Root

		_, err := db.CreateProject(ctx, "Bad", c1)
		require.ErrorIs(t, err, ErrInvalidName, "bad name")
		_, err = db.CreateProject(ctx, "p", tree)
		require.ErrorIs(t, err, ErrNotFound, "project on a tree id")
		ps, err := db.Projects(ctx)
		require.NoError(t, err)
		require.Empty(t, ps, "failed creates left projects")
		_, err = db.CreateProject(ctx, "p", c1)
		require.NoError(t, err)
		_, err = db.CreateProject(ctx, "p", c2)
		require.ErrorIs(t, err, ErrExists, "duplicate project")
		_, err = db.Project(ctx, "nope")
		require.ErrorIs(t, err, ErrNotFound, "unknown project")
		b, err := db.Branch(ctx, "p", DefaultBranch)
		require.NoError(t, err)
		require.Equal(t, c1, b.Head, "main's head")
		l, err := db.AddLayer(ctx, "p", c2)
		require.NoError(t, err, "AddLayer")
		require.Equal(t, 2, l.Index, "AddLayer's index")
		_, err = db.AddLayer(ctx, "nope", c2)
		require.ErrorIs(t, err, ErrNotFound, "AddLayer unknown project")
		_, err = db.AddLayer(ctx, "p", tree)
		require.ErrorIs(t, err, ErrNotFound, "AddLayer of a non-commit")
		ls, err := db.Layers(ctx, "p")
		require.NoError(t, err, "Layers")
		require.Len(t, ls, 2, "Layers")
		require.Equal(t, c1, ls[0].Commit, "layer 1")
		require.Equal(t, c2, ls[1].Commit, "layer 2")
		require.Equal(t, 2, ls[1].Index, "layer 2's index")
		_, err = db.CreateBranch(ctx, "p", "feat", c2)
		require.NoError(t, err)
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
			_, err := db.CreateBranch(ctx, bad.project, bad.name, bad.head)
			assert.ErrorIs(t, err, bad.want, "CreateBranch(%q, %q)", bad.project, bad.name)
		}
		bs, err := db.Branches(ctx, "p")
		require.NoError(t, err, "Branches")
		var names []string
		for _, b := range bs {
			names = append(names, b.Name)
		}
		require.Equal(t, []string{"feat", "main"}, names, "Branches")
		require.NoError(t, db.DeleteBranch(ctx, "p", "feat"))
		require.ErrorIs(t, db.DeleteBranch(ctx, "p", "feat"), ErrNotFound, "second delete")
		_, err = db.Branches(ctx, "nope")
		require.ErrorIs(t, err, ErrNotFound, "Branches of unknown project")
		p, err := db.Project(ctx, "p")
		require.NoError(t, err, "Project")
		require.Equal(t, 2, p.Layers, "Project's layers")
		require.Equal(t, 1, p.Branches, "Project's branches")
	})
}

func mustCommit(t *testing.T, db *DB, id ID) *Commit {
	t.Helper()
	c, err := db.Commit(t.Context(), id)
	require.NoError(t, err)
	return c
}

func TestSetBranchHeadCAS(t *testing.T) {
	eachBackend(t, func(t *testing.T, newDB func(testing.TB) *DB) {
		ctx := t.Context()
		db := newDB(t)
		c1 := commitFiles(t, db, ZeroID, "one", map[string][]byte{"a": []byte("1")})
		c2 := commitFiles(t, db, c1, "two", map[string][]byte{"a": []byte("2")})
		c3 := commitFiles(t, db, c1, "three", map[string][]byte{"a": []byte("3")})
		_, err := db.CreateProject(ctx, "p", c1)
		require.NoError(t, err)
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
			require.NoError(t, err, "step %d", i)
			require.Equal(t, s.want, got, "step %d", i)
			b, err := db.Branch(ctx, "p", "main")
			require.NoError(t, err, "step %d", i)
			require.Equal(t, s.after.Short(), b.Head.Short(), "step %d: head", i)
		}
		tree := mustCommit(t, db, c1).Root
		_, err = db.SetBranchHead(ctx, "p", "main", c3, tree)
		require.ErrorIs(t, err, ErrNotFound, "head to a non-commit")
		_, err = db.SetBranchHead(ctx, "p", "nope", c3, c1)
		require.ErrorIs(t, err, ErrNotFound, "unknown branch")
		_, err = db.SetBranchHead(ctx, "nope", "main", c3, c1)
		require.ErrorIs(t, err, ErrNotFound, "unknown project")
		require.Equal(t, "head-moved", PublishHeadMoved.String())
		require.Equal(t, "up-to-date", PublishUpToDate.String())
		require.Equal(t, "created", PublishCreated.String())
	})
}

func TestResolveRef(t *testing.T) {
	eachBackend(t, func(t *testing.T, newDB func(testing.TB) *DB) {
		ctx := t.Context()
		db := newDB(t)
		var commits []ID
		for i := 0; i < 40; i++ {
			commits = append(commits, commitFiles(t, db, ZeroID, "c", map[string][]byte{"f": randBytes(uint64(i), 10)}))
		}
		c1 := commits[0]
		_, err := db.CreateProject(ctx, "p", c1)
		require.NoError(t, err)
		_, err = db.AddLayer(ctx, "p", commits[1])
		require.NoError(t, err)
		_, err = db.CreateBranch(ctx, "p", "dev", commits[2])
		require.NoError(t, err)
		// A branch whose name is hex shadows a prefix.
		_, err = db.CreateBranch(ctx, "p", commits[4].String()[:6], commits[3])
		require.NoError(t, err)
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
			if assert.NoError(t, err, "ResolveRef(%q)", ref) {
				assert.Equal(t, want.Short(), got.Short(), "ResolveRef(%q)", ref)
			}
		}
		tree := mustCommit(t, db, c1).Root
		notFound := []string{"layer:3", "layer:0", "layer:x", "nope", "abc", tree.String(), tree.String()[:12], "zzzz", ""}
		for _, ref := range notFound {
			_, err := db.ResolveRef(ctx, "p", ref)
			assert.ErrorIs(t, err, ErrNotFound, "ResolveRef(%q)", ref)
		}
		_, err = db.ResolveRef(ctx, "nope", "main")
		assert.ErrorIs(t, err, ErrNotFound, "unknown project")
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
			_, err := b.PutCommit(c)
			require.NoError(t, err)
		}
		require.NoError(t, b.Flush(ctx))
		for _, ref := range []string{prefix, prefix[:4]} {
			_, err := db.ResolveRef(ctx, "p", ref)
			assert.ErrorIs(t, err, ErrAmbiguous, "ResolveRef(%q)", ref)
			assert.ErrorContains(t, err, Hash(KindCommit, pair[0].Encode()).Short(), "ResolveRef(%q) names the candidates", ref)
		}
	})
}

// TestDeleteBranchUnderWorkspace: a branch a workspace stands on cannot be
// deleted, by any caller of the Store; once the workspace's record is gone
// it can.
func TestDeleteBranchUnderWorkspace(t *testing.T) {
	eachBackend(t, func(t *testing.T, newDB func(testing.TB) *DB) {
		ctx := t.Context()
		db := newDB(t)
		c := commitFiles(t, db, ZeroID, "c", map[string][]byte{"a": []byte("a")})
		_, err := db.CreateProject(ctx, "p", c)
		require.NoError(t, err)
		_, err = db.CreateBranch(ctx, "p", "other", c)
		require.NoError(t, err)
		w := Workspace{ID: "ws-1", Project: "p", Branch: DefaultBranch, Base: c, Head: c, MountPath: "/m", UpperDir: "/u", State: "mounted"}
		_, err = db.CreateWorkspace(ctx, w)
		require.NoError(t, err)
		err = db.DeleteBranch(ctx, "p", DefaultBranch)
		require.ErrorIs(t, err, ErrBusy, "delete of a branch under a workspace")
		require.ErrorContains(t, err, "ws-1", "the refusal names the workspace")
		_, err = db.Branch(ctx, "p", DefaultBranch)
		require.NoError(t, err, "the refused delete removed the branch")
		// Another branch of the same project is not protected.
		require.NoError(t, db.DeleteBranch(ctx, "p", "other"))
		require.NoError(t, db.DeleteWorkspace(ctx, "ws-1"))
		require.NoError(t, db.DeleteBranch(ctx, "p", DefaultBranch), "delete after the workspace ended")
	})
}
