package store

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestJoin: a directory joins the shared Store at its URL at first use and
// opens it after; another Store's URL, or an embedded Store's directory,
// is refused.
func TestJoin(t *testing.T) {
	ctx := context.Background()
	url := sharedURL(t)
	dir := t.TempDir()
	db, err := Join(ctx, dir, Options{URL: url})
	require.NoError(t, err)
	node := db.Node()
	require.NoError(t, db.Close())
	db, err = Join(ctx, dir, Options{URL: url})
	require.NoError(t, err, "a second start")
	assert.Equal(t, node, db.Node(), "the host keeps its name")
	require.NoError(t, db.Close())
	_, err = Join(ctx, dir, Options{URL: url + "&application_name=x"})
	assert.ErrorIs(t, err, ErrExists, "another Store's URL")
	embedded := newDB(t)
	_, err = Join(ctx, embedded.Dir(), Options{URL: url})
	assert.ErrorIs(t, err, ErrExists, "an embedded Store's directory")
}
