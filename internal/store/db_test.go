package store

import (
	"bytes"
	"database/sql"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestInitOpen(t *testing.T) {
	ctx := t.Context()
	dir := filepath.Join(t.TempDir(), "home")
	_, err := Open(ctx, dir, Options{})
	require.ErrorIs(t, err, ErrNoStore, "Open of nothing")
	db, err := Init(ctx, dir, Options{})
	require.NoError(t, err)
	for _, d := range []string{db.CacheDir(), db.WorkspacesDir(), db.PacksDir()} {
		require.DirExists(t, d)
	}
	c := commitFiles(t, db, ZeroID, "first", map[string][]byte{"a": []byte("hello")})
	_, err = db.CreateProject(ctx, "p", c)
	require.NoError(t, err)
	require.NoError(t, db.Close())
	require.NoError(t, db.Close(), "second Close")
	_, err = db.Projects(ctx)
	require.ErrorIs(t, err, ErrClosed, "use after Close")

	before := fileBytes(t, filepath.Join(dir, dbFile))
	_, err = Init(ctx, dir, Options{})
	require.ErrorIs(t, err, ErrExists, "second Init")
	require.True(t, bytes.Equal(before, fileBytes(t, filepath.Join(dir, dbFile))), "second Init changed store.db")

	db, err = Open(ctx, dir, Options{})
	require.NoError(t, err)
	defer db.Close()
	require.Equal(t, "hello", string(readAll(t, db, c)["a"]), "after reopen")
	p, err := db.Project(ctx, "p")
	require.NoError(t, err, "Project")
	require.Equal(t, 1, p.Layers, "Project's layers")
	require.Equal(t, 1, p.Branches, "Project's branches")
}

func TestOpenEmptyFileIsNoStore(t *testing.T) {
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, dbFile), nil, 0o600))
	_, err := Open(t.Context(), dir, Options{})
	require.ErrorIs(t, err, ErrNoStore)
}

// setVersion writes the schema_version row directly, as a newer LayerFS
// would.
func setVersion(t *testing.T, dir string, v int) {
	t.Helper()
	c, err := sql.Open("sqlite", filepath.Join(dir, dbFile))
	require.NoError(t, err)
	defer c.Close()
	_, err = c.Exec(`UPDATE meta SET value = ? WHERE key = 'schema_version'`, v)
	require.NoError(t, err)
}

func TestNewerSchemaChangesNothing(t *testing.T) {
	ctx := t.Context()
	dir := t.TempDir()
	db, err := Init(ctx, dir, Options{})
	require.NoError(t, err)
	require.NoError(t, db.Close())
	setVersion(t, dir, SchemaVersion()+1)
	path := filepath.Join(dir, dbFile)
	before := fileBytes(t, path)
	st1, _ := os.Stat(path)
	_, err = Open(ctx, dir, Options{})
	require.ErrorIs(t, err, ErrNewerSchema)
	st2, _ := os.Stat(path)
	require.True(t, bytes.Equal(before, fileBytes(t, path)), "Open of a newer store changed store.db")
	require.True(t, st1.ModTime().Equal(st2.ModTime()), "Open of a newer store touched store.db")
	if fi, err := os.Stat(path + "-wal"); err == nil {
		require.Zero(t, fi.Size(), "Open of a newer store wrote a WAL")
	}
}

func TestMigrateFromVersion1(t *testing.T) {
	ctx := t.Context()
	dir := t.TempDir()
	// Build a version-1 store: what the first release wrote.
	db, err := Init(ctx, dir, Options{})
	require.NoError(t, err)
	c := commitFiles(t, db, ZeroID, "v1", map[string][]byte{"f": []byte("data")})
	_, err = db.CreateProject(ctx, "old", c)
	require.NoError(t, err)
	db.Close()
	raw, err := sql.Open("sqlite", filepath.Join(dir, dbFile))
	require.NoError(t, err)
	_, err = raw.Exec(`DROP TABLE workspaces; DROP TABLE images; DROP TABLE derivations; DROP TABLE checkpoints; DROP TABLE port_shares;
		ALTER TABLE projects DROP COLUMN image; UPDATE meta SET value = 1 WHERE key = 'schema_version'`)
	require.NoError(t, err)
	raw.Close()

	db, err = Open(ctx, dir, Options{})
	require.NoError(t, err)
	defer db.Close()
	var v int
	require.NoError(t, db.withTx(ctx, txRead, func(tx *tx) error {
		var err error
		v, err = schemaVersion(ctx, tx.Raw())
		return err
	}))
	require.Equal(t, SchemaVersion(), v, "version after migration")
	_, err = db.CreateWorkspace(ctx, Workspace{ID: "w1", Project: "old", Base: c, Head: c})
	require.NoError(t, err, "workspaces table after migration")
	require.Equal(t, "data", string(readAll(t, db, c)["f"]), "data after migration")
	mustFsck(t, db)
}

func TestValidName(t *testing.T) {
	for _, n := range []string{"a", "main", "0", "a.b-c_d", string(bytes.Repeat([]byte("x"), 63))} {
		assert.NoError(t, ValidName(n), "ValidName(%q)", n)
	}
	for _, n := range []string{"", "A", "-a", ".a", "_a", "a/b", "a b", "é", "a\n", string(bytes.Repeat([]byte("x"), 64)), ".."} {
		assert.ErrorIs(t, ValidName(n), ErrInvalidName, "ValidName(%q)", n)
	}
}

func TestDefaultDir(t *testing.T) {
	t.Setenv("LAYERFS_HOME", "/x/y")
	assert.Equal(t, "/x/y", DefaultDir(), "with LAYERFS_HOME")
	t.Setenv("LAYERFS_HOME", "")
	t.Setenv("HOME", "/home/u")
	assert.Equal(t, "/home/u/.local/share/layerfs", DefaultDir(), "without LAYERFS_HOME")
}
