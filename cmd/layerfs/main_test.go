package main

import (
	"bytes"
	"database/sql"
	"encoding/json"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	_ "modernc.org/sqlite"

	"layerfs.dev/layerfs/wire"
)

// cli runs the command in-process against one store.
type cli struct {
	t     *testing.T
	store string
}

type result struct {
	code           int
	stdout, stderr string
}

func (c *cli) run(args ...string) result {
	c.t.Helper()
	return c.runWith(append([]string{"--store", c.store}, args...))
}

// runWith runs the command with exactly args (no --store of c's).
func (c *cli) runWith(args []string) result {
	c.t.Helper()
	var out, errb bytes.Buffer
	code := run(c.t.Context(), args, &out, &errb)
	return result{code, out.String(), errb.String()}
}

// ok runs a command that must succeed.
func (c *cli) ok(args ...string) string {
	c.t.Helper()
	r := c.run(args...)
	if r.code != 0 {
		c.t.Fatalf("layerfs %s: exit %d, stderr %q", strings.Join(args, " "), r.code, r.stderr)
	}
	return r.stdout
}

// fail runs a command that must fail with code and a one-line error
// containing want.
func (c *cli) fail(code int, want string, args ...string) {
	c.t.Helper()
	r := c.run(args...)
	if r.code != code || !strings.Contains(r.stderr, want) || strings.Count(r.stderr, "\n") != 1 {
		c.t.Errorf("layerfs %s: exit %d, stderr %q; want exit %d and one line containing %q", strings.Join(args, " "), r.code, r.stderr, code, want)
	}
}

func (c *cli) json(v any, args ...string) {
	c.t.Helper()
	out := c.ok(append(args, "--json")...)
	require.NoError(c.t, json.Unmarshal([]byte(out), v), "layerfs %s --json\n%s", strings.Join(args, " "), out)
}

func writeFile(t *testing.T, p, s string) {
	t.Helper()
	require.NoError(t, os.MkdirAll(filepath.Dir(p), 0o755))
	require.NoError(t, os.WriteFile(p, []byte(s), 0o644))
}

// newCLI makes a Store. The verbs run in this process and reach the Store
// through its daemon, which the first of them starts as a user's would:
// layerfsd (built for the test) is on PATH. The daemon is stopped at the
// end of the test.
func newCLI(t *testing.T) *cli {
	t.Setenv("PATH", binaries(t)+string(os.PathListSeparator)+os.Getenv("PATH"))
	t.Setenv("LAYERFS_DAEMON", "")
	c := &cli{t: t, store: filepath.Join(t.TempDir(), "store")}
	c.ok("init")
	t.Cleanup(func() {
		c.run("daemon", "stop")
		if t.Failed() {
			if b, err := os.ReadFile(filepath.Join(c.store, daemonLog)); err == nil {
				t.Logf("daemon log:\n%s", b)
			}
		}
	})
	return c
}

