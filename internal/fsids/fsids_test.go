package fsids_test

import (
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"layerfs.dev/layerfs/internal/fsids"
	"layerfs.dev/layerfs/internal/testenv"
)

// TestDo: what fn creates is owned by the id, root's privileges over files
// stay (it writes into a directory of another owner, mode 0755), and the
// thread is root again afterwards.
func TestDo(t *testing.T) {
	testenv.RequireRoot(t)
	dir := t.TempDir()
	const id = 2_000_000_123
	sentinel := errors.New("from fn")
	err := fsids.Do(id, func() error {
		if err := os.WriteFile(filepath.Join(dir, "in"), nil, 0o644); err != nil {
			return err
		}
		return sentinel
	})
	require.ErrorIs(t, err, sentinel, "Do returns fn's error")
	require.NoError(t, os.WriteFile(filepath.Join(dir, "after"), nil, 0o644))
	for name, want := range map[string]uint32{"in": id, "after": 0} {
		st, err := os.Stat(filepath.Join(dir, name))
		require.NoError(t, err)
		s := st.Sys().(*syscall.Stat_t)
		assert.Equal(t, [2]uint32{want, want}, [2]uint32{s.Uid, s.Gid}, "owner of %s", name)
	}
}
