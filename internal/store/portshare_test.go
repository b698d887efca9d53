package store

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// A share is found by its token until it is revoked; a workspace's port
// has one share at most. Both backends.
func TestPortShares(t *testing.T) {
	eachBackend(t, func(t *testing.T, newDB func(testing.TB) *DB) {
		ctx := t.Context()
		db := newDB(t)
		a, err := db.CreatePortShare(ctx, PortShare{Token: "tok-a", Workspace: "ws-1", Port: 8000})
		require.NoError(t, err)
		require.False(t, a.Created.IsZero())
		_, err = db.CreatePortShare(ctx, PortShare{Token: "tok-b", Workspace: "ws-1", Port: 8000})
		require.ErrorIs(t, err, ErrExists, "one share per port")
		_, err = db.CreatePortShare(ctx, PortShare{Token: "ws-1-9000", Workspace: "ws-1", Port: 9000, Public: true})
		require.NoError(t, err)

		got, err := db.PortShareByToken(ctx, "tok-a")
		require.NoError(t, err)
		require.Equal(t, PortShare{Token: "tok-a", Workspace: "ws-1", Port: 8000, Created: a.Created}, got)
		list, err := db.PortShares(ctx, "ws-1")
		require.NoError(t, err)
		require.Len(t, list, 2)
		require.Equal(t, 9000, list[1].Port)
		require.True(t, list[1].Public)

		n, err := db.DeletePortShares(ctx, "ws-1", 8000)
		require.NoError(t, err)
		require.Equal(t, 1, n)
		_, err = db.PortShareByToken(ctx, "tok-a")
		require.ErrorIs(t, err, ErrNotFound, "a revoked token")
		n, err = db.DeletePortShares(ctx, "ws-1", 0)
		require.NoError(t, err)
		require.Equal(t, 1, n)
		list, err = db.PortShares(ctx, "ws-1")
		require.NoError(t, err)
		require.Empty(t, list)
	})
}
