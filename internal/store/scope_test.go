package store

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"layerfs.dev/layerfs/internal/s3bucket"
)

// TestScope: two scopes of one shared Store's database and bucket are two
// empty Stores, neither seeing the other's projects or objects; removing
// one drops its schema and its objects and leaves the other whole.
func TestScope(t *testing.T) {
	ctx := t.Context()
	url := sharedURL(t)
	open := func(name string) (*DB, func() error) {
		scoped, remove, err := NewScope(ctx, url, name)
		require.NoError(t, err)
		db := initTestDB(t, Options{URL: scoped})
		return db, func() error { return remove(ctx) }
	}
	a, removeA := open("scope_a")
	b, removeB := open("scope_b")
	ca := commitFiles(t, a, ZeroID, "a", map[string][]byte{"f": randBytes(1, 64<<10)})
	_, err := a.CreateProject(ctx, "p", ca)
	require.NoError(t, err)
	ps, err := b.Projects(ctx)
	require.NoError(t, err)
	assert.Empty(t, ps, "scope b sees none of a's projects")
	cb := commitFiles(t, b, ZeroID, "b", map[string][]byte{"f": randBytes(2, 64<<10)})
	_, err = b.CreateProject(ctx, "p", cb)
	require.NoError(t, err, "the same project name in the other scope")

	rc, err := parseStoreURL(url)
	require.NoError(t, err)
	bucket, err := s3bucket.Open(rc.bucket)
	require.NoError(t, err)
	objects := func(scope string) int {
		objs, err := bucket.List(ctx, scope+"/")
		require.NoError(t, err)
		return len(objs)
	}
	require.Positive(t, objects("scope_a"), "a's packs under its prefix")
	require.Positive(t, objects("scope_b"))

	require.NoError(t, a.Close())
	require.NoError(t, removeA())
	assert.Zero(t, objects("scope_a"), "a's objects removed")
	assert.Positive(t, objects("scope_b"), "b's objects kept")
	_, err = b.Project(ctx, "p")
	assert.NoError(t, err, "b's project kept")
	require.NoError(t, b.Close())
	require.NoError(t, removeB())

	_, _, err = NewScope(ctx, url, "Bad-Name")
	assert.Error(t, err)
}
