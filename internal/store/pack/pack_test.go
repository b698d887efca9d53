package pack

import (
	"os"
	"testing"

	"github.com/stretchr/testify/require"

	"layerfs.dev/layerfs/internal/account"
	"layerfs.dev/layerfs/internal/store/object"
)

func TestNames(t *testing.T) {
	require.Equal(t, "00000042.pack", Name(42))
	n, ok := ParseName(Name(42))
	require.True(t, ok)
	require.EqualValues(t, 42, n)
	for _, bad := range []string{"42.pack", "0000004x.pack", "00000042.pak", "00000042"} {
		_, ok := ParseName(bad)
		require.False(t, ok, "ParseName(%q)", bad)
	}
	id := object.Hash(object.KindChunk, []byte("x"))
	hdr := Header(id, 7)
	gotID, gotN := ParseHeader(hdr[:])
	require.Equal(t, id, gotID)
	require.EqualValues(t, 7, gotN)
}

// TestSetAppendRollbackRead: both write paths append, roll back to a size,
// read back verified, and refuse a flipped byte.
func TestSetAppendRollbackRead(t *testing.T) {
	for _, direct := range []bool{false, true} {
		var total account.Account
		s := NewSet(t.TempDir(), 1<<20, direct, &total)
		a, err := s.Acquire(t.Context())
		require.NoError(t, err)
		keep, drop := []byte("kept payload"), []byte("rolled back")
		kid, did := object.Hash(object.KindChunk, keep), object.Hash(object.KindChunk, drop)
		off, err := a.Append(kid, keep)
		require.NoError(t, err)
		require.Equal(t, MinOffset, off)
		require.NoError(t, a.Sync())
		size := a.End()
		_, err = a.Append(did, drop)
		require.NoError(t, err)
		require.NoError(t, a.Rollback(size))
		require.NoError(t, a.Sync())
		require.NoError(t, s.Release(a))

		fi, err := os.Stat(s.Path(a.Number()))
		require.NoError(t, err)
		require.Equal(t, size, fi.Size(), "the pack's size after the rollback")
		got, err := s.Read(t.Context(), kid, a.Number(), off, int64(len(keep)))
		require.NoError(t, err)
		require.Equal(t, keep, got)
		require.EqualValues(t, 1, total.Get(account.ChunksRead))

		f, err := os.OpenFile(s.Path(a.Number()), os.O_RDWR, 0)
		require.NoError(t, err)
		_, err = f.WriteAt([]byte{'K' ^ 0x40}, off)
		require.NoError(t, err)
		require.NoError(t, f.Close())
		_, err = s.Read(t.Context(), kid, a.Number(), off, int64(len(keep)))
		require.ErrorIs(t, err, object.ErrCorrupt)
		require.NoError(t, s.Close())
	}
}
