package overlaytest

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"layerfs.dev/layerfs/internal/commit"
	"layerfs.dev/layerfs/internal/overlay"
	"layerfs.dev/layerfs/internal/store"
)

// Store is a real Store for a test, with a directory beside it for a lower
// tree, and the steps that tests of workspaces repeat around it: capture a
// directory as a tree, commit a workspace's changes, check a tree out. Each
// step fails the test on error.
type Store struct {
	DB   *store.DB
	Base string   // a directory beside the Store, for a reference copy of the lower tree
	Root store.ID // Base's tree when NewStore populated it, else the zero ID
	t    testing.TB
	ctx  context.Context
}

// NewStore creates a Store and Base in a new temporary directory; the Store
// is closed when t ends. When populate is not nil it writes a tree into
// Base, which is then captured as Root.
func NewStore(t testing.TB, ctx context.Context, populate func(t testing.TB, dir string)) *Store {
	t.Helper()
	tmp := t.TempDir()
	db, err := store.Init(ctx, filepath.Join(tmp, "store"), store.Options{})
	require.NoError(t, err)
	t.Cleanup(func() { db.Close() })
	s := &Store{DB: db, Base: filepath.Join(tmp, "base"), t: t, ctx: ctx}
	require.NoError(t, os.Mkdir(s.Base, 0o755))
	if populate != nil {
		populate(t, s.Base)
		s.Root = s.Capture(s.Base)
	}
	return s
}

// Capture stores the tree at dir and returns its root.
func (s *Store) Capture(dir string) store.ID {
	s.t.Helper()
	b, err := s.DB.NewBatch(s.ctx)
	require.NoError(s.t, err)
	defer b.Abort()
	id, _, err := commit.CaptureDir(s.ctx, b, s.DB, dir, nil)
	require.NoError(s.t, err)
	require.NoError(s.t, b.Flush(s.ctx))
	return id
}

// Changer is a workspace whose changes can be committed: an
// *overlay.Overlay, or a mount on the kernel overlay data path.
type Changer interface {
	Changes(ctx context.Context) (*overlay.ChangeSet, error)
	MarkCommitted(root store.ID, cs *overlay.ChangeSet)
}

// Commit builds the workspace's changes into a new root and marks them
// committed. When the build fails it logs the changes it was given.
func (s *Store) Commit(ov Changer) store.ID {
	s.t.Helper()
	cs, err := ov.Changes(s.ctx)
	require.NoError(s.t, err)
	b, err := s.DB.NewBatch(s.ctx)
	require.NoError(s.t, err)
	defer b.Abort()
	id, _, err := commit.Build(s.ctx, b, s.DB, cs.Base, cs.Changes, nil)
	if err != nil {
		for _, c := range cs.Changes {
			s.t.Logf("change %+v", c)
		}
		s.t.Fatalf("build: %v", err)
	}
	require.NoError(s.t, b.Flush(s.ctx))
	ov.MarkCommitted(id, cs)
	return id
}

// Checkout writes the tree root to a new temporary directory.
func (s *Store) Checkout(root store.ID) string {
	s.t.Helper()
	dir := filepath.Join(s.t.TempDir(), "co")
	_, err := commit.Checkout(s.ctx, s.DB, root, dir, nil)
	require.NoError(s.t, err)
	return dir
}

// RequireSame fails t when the tree at got differs from the reference tree
// at want (see Compare), listing the first 20 differences.
func RequireSame(t testing.TB, want, got, what string) {
	t.Helper()
	if diffs := Compare(want, got); len(diffs) > 0 {
		if len(diffs) > 20 {
			diffs = append(diffs[:20], fmt.Sprintf("... %d more", len(diffs)-20))
		}
		t.Fatalf("%s differs from the reference:\n%s", what, strings.Join(diffs, "\n"))
	}
}