func TestCLIFlow(t *testing.T) {
	c := newCLI(t)
	src := filepath.Join(t.TempDir(), "src")
	writeFile(t, filepath.Join(src, "README"), "hello\n")
	writeFile(t, filepath.Join(src, "pkg/a.go"), "package pkg\n")
	writeFile(t, filepath.Join(src, "odd\nname"), "x")

	var created wire.Project
	c.json(&created, "project", "create", "demo", "--from", src, "-m", "import")
	if created.Name != "demo" || created.Layers != 1 || created.Branches != 1 {
		t.Fatalf("project create: %+v", created)
	}
	var first []wire.Commit
	c.json(&first, "log", "demo", "main")
	if len(first) != 1 || first[0].Stats.Files != 3 || len(first[0].ID) != 64 {
		t.Fatalf("log of the first layer: %+v", first)
	}
	c.ok("project", "create", "empty")
	var projects []struct {
		Name     string
		Layers   int
		Branches int
	}
	c.json(&projects, "project", "list")
	if len(projects) != 2 || projects[0].Name != "demo" || projects[0].Layers != 1 || projects[0].Branches != 1 {
		t.Fatalf("project list: %+v", projects)
	}
	if out := c.ok("project", "list"); !strings.Contains(out, "NAME") || !strings.Contains(out, "demo") {
		t.Errorf("project list table:\n%s", out)
	}

	c.ok("branch", "fork", "demo", "dev", "--from", "layer:1")
	work := filepath.Join(t.TempDir(), "work")
	c.ok("checkout", "demo", "dev", work)
	if b, err := os.ReadFile(filepath.Join(work, "odd\nname")); err != nil || string(b) != "x" {
		t.Fatalf("checkout: odd name: %q %v", b, err)
	}
	writeFile(t, filepath.Join(work, "pkg/b.go"), "package pkg // b\n")
	require.NoError(t, os.Remove(filepath.Join(work, "README")))
	var pub struct {
		Result string
		Commit string
	}
	c.json(&pub, "commit", "demo", "dev", "--from", work, "-m", "add b, drop README")
	if pub.Result != "created" {
		t.Fatalf("commit: %+v", pub)
	}
	c.json(&pub, "commit", "demo", "dev", "--from", work)
	if pub.Result != "up-to-date" {
		t.Fatalf("second commit of the same tree: %+v", pub)
	}
	var log []struct {
		ID      string
		Message string
	}
	c.json(&log, "log", "demo", "dev")
	if len(log) != 2 || log[0].Message != "add b, drop README" || log[1].Message != "import" {
		t.Fatalf("log: %+v", log)
	}
	var diff wire.DiffPage
	c.json(&diff, "diff", "demo", "main", "dev")
	got := []string{}
	for _, d := range diff.Changes {
		got = append(got, d.Kind+" "+d.Path)
	}
	if strings.Join(got, ",") != "removed README,modified pkg,added pkg/b.go" {
		t.Errorf("diff: %q", got)
	}
	c.json(&diff, "diff", "demo", "main", "dev", "--limit", "1")
	if len(diff.Changes) != 1 || diff.Next != "README" {
		t.Errorf("diff page 1: %+v", diff)
	}
	c.json(&diff, "diff", "demo", "main", "dev", "--limit", "1", "--after", diff.Next)
	if len(diff.Changes) != 1 || diff.Changes[0].Path != "pkg" {
		t.Errorf("diff page 2: %+v", diff)
	}
	if out := c.ok("log", "demo", "dev", "-n", "1"); strings.Count(out, "\n") != 2 {
		t.Errorf("log -n 1:\n%s", out)
	}
	assert.Contains(t, c.ok("diff", "demo", "main", log[0].ID[:10]), "added", "diff by commit prefix")
	var layer struct{ Index int }
	c.json(&layer, "layer", "add", "demo", "dev")
	if layer.Index != 2 {
		t.Errorf("layer add: %+v", layer)
	}
	var layers []struct{ Index int }
	c.json(&layers, "layer", "list", "demo")
	if len(layers) != 2 {
		t.Errorf("layer list: %+v", layers)
	}
	out := filepath.Join(t.TempDir(), "out")
	c.ok("checkout", "demo", "layer:2", out)
	if b, _ := os.ReadFile(filepath.Join(out, "pkg/b.go")); string(b) != "package pkg // b\n" {
		t.Errorf("checkout layer:2: b.go = %q", b)
	}
	var branches []struct{ Name string }
	c.json(&branches, "branch", "list", "demo")
	if len(branches) != 2 {
		t.Errorf("branch list: %+v", branches)
	}
	c.ok("branch", "delete", "demo", "dev")
	c.json(&branches, "branch", "list", "demo")
	if len(branches) != 1 {
		t.Errorf("branch list after delete: %+v", branches)
	}
	var fsck struct{ Problems []any }
	c.json(&fsck, "fsck")
	if len(fsck.Problems) != 0 {
		t.Errorf("fsck: %+v", fsck)
	}
	var stats wire.StoreStats
	c.json(&stats, "stats")
	if stats.Objects["commit"] < 3 || stats.Projects != 2 || stats.Branches != 2 || stats.Layers != 3 {
		t.Errorf("stats: %+v", stats)
	}
	// dev's commits stay: layer 2 reaches them.
	var gc wire.GCResult
	c.json(&gc, "gc", "--dry-run")
	if !gc.DryRun || gc.ObjectsRemoved != 0 || gc.LiveCommits != 3 {
		t.Errorf("gc --dry-run: %+v", gc)
	}
	c.ok("gc")
	c.ok("stats")
}

