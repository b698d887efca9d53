package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net/url"

	"layerfs.dev/layerfs/internal/store/schema"
)

// A database's schema version is how many of its engine's migrations
// (package schema) it has had, in its meta table.

// checkVersion opens the database read-only and fails with ErrNewerSchema
// or ErrNoStore without changing the file.
func checkVersion(ctx context.Context, path string, opts Options) error {
	q := url.Values{}
	q.Set("mode", "ro")
	q.Add("_pragma", fmt.Sprintf("busy_timeout(%d)", opts.BusyTimeout.Milliseconds()))
	c, err := sql.Open("sqlite", "file:"+(&url.URL{Path: path}).EscapedPath()+"?"+q.Encode())
	if err != nil {
		return err
	}
	defer c.Close()
	v, err := schemaVersion(ctx, c)
	if err != nil {
		return err
	}
	if v == 0 {
		return fmt.Errorf("%s has no schema: %w", path, ErrNoStore)
	}
	if v > len(schema.SQLite) {
		return fmt.Errorf("schema version %d, this program knows %d: %w", v, len(schema.SQLite), ErrNewerSchema)
	}
	return nil
}

type queryer interface {
	QueryRowContext(ctx context.Context, q string, args ...any) *sql.Row
}

// schemaVersion reads SQLite's version row; 0 means an empty database.
func schemaVersion(ctx context.Context, q queryer) (int, error) {
	return readSchemaVersion(ctx, q, `SELECT count(*) FROM sqlite_schema WHERE type='table' AND name='meta'`)
}

// readSchemaVersion reads the version row after checking with hasMeta (a
// count of meta tables) that there is one.
func readSchemaVersion(ctx context.Context, q queryer, hasMeta string) (int, error) {
	var n int
	if err := q.QueryRowContext(ctx, hasMeta).Scan(&n); err != nil {
		return 0, fmt.Errorf("read schema: %w", err)
	}
	if n == 0 {
		return 0, nil
	}
	var v int
	err := q.QueryRowContext(ctx, `SELECT value FROM meta WHERE key='schema_version'`).Scan(&v)
	if errors.Is(err, sql.ErrNoRows) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("read schema version: %w", err)
	}
	return v, nil
}

// SchemaVersion is the schema version this code writes (of the embedded
// Store; a shared Store's is PostgresSchemaVersion).
func SchemaVersion() int { return len(schema.SQLite) }

// migrations returns this engine's migrations.
func (db *DB) migrations() []string {
	if db.d.Postgres {
		return schema.Postgres
	}
	return schema.SQLite
}

// migrate brings the schema to version target (all of this engine's
// migrations outside tests) in one write transaction. create says the
// database is new.
func (db *DB) migrate(ctx context.Context, target int, create bool) error {
	migrations := db.migrations()
	return db.withTx(ctx, txWrite, func(tx *tx) error {
		v, err := db.schemaVersion(ctx, tx.Raw())
		if err != nil {
			return err
		}
		if v == 0 && !create {
			return fmt.Errorf("database has no schema: %w", ErrNoStore)
		}
		if v > len(migrations) {
			return fmt.Errorf("schema version %d, this program knows %d: %w", v, len(migrations), ErrNewerSchema)
		}
		for ; v < target; v++ {
			if _, err := tx.Exec(ctx, migrations[v]); err != nil {
				return fmt.Errorf("migrate schema to version %d: %w", v+1, err)
			}
			if _, err := tx.Exec(ctx, `INSERT INTO meta(key, value) VALUES ('schema_version', ?)
				ON CONFLICT(key) DO UPDATE SET value = excluded.value`, v+1); err != nil {
				return fmt.Errorf("migrate schema to version %d: %w", v+1, err)
			}
			db.log.Info("store schema migrated", "dir", db.dir, "version", v+1)
		}
		return nil
	})
}

// schemaVersion reads this engine's version row; 0 means an empty database.
func (db *DB) schemaVersion(ctx context.Context, q queryer) (int, error) {
	if !db.d.Postgres {
		return schemaVersion(ctx, q)
	}
	return readSchemaVersion(ctx, q, `SELECT count(*) FROM pg_tables WHERE schemaname = current_schema() AND tablename = 'meta'`)
}

// PostgresSchemaVersion is the schema version this code writes in a shared
// Store's database.
func PostgresSchemaVersion() int { return len(schema.Postgres) }
