package main

import (
	"crypto/sha256"
	"encoding/hex"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"layerfs.dev/layerfs/client"
	"layerfs.dev/layerfs/internal/testenv"
	"layerfs.dev/layerfs/wire"
)

// TestDamagedCache is issue 38's reproduction on the real daemon: a tree
// with a 3 MiB file is imported, one byte of that content's file in the
// Store's cache is flipped, and a new workspace reads the file in a
// sandbox: the read fails with EIO or returns the committed bytes, never
// the flipped ones; the daemon logs a warning naming the file; fsck
// reports a file damaged after the daemon checked it, and --repair
// evicts it; after a restart, a file damaged while the daemon was down is
// not served either.
func TestDamagedCache(t *testing.T) {
	testenv.RequireFUSE(t)
	ctx := t.Context()
	store := filepath.Join(t.TempDir(), "store")
	d := startDaemon(t, store)
	c := d.client(t)

	src := t.TempDir()
	big := make([]byte, 3<<20)
	r := rand.New(rand.NewPCG(38, 1))
	for i := range big {
		big[i] = byte(r.Uint32())
	}
	require.NoError(t, os.WriteFile(filepath.Join(src, "big.bin"), big, 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(src, "small.txt"), []byte("small\n"), 0o644))
	sum := sha256.Sum256(big)
	want := hex.EncodeToString(sum[:])
	_, err := c.CreateProject(ctx, wire.CreateProject{Name: "p", FromPath: src})
	require.NoError(t, err)

	// The content's file, once the fill behind the import placed it.
	path := cacheFileOf(t, store, int64(len(big)))
	id := filepath.Base(path)

	// A new workspace reads the file in a sandbox.
	read := func(why string) {
		t.Helper()
		ws, err := c.CreateWorkspace(ctx, client.WorkspaceSpec{Project: "p", Branch: "main"})
		require.NoError(t, err)
		require.True(t, strings.HasPrefix(ws.Info().DataPath, wire.DataPathOverlay+": metadata erofs, data cached"), "data path %q", ws.Info().DataPath)
		res, err := ws.Exec(ctx, "sha256sum big.bin", client.ExecOptions{})
		require.NoError(t, err)
		switch {
		case res.ExitCode == 0:
			require.Equal(t, want, strings.Fields(string(res.Stdout))[0], "%s: the sandbox read bytes that are not the committed ones", why)
		default:
			require.Contains(t, string(res.Stderr), "Input/output error", "%s: exit %d", why, res.ExitCode)
		}
		require.NoError(t, ws.End(ctx, client.EndOptions{Discard: true}))
	}

	// Damaged before the daemon gave it to the kernel.
	flip(t, path, 1<<20+17)
	read("flipped after the import")
	st, err := c.Stats(ctx)
	require.NoError(t, err)
	require.Positive(t, st.CacheVerified)

	// Damaged after the daemon checked it: fsck finds it, --repair evicts it.
	flip(t, waitFile(t, path), 2<<20+3)
	rep, err := c.Fsck(ctx)
	require.NoError(t, err)
	require.False(t, rep.OK)
	require.Len(t, rep.Problems, 1, "%+v", rep.Problems)
	require.Equal(t, path, rep.Problems[0].Where)
	require.Equal(t, id, rep.Problems[0].Object)
	require.Contains(t, rep.Problems[0].Problem, "cache: ")
	rep, err = c.FsckWith(ctx, wire.FsckRequest{Repair: true})
	require.NoError(t, err)
	require.EqualValues(t, 1, rep.Repaired)
	require.NoFileExists(t, path)
	read("repaired by fsck")
	rep, err = c.Fsck(ctx)
	require.NoError(t, err)
	require.True(t, rep.OK, "%+v", rep.Problems)

	// Damaged while the daemon was down.
	flip(t, waitFile(t, path), 5)
	stopDaemon(t, d)
	require.Contains(t, d.log.String(), "damaged cache file evicted")
	require.Contains(t, d.log.String(), id, "the warning does not name the content")
	d = startDaemon(t, store)
	c = d.client(t)
	read("flipped while the daemon was down")
	stopDaemon(t, d)
	require.Contains(t, d.log.String(), id, "the restarted daemon did not warn of the damaged file")
}

// cacheFileOf waits for the one content file of size bytes in the cache
// of the Store in store and returns its path.
func cacheFileOf(t *testing.T, store string, size int64) string {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		matches, err := filepath.Glob(filepath.Join(store, "cache", "??", "*"))
		require.NoError(t, err)
		for _, m := range matches {
			if fi, err := os.Stat(m); err == nil && fi.Size() == size && len(filepath.Base(m)) == 64 {
				return m
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("no cache file of %d bytes in %s", size, store)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// waitFile waits for the file at path (a content made again) to exist.
func waitFile(t *testing.T, path string) string {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		if _, err := os.Stat(path); err == nil {
			return path
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s was not made again", path)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// flip flips one byte of the file at path, in place, as a failing disk or
// a stray tool would.
func flip(t *testing.T, path string, off int64) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	require.NoError(t, err)
	defer f.Close()
	b := []byte{0}
	_, err = f.ReadAt(b, off)
	require.NoError(t, err)
	b[0] ^= 0x01
	_, err = f.WriteAt(b, off)
	require.NoError(t, err)
}

// stopDaemon stops d and waits for it to exit.
func stopDaemon(t *testing.T, d *daemon) {
	t.Helper()
	require.NoError(t, d.cmd.Process.Signal(syscall.SIGTERM))
	require.Zero(t, d.wait(t, 60*time.Second), "layerfsd exit code")
}