func TestCLIBadInput(t *testing.T) {
	c := newCLI(t)
	src := t.TempDir()
	writeFile(t, filepath.Join(src, "f"), "f")
	c.ok("project", "create", "p", "--from", src)
	before := c.ok("project", "list", "--json")

	c.fail(4, "already exists", "init")
	c.fail(4, "already exists", "project", "create", "p")
	c.fail(2, "not a valid name", "project", "create", "Not_Valid")
	c.fail(2, "not a valid name", "project", "create", "-", "--from", src)
	c.fail(3, "no such file or directory", "project", "create", "q", "--from", filepath.Join(src, "missing"))
	c.fail(3, "not found", "branch", "list", "nope")
	c.fail(3, "not found", "log", "nope", "main")
	c.fail(3, "not found", "log", "p", "nope")
	c.fail(3, "not found", "diff", "p", "main", "layer:7")
	c.fail(3, "not found", "checkout", "p", "nope", filepath.Join(t.TempDir(), "x"))
	c.fail(3, "not found", "branch", "fork", "p", "b", "--from", "nope")
	c.fail(2, "not a valid name", "branch", "fork", "p", "B A D", "--from", "main")
	c.fail(4, "already exists", "branch", "fork", "p", "main", "--from", "main")
	c.fail(3, "not found", "branch", "delete", "p", "nope")
	c.fail(3, "not found", "layer", "add", "p", "nope")
	c.fail(3, "no such file or directory", "commit", "p", "main", "--from", filepath.Join(src, "missing"))
	c.fail(2, "not empty", "checkout", "p", "main", src)
	// Usage errors exit 2, as invalid arguments do; each error class has
	// its exit code (package errclass).
	c.fail(2, "accepts 1 arg", "project", "create")
	c.fail(2, "unknown flag", "project", "list", "--bogus")
	c.fail(2, "--from REF is required", "branch", "fork", "p", "b")
	c.fail(2, "--from DIR is required", "commit", "p", "main")
	c.fail(2, "unknown command", "frobnicate")
	c.fail(2, "--fs: bad file system spec", "bench", "fs", "--fs", "bogus", "--cells", "C01")
	c.fail(2, "--fs: bad file system spec", "cells", "run", "--fs", "ext4:xx", "--cells", "C01", "--out", t.TempDir())
	c.fail(2, `--stores "sqlite"`, "cells", "run", "--stores", "sqlite", "--cells", "C01", "--out", t.TempDir())
	c.fail(2, "--stores shared needs --store-url", "cells", "run", "--stores", "embedded,shared", "--store-url=", "--cells", "C01", "--out", t.TempDir())
	c.fail(2, `--figures "bogus"`, "bench", "fleet", "--url", "postgres://x?bucket=s3://h/b", "--figures", "latency,bogus")
	c.fail(2, "--large-tree at least 100", "bench", "session", "--large-tree", "5")
	c.fail(2, "--n, --workers, --execs and --rounds must be at least 1", "bench", "spawn", "--n", "0")
	c.fail(2, `--parts "bogus"`, "bench", "spawn", "--parts", "exec,bogus")
	c.fail(2, "--fs: bad file system spec", "bench", "spawn", "--fs", "bogus")
	// Nothing changed.
	if after := c.ok("project", "list", "--json"); after != before {
		t.Errorf("failed commands changed the projects:\n%s\n%s", before, after)
	}
	var branches []struct{ Name string }
	c.json(&branches, "branch", "list", "p")
	if len(branches) != 1 {
		t.Errorf("branches: %+v", branches)
	}
	// No store.
	none := &cli{t: t, store: filepath.Join(t.TempDir(), "none")}
	none.fail(3, "no store", "project", "list")
	_, err := os.Stat(none.store)
	assert.ErrorIs(t, err, os.ErrNotExist, "a failed verb created the store directory")
}

