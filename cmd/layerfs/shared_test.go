package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"layerfs.dev/layerfs/internal/testenv"
	"layerfs.dev/layerfs/wire"
)

// TestCLISharedStore: `layerfs init --store postgres://...?bucket=s3://...`
// joins a directory to a shared Store, and the CLI and its daemon work on
// it unchanged. Two hosts' directories, each with its own daemon, share
// one database and one bucket: a project imported through one is logged,
// forked and checked out through the other.
func TestCLISharedStore(t *testing.T) {
	url := testenv.StoreURL(t)
	t.Setenv("PATH", binaries(t)+string(os.PathListSeparator)+os.Getenv("PATH"))
	t.Setenv("LAYERFS_DAEMON", "")
	host := func(name string) *cli {
		c := &cli{t: t, store: filepath.Join(t.TempDir(), name)}
		// init takes the URL as --store, and the directory from LAYERFS_HOME.
		t.Setenv("LAYERFS_HOME", c.store)
		r := c.runWith([]string{"--store", url, "--json", "init"})
		if r.code != 0 || !strings.Contains(r.stdout, `"shared": true`) {
			t.Fatalf("init --store URL: exit %d, %s %s", r.code, r.stdout, r.stderr)
		}
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
	if _, err := os.Stat(filepath.Join(a.store, "store.db")); err == nil {
		t.Fatal("a shared Store's directory has a store.db")
	}

	src := filepath.Join(t.TempDir(), "src")
	writeFile(t, filepath.Join(src, "README"), "hello\n")
	writeFile(t, filepath.Join(src, "pkg/a.go"), "package pkg\n")
	a.ok("project", "create", "demo", "--from", src, "-m", "import")

	var log []wire.Commit
	b.json(&log, "log", "demo", "main")
	if len(log) != 1 || log[0].Stats.Files != 2 {
		t.Fatalf("b's log of a's import: %+v", log)
	}
	b.ok("branch", "fork", "demo", "dev", "--from", "main")
	work := filepath.Join(t.TempDir(), "work")
	b.ok("checkout", "demo", "dev", work)
	if got, err := os.ReadFile(filepath.Join(work, "pkg/a.go")); err != nil || string(got) != "package pkg\n" {
		t.Fatalf("b's checkout: %q, %v", got, err)
	}
	writeFile(t, filepath.Join(work, "pkg/b.go"), "package pkg // b\n")
	b.ok("commit", "demo", "dev", "--from", work, "-m", "add b")

	var branches []wire.Branch
	a.json(&branches, "branch", "list", "demo")
	if len(branches) != 2 {
		t.Fatalf("a lists branches %+v, want main and b's dev", branches)
	}
	work2 := filepath.Join(t.TempDir(), "work2")
	a.ok("checkout", "demo", "dev", work2)
	if got, err := os.ReadFile(filepath.Join(work2, "pkg/b.go")); err != nil || string(got) != "package pkg // b\n" {
		t.Fatalf("a's checkout of b's commit: %q, %v", got, err)
	}
}
