package store

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"os"
	"path/filepath"
	"testing"
)

func TestInitOpen(t *testing.T) {
	ctx := context.Background()
	dir := filepath.Join(t.TempDir(), "home")
	if _, err := Open(ctx, dir, Options{}); !errors.Is(err, ErrNoStore) {
		t.Fatalf("Open of nothing = %v, want ErrNoStore", err)
	}
	db, err := Init(ctx, dir, Options{})
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range []string{db.CacheDir(), db.WorkspacesDir(), db.PacksDir()} {
		if fi, err := os.Stat(d); err != nil || !fi.IsDir() {
			t.Fatalf("%s: %v", d, err)
		}
	}
	c := commitFiles(t, db, ZeroID, "first", map[string][]byte{"a": []byte("hello")})
	if _, err := db.CreateProject(ctx, "p", c); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if _, err := db.Projects(ctx); !errors.Is(err, ErrClosed) {
		t.Fatalf("use after Close = %v, want ErrClosed", err)
	}

	before := fileBytes(t, filepath.Join(dir, dbFile))
	if _, err := Init(ctx, dir, Options{}); !errors.Is(err, ErrExists) {
		t.Fatalf("second Init = %v, want ErrExists", err)
	}
	if after := fileBytes(t, filepath.Join(dir, dbFile)); !bytes.Equal(before, after) {
		t.Fatal("second Init changed store.db")
	}

	db, err = Open(ctx, dir, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if got := readAll(t, db, c); string(got["a"]) != "hello" {
		t.Fatalf("after reopen read %q", got["a"])
	}
	p, err := db.Project(ctx, "p")
	if err != nil || p.Layers != 1 || p.Branches != 1 {
		t.Fatalf("Project = %+v, %v", p, err)
	}
}

func TestOpenEmptyFileIsNoStore(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, dbFile), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Open(context.Background(), dir, Options{}); !errors.Is(err, ErrNoStore) {
		t.Fatalf("Open = %v, want ErrNoStore", err)
	}
}

// setVersion writes the schema_version row directly, as a newer LayerFS
// would.
func setVersion(t *testing.T, dir string, v int) {
	t.Helper()
	c, err := sql.Open("sqlite", filepath.Join(dir, dbFile))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Exec(`UPDATE meta SET value = ? WHERE key = 'schema_version'`, v); err != nil {
		t.Fatal(err)
	}
}

func TestNewerSchemaChangesNothing(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	db, err := Init(ctx, dir, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	setVersion(t, dir, SchemaVersion()+1)
	path := filepath.Join(dir, dbFile)
	before := fileBytes(t, path)
	st1, _ := os.Stat(path)
	if _, err := Open(ctx, dir, Options{}); !errors.Is(err, ErrNewerSchema) {
		t.Fatalf("Open = %v, want ErrNewerSchema", err)
	}
	st2, _ := os.Stat(path)
	if !bytes.Equal(before, fileBytes(t, path)) || !st1.ModTime().Equal(st2.ModTime()) {
		t.Fatal("Open of a newer store changed store.db")
	}
	if _, err := os.Stat(path + "-wal"); err == nil {
		if fi, _ := os.Stat(path + "-wal"); fi.Size() != 0 {
			t.Fatal("Open of a newer store wrote a WAL")
		}
	}
}

func TestMigrateFromVersion1(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	// Build a version-1 store: what the first release wrote.
	db, err := Init(ctx, dir, Options{})
	if err != nil {
		t.Fatal(err)
	}
	c := commitFiles(t, db, ZeroID, "v1", map[string][]byte{"f": []byte("data")})
	if _, err := db.CreateProject(ctx, "old", c); err != nil {
		t.Fatal(err)
	}
	db.Close()
	raw, err := sql.Open("sqlite", filepath.Join(dir, dbFile))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := raw.Exec(`DROP TABLE workspaces; UPDATE meta SET value = 1 WHERE key = 'schema_version'`); err != nil {
		t.Fatal(err)
	}
	raw.Close()

	db, err = Open(ctx, dir, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var v int
	if err := db.withTx(ctx, txRead, func(tx *tx) error {
		var err error
		v, err = schemaVersion(ctx, tx.tx)
		return err
	}); err != nil || v != SchemaVersion() {
		t.Fatalf("version after migration = %d, %v; want %d", v, err, SchemaVersion())
	}
	if _, err := db.CreateWorkspace(ctx, Workspace{ID: "w1", Project: "old", Base: c, Head: c}); err != nil {
		t.Fatalf("workspaces table after migration: %v", err)
	}
	if got := readAll(t, db, c); string(got["f"]) != "data" {
		t.Fatal("data lost in migration")
	}
	mustFsck(t, db)
}

func TestValidName(t *testing.T) {
	for _, n := range []string{"a", "main", "0", "a.b-c_d", string(bytes.Repeat([]byte("x"), 63))} {
		if err := ValidName(n); err != nil {
			t.Errorf("ValidName(%q) = %v", n, err)
		}
	}
	for _, n := range []string{"", "A", "-a", ".a", "_a", "a/b", "a b", "é", "a\n", string(bytes.Repeat([]byte("x"), 64)), ".."} {
		if err := ValidName(n); !errors.Is(err, ErrInvalidName) {
			t.Errorf("ValidName(%q) = %v, want ErrInvalidName", n, err)
		}
	}
}

func TestDefaultDir(t *testing.T) {
	t.Setenv("LAYERFS_HOME", "/x/y")
	if got := DefaultDir(); got != "/x/y" {
		t.Fatalf("DefaultDir = %q", got)
	}
	t.Setenv("LAYERFS_HOME", "")
	t.Setenv("HOME", "/home/u")
	if got := DefaultDir(); got != "/home/u/.local/share/layerfs" {
		t.Fatalf("DefaultDir = %q", got)
	}
}