func TestCLINewerSchema(t *testing.T) {
	c := newCLI(t)
	c.ok("project", "create", "p")
	// Forge a store written by a newer LayerFS.
	db, err := sql.Open("sqlite", filepath.Join(c.store, "store.db"))
	require.NoError(t, err)
	_, err = db.Exec(`UPDATE meta SET value = 999 WHERE key = 'schema_version'`)
	require.NoError(t, err)
	require.NoError(t, db.Close())
	// The daemon that opened it is stopped; the next verb starts one,
	// which refuses the Store.
	c.ok("daemon", "stop")
	c.fail(1, "newer", "project", "list")
	c.fail(1, "newer", "project", "create", "q")
	c.fail(1, "newer", "fsck")
	db, err = sql.Open("sqlite", filepath.Join(c.store, "store.db"))
	require.NoError(t, err)
	defer db.Close()
	var v, n int
	if err := db.QueryRow(`SELECT value FROM meta WHERE key = 'schema_version'`).Scan(&v); err != nil || v != 999 {
		t.Errorf("schema version %d (%v): the newer store was touched", v, err)
	}
	if err := db.QueryRow(`SELECT count(*) FROM projects`).Scan(&n); err != nil || n != 1 {
		t.Errorf("%d projects (%v), want 1", n, err)
	}
}

// TestCLIGCAndCorruption: deleting a branch that holds 50 MiB of unique
// data and collecting reclaims it; a flipped pack byte is named by fsck.
func TestCLIGCAndCorruption(t *testing.T) {
	c := newCLI(t)
	src := filepath.Join(t.TempDir(), "src")
	writeFile(t, filepath.Join(src, "keep"), "kept content\n")
	c.ok("project", "create", "p", "--from", src)
	c.ok("branch", "fork", "p", "big", "--from", "main")
	work := filepath.Join(t.TempDir(), "work")
	c.ok("checkout", "p", "big", work)
	big := make([]byte, 50<<20)
	r := rand.New(rand.NewPCG(5, 6))
	for i := 0; i+8 <= len(big); i += 8 {
		v := r.Uint64()
		for j := range 8 {
			big[i+j] = byte(v >> (8 * j))
		}
	}
	require.NoError(t, os.WriteFile(filepath.Join(work, "big"), big, 0o644))
	c.ok("commit", "p", "big", "--from", work)
	c.ok("branch", "delete", "p", "big")
	var gc wire.GCResult
	c.json(&gc, "gc", "--dry-run")
	if !gc.DryRun || gc.ObjectsRemoved == 0 || gc.DeadChunkBytes < 50<<20 || gc.BytesReclaimed != 0 {
		t.Errorf("gc --dry-run: %+v, want the 50 MiB counted and nothing reclaimed", gc)
	}
	c.json(&gc, "gc")
	if gc.BytesReclaimed < 45<<20 {
		t.Errorf("gc reclaimed %d bytes, want at least 45 MiB", gc.BytesReclaimed)
	}
	out := filepath.Join(t.TempDir(), "out")
	c.ok("checkout", "p", "main", out)
	if b, _ := os.ReadFile(filepath.Join(out, "keep")); string(b) != "kept content\n" {
		t.Errorf("after gc: keep = %q", b)
	}
	c.ok("fsck")

	// Flip a byte of the kept content in its pack.
	packs, _ := filepath.Glob(filepath.Join(c.store, "packs", "*"))
	flipped := false
	for _, p := range packs {
		b, err := os.ReadFile(p)
		if err != nil {
			continue
		}
		if i := bytes.Index(b, []byte("kept content")); i >= 0 {
			b[i] ^= 0x20
			require.NoError(t, os.WriteFile(p, b, 0o600))
			flipped = true
		}
	}
	if !flipped {
		t.Fatalf("kept content not found in packs %v", packs)
	}
	r2 := c.run("fsck")
	if r2.code != 9 || !strings.Contains(r2.stdout+r2.stderr, "pack") {
		t.Errorf("fsck after a flipped byte: exit %d\n%s%s", r2.code, r2.stdout, r2.stderr)
	}
	c.fail(9, "corrupt", "checkout", "p", "main", filepath.Join(t.TempDir(), "bad"))
}

