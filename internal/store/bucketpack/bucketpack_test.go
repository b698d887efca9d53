package bucketpack

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"layerfs.dev/layerfs/internal/store/object"
	"layerfs.dev/layerfs/internal/store/pack"
)

// TestChunkCache: bounded by bytes, least recently used out first, a
// corrupted file never served, and the contents found again on reopen.
func TestChunkCache(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "chunks")
	c, err := openChunkCache(dir, 3000)
	require.NoError(t, err)
	var ids []object.ID
	for i := range 4 {
		data := bytes.Repeat([]byte{byte(i + 1)}, 1000)
		id := object.Hash(object.KindChunk, data)
		ids = append(ids, id)
		c.put(id, data)
		if i == 2 {
			c.get(ids[0]) // 0 is now more recent than 1
		}
	}
	require.EqualValues(t, 3000, c.bytes(), "bytes in the cache")
	_, ok := c.get(ids[1])
	require.False(t, ok, "the least recently used chunk was not evicted")
	for _, i := range []int{0, 2, 3} {
		data, ok := c.get(ids[i])
		require.True(t, ok, "chunk %d missing", i)
		require.Equal(t, ids[i], object.Hash(object.KindChunk, data), "chunk %d wrong", i)
	}
	// Corrupt one file: it is dropped, not served.
	p := c.path(ids[2])
	b, err := os.ReadFile(p)
	require.NoError(t, err)
	b[5] ^= 1
	require.NoError(t, os.WriteFile(p, b, 0o600))
	_, ok = c.get(ids[2])
	require.False(t, ok, "a corrupted cache file was served")
	_, err = os.Stat(p)
	require.ErrorIs(t, err, os.ErrNotExist, "the corrupted file is still there")
	// Reopened, it finds what is there, within a smaller bound.
	c2, err := openChunkCache(dir, 1000)
	require.NoError(t, err)
	require.EqualValues(t, 1000, c2.bytes(), "bytes in the reopened cache")
	off, _ := openChunkCache(dir, -1)
	require.Nil(t, off, "a negative bound did not disable the cache")
}

// TestDeadSpoolsRemoved: opening a shared Store's directory removes packs
// spooled by processes that are gone, and leaves those of live ones.
func TestDeadSpoolsRemoved(t *testing.T) {
	dir := t.TempDir()
	// A child that has exited: its pid is free (until reused, which a
	// fresh pid makes unlikely within the test).
	cmd := exec.Command("true")
	require.NoError(t, cmd.Run())
	dead := filepath.Join(dir, fmt.Sprintf("%d-%s", cmd.Process.Pid, pack.Name(7)))
	live := filepath.Join(dir, fmt.Sprintf("%d-%s", os.Getpid(), pack.Name(8)))
	other := filepath.Join(dir, "notes")
	for _, p := range []string{dead, live, other} {
		require.NoError(t, os.WriteFile(p, []byte("x"), 0o600))
	}
	require.NoError(t, RemoveDeadSpools(dir))
	_, err := os.Stat(dead)
	assert.ErrorIs(t, err, os.ErrNotExist, "a dead process's spool is still there")
	for _, p := range []string{live, other} {
		_, err := os.Stat(p)
		assert.NoError(t, err, "%s was removed", p)
	}
}
