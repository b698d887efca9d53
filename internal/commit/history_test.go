package commit

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"layerfs.dev/layerfs/internal/store"
)

func TestPublishCAS(t *testing.T) {
	ctx := t.Context()
	db := newDB(t)
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "f"), []byte("1"), 0o644))
	_, first, _, err := CreateProject(ctx, db, "p", dir, Meta{Message: "one"}, nil)
	require.NoError(t, err)

	// Same tree as the head: up-to-date, no new commit.
	p, _, err := FromDir(ctx, db, "p", "main", dir, Meta{Message: "again"}, nil)
	require.NoError(t, err)
	if p.Result != UpToDate || p.Commit != first || p.Err() != nil {
		t.Fatalf("unchanged commit: %+v, want up-to-date at %s", p, first.Short())
	}

	// A change: created, parent is the old head.
	require.NoError(t, os.WriteFile(filepath.Join(dir, "f"), []byte("2"), 0o644))
	p, st, err := FromDir(ctx, db, "p", "main", dir, Meta{Message: "two"}, nil)
	require.NoError(t, err)
	if p.Result != Created || p.Head != p.Commit {
		t.Fatalf("changed commit: %+v, want created", p)
	}
	c, err := db.Commit(ctx, p.Commit)
	require.NoError(t, err)
	if c.Parent() != first || c.Message != "two" || c.Stats.Changed != 1 || c.Stats.Files != 1 {
		t.Errorf("commit %+v: want parent %s, message two, 1 changed, 1 file", c, first.Short())
	}
	if st.NewChunks != 1 {
		t.Errorf("stored %d new chunks, want 1", st.NewChunks)
	}
	second := p.Commit

	// Publishing against a stale expect: head-moved, commit stored, branch unchanged.
	require.NoError(t, os.WriteFile(filepath.Join(dir, "f"), []byte("3"), 0o644))
	root, _, err := captureRoot(ctx, db, dir, nil)
	require.NoError(t, err)
	p, err = Publish(ctx, db, "p", "main", first, &store.Commit{Root: root, Message: "stale"})
	require.NoError(t, err)
	if p.Result != HeadMoved || p.Head != second || !errors.Is(p.Err(), ErrHeadMoved) {
		t.Fatalf("stale publish: %+v (err %v), want head-moved with head %s", p, p.Err(), second.Short())
	}
	if ok, err := db.HasCommit(ctx, p.Commit); err != nil || !ok {
		t.Errorf("head-moved commit %s not stored: %v", p.Commit.Short(), err)
	}
	b, err := db.Branch(ctx, "p", "main")
	require.NoError(t, err)
	if b.Head != second {
		t.Errorf("head moved to %s by a failed CAS", b.Head.Short())
	}
	// The stored commit can be forked from.
	fb, err := Fork(ctx, db, "p", "rescue", p.Commit.String())
	require.NoError(t, err)
	if fb.Head != p.Commit {
		t.Errorf("fork head %s, want %s", fb.Head.Short(), p.Commit.Short())
	}
}

func TestHistory(t *testing.T) {
	ctx := t.Context()
	db := newDB(t)
	_, empty, _, err := CreateProject(ctx, db, "e", "", Meta{}, nil)
	require.NoError(t, err)
	c, err := db.Commit(ctx, empty)
	require.NoError(t, err)
	if c.Root.IsZero() || c.Stats.Files != 0 {
		t.Errorf("empty project's commit: %+v", c)
	}
	ls, err := db.Layers(ctx, "e")
	require.NoError(t, err)
	if len(ls) != 1 || ls[0].Commit != empty {
		t.Errorf("layers %+v, want one at %s", ls, empty.Short())
	}
	// fork from layer, commit on the fork, add it as the next layer, log.
	_, err = Fork(ctx, db, "e", "dev", "layer:1")
	require.NoError(t, err)
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "x"), []byte("x"), 0o644))
	p, _, err := FromDir(ctx, db, "e", "dev", dir, Meta{Message: "add x"}, nil)
	require.NoError(t, err)
	l, err := AddLayer(ctx, db, "e", "dev")
	require.NoError(t, err)
	if l.Index != 2 || l.Commit != p.Commit {
		t.Errorf("layer %+v, want 2 at %s", l, p.Commit.Short())
	}
	log, err := Log(ctx, db, "e", "dev", store.ZeroID, 0)
	require.NoError(t, err)
	if len(log) != 2 || log[0].ID != p.Commit || log[1].ID != empty || log[0].Message != "add x" {
		t.Errorf("log %+v", log)
	}
	// FromChanges on top of the fork, the way a workspace commits.
	require.NoError(t, os.WriteFile(filepath.Join(dir, "y"), []byte("yy"), 0o644))
	p2, _, err := FromChanges(ctx, db, "e", "dev", p.Commit, []Change{{Path: "y", Source: filepath.Join(dir, "y")}}, Meta{Message: "add y"}, nil)
	require.NoError(t, err)
	c2, err := db.Commit(ctx, p2.Commit)
	require.NoError(t, err)
	if p2.Result != Created || c2.Stats.Files != 2 || c2.Stats.Bytes != 3 || c2.Stats.Changed != 1 {
		t.Errorf("FromChanges: %+v, commit %+v", p2, c2)
	}

	bad := []struct {
		name string
		err  error
		want error
	}{
		{"invalid name", func() error { _, _, _, err := CreateProject(ctx, db, "Bad Name", "", Meta{}, nil); return err }(), store.ErrInvalidName},
		{"second create", func() error { _, _, _, err := CreateProject(ctx, db, "e", "", Meta{}, nil); return err }(), store.ErrExists},
		{"missing --from", func() error {
			_, _, _, err := CreateProject(ctx, db, "q", filepath.Join(dir, "nope"), Meta{}, nil)
			return err
		}(), os.ErrNotExist},
		{"unknown project", func() error { _, err := Fork(ctx, db, "nope", "b", "main"); return err }(), store.ErrNotFound},
		{"unknown ref", func() error { _, err := Fork(ctx, db, "e", "b", "layer:9"); return err }(), store.ErrNotFound},
		{"bad branch name", func() error { _, err := Fork(ctx, db, "e", "-x", "main"); return err }(), store.ErrInvalidName},
		{"existing branch", func() error { _, err := Fork(ctx, db, "e", "dev", "main"); return err }(), store.ErrExists},
		{"unknown branch", func() error { _, _, err := FromDir(ctx, db, "e", "nope", dir, Meta{}, nil); return err }(), store.ErrNotFound},
		{"commit missing dir", func() error {
			_, _, err := FromDir(ctx, db, "e", "dev", filepath.Join(dir, "nope"), Meta{}, nil)
			return err
		}(), os.ErrNotExist},
	}
	for _, c := range bad {
		assert.ErrorIs(t, c.err, c.want, c.name)
	}
	// Nothing of the failures is visible.
	ps, err := db.Projects(ctx)
	require.NoError(t, err)
	if len(ps) != 1 {
		t.Errorf("projects %+v, want only e", ps)
	}
	bs, err := db.Branches(ctx, "e")
	require.NoError(t, err)
	if len(bs) != 2 {
		t.Errorf("branches %+v, want main and dev", bs)
	}
}