// TestParseOwner: --owner takes a name, a uid or uid:gid, and names what
// it cannot read.
func TestParseOwner(t *testing.T) {
	for in, want := range map[string]wire.Owner{
		"root":      {UID: 0, GID: 0},
		"0":         {UID: 0, GID: 0},
		"1000:1001": {UID: 1000, GID: 1001},
		"4242":      {UID: 4242, GID: 4242}, // no such user: the same number
	} {
		got, err := parseOwner(in)
		if err != nil || got != want {
			t.Errorf("parseOwner(%q) = %+v, %v; want %+v", in, got, err, want)
		}
	}
	for _, in := range []string{"no-such-user-here", "1:x", "-1"} {
		if _, err := parseOwner(in); err == nil {
			t.Errorf("parseOwner(%q) accepted", in)
		}
	}
}

// TestCLIFsckCache: fsck reads the cache of contents too: a byte flipped
// in a content's cache file is a problem naming the file (exit 9,
// corrupt), and fsck --repair evicts it (exit 0, repaired 1), after
// which fsck is clean; stats says whether the cache is sealed with
// fs-verity and counts what the daemon verified.
func TestCLIFsckCache(t *testing.T) {
	c := newCLI(t)
	src := t.TempDir()
	writeFile(t, filepath.Join(src, "f"), strings.Repeat("committed content\n", 1000))
	c.ok("project", "create", "p", "--from", src)
	var path string
	require.Eventually(t, func() bool {
		m, _ := filepath.Glob(filepath.Join(c.store, "cache", "??", "*"))
		for _, p := range m {
			if fi, err := os.Stat(p); err == nil && fi.Size() == 18000 {
				path = p
				return true
			}
		}
		return false
	}, 30*time.Second, 20*time.Millisecond, "the content's cache file")
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	require.NoError(t, err)
	_, err = f.WriteAt([]byte("C"), 100)
	require.NoError(t, err)
	require.NoError(t, f.Close())

	c.fail(9, path, "fsck")
	var rep wire.FsckReport
	c.json(&rep, "fsck", "--repair")
	if rep.Repaired != 1 || len(rep.Problems) != 1 || rep.Problems[0].Where != path {
		t.Errorf("fsck --repair: %+v", rep)
	}
	require.NoFileExists(t, path)
	c.json(&rep, "fsck")
	if !rep.OK || rep.CacheFiles != 0 {
		t.Errorf("fsck after the repair: %+v", rep)
	}
	var st wire.StoreStats
	c.json(&st, "stats")
	if st.CacheVerity == "" || st.CacheVerified+st.CacheUnverified != st.CacheFiles {
		t.Errorf("stats: cache_verity %q, verified %d + unverified %d != %d contents", st.CacheVerity, st.CacheVerified, st.CacheUnverified, st.CacheFiles)
	}
}
