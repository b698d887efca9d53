package main

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"layerfs.dev/layerfs/internal/testenv"
	"layerfs.dev/layerfs/wire"
)

// TestCLISharedStore: `layerfs init --store postgres://...?bucket=s3://...`
// joins a directory to a shared Store, and the CLI and its daemon work on
// it unchanged. Two hosts' directories, each with its own daemon, share
// one database and one bucket: a project imported through one is logged,
// forked and checked out through the other, and GC runs through either.
func TestCLISharedStore(t *testing.T) {
	url := testenv.StoreURL(t)
	t.Setenv("PATH", binaries(t)+string(os.PathListSeparator)+os.Getenv("PATH"))
	t.Setenv("LAYERFS_DAEMON", "")
	host := func(name string) *cli {
		c := &cli{t: t, store: filepath.Join(t.TempDir(), name)}
		// init takes the URL as --store, and the directory from LAYERFS_HOME.
		t.Setenv("LAYERFS_HOME", c.store)
		r := c.runWith([]string{"--store", url, "--json", "init"})
		require.Equal(t, 0, r.code, "init --store URL: %s", r.stderr)
		require.Contains(t, r.stdout, `"shared": true`)
		t.Cleanup(func() {
			c.run("daemon", "stop")
			if t.Failed() {
				if b, err := os.ReadFile(filepath.Join(c.store, daemonLog)); err == nil {
					t.Logf("%s's daemon log:\n%s", name, b)
				}
			}
		})
		return c
	}
	a, b := host("a"), host("b")
	_, err := os.Stat(filepath.Join(a.store, "store.db"))
	require.ErrorIs(t, err, os.ErrNotExist, "a shared Store's directory has a store.db")

	src := filepath.Join(t.TempDir(), "src")
	writeFile(t, filepath.Join(src, "README"), "hello\n")
	writeFile(t, filepath.Join(src, "pkg/a.go"), "package pkg\n")
	a.ok("project", "create", "demo", "--from", src, "-m", "import")

	var log []wire.Commit
	b.json(&log, "log", "demo", "main")
	require.Len(t, log, 1, "b's log of a's import")
	assert.EqualValues(t, 2, log[0].Stats.Files)
	b.ok("branch", "fork", "demo", "dev", "--from", "main")
	work := filepath.Join(t.TempDir(), "work")
	b.ok("checkout", "demo", "dev", work)
	got, err := os.ReadFile(filepath.Join(work, "pkg/a.go"))
	require.NoError(t, err)
	assert.Equal(t, "package pkg\n", string(got), "b's checkout")
	writeFile(t, filepath.Join(work, "pkg/b.go"), "package pkg // b\n")
	b.ok("commit", "demo", "dev", "--from", work, "-m", "add b")

	var branches []wire.Branch
	a.json(&branches, "branch", "list", "demo")
	require.Len(t, branches, 2, "a lists main and b's dev")
	work2 := filepath.Join(t.TempDir(), "work2")
	a.ok("checkout", "demo", "dev", work2)
	got, err = os.ReadFile(filepath.Join(work2, "pkg/b.go"))
	require.NoError(t, err)
	assert.Equal(t, "package pkg // b\n", string(got), "a's checkout of b's commit")

	// GC through a's daemon runs on the shared Store beside b's, and what
	// the branches name stays.
	a.ok("gc")
	work3 := filepath.Join(t.TempDir(), "work3")
	b.ok("checkout", "demo", "dev", work3)
	got, err = os.ReadFile(filepath.Join(work3, "pkg/b.go"))
	require.NoError(t, err)
	assert.Equal(t, "package pkg // b\n", string(got), "b's checkout after a's GC")

	// A workspace lives on its host: b lists it, with a's node, among the
	// fleet's; b's own verbs for it are told where it is (a's auto-started
	// daemon advertises no address to follow).
	var ws wire.Workspace
	a.json(&ws, "ws", "create", "demo", "dev")
	require.NotEmpty(t, ws.Node)
	var all, own []wire.Workspace
	b.json(&all, "ws", "list", "--all")
	require.Len(t, all, 1, "b lists the fleet's workspaces")
	assert.Equal(t, ws.ID, all[0].ID)
	assert.Equal(t, ws.Node, all[0].Node)
	b.json(&own, "ws", "list")
	assert.Empty(t, own, "b's own workspaces")
	b.fail(10, "advertises no address", "ws", "exec", ws.ID, "-c", "true")
	a.ok("ws", "end", ws.ID)
}
