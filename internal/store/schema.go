package store

import (
	"context"
	"fmt"
)

// migrations[i] takes the schema from version i to i+1. Append only: a
// released migration never changes, so stores written by older code
// upgrade in order. The version lives in meta('schema_version').
var migrations = []string{
	// 1: objects, the chunk index and refs.
	`
CREATE TABLE meta (
	key   TEXT PRIMARY KEY,
	value ANY
) STRICT;

-- Chunk payloads live in packs/NNNNNNNN.pack; off is where the payload
-- starts (after its record header), len its length. No index on pack:
-- only GC and fsck group by pack, and a second b-tree would tax every
-- insert on the capture path.
CREATE TABLE chunks (
	id   BLOB PRIMARY KEY CHECK (length(id) = 32),
	pack INTEGER NOT NULL,
	off  INTEGER NOT NULL,
	len  INTEGER NOT NULL
) STRICT, WITHOUT ROWID;

-- Manifests, trees and commits: canonical bytes keyed by id.
CREATE TABLE objects (
	id   BLOB NOT NULL UNIQUE CHECK (length(id) = 32),
	kind INTEGER NOT NULL CHECK (kind IN (2, 3, 4)),
	data BLOB NOT NULL
) STRICT;

CREATE TABLE projects (
	name    TEXT PRIMARY KEY,
	created INTEGER NOT NULL
) STRICT;

CREATE TABLE layers (
	project TEXT NOT NULL REFERENCES projects(name) ON DELETE CASCADE,
	idx     INTEGER NOT NULL CHECK (idx >= 1),
	commit_id BLOB NOT NULL REFERENCES objects(id),
	created INTEGER NOT NULL,
	PRIMARY KEY (project, idx)
) STRICT;
CREATE INDEX layers_commit ON layers(commit_id);

CREATE TABLE branches (
	project TEXT NOT NULL REFERENCES projects(name) ON DELETE CASCADE,
	name    TEXT NOT NULL,
	head    BLOB NOT NULL REFERENCES objects(id),
	created INTEGER NOT NULL,
	updated INTEGER NOT NULL,
	PRIMARY KEY (project, name)
) STRICT;
CREATE INDEX branches_head ON branches(head);
`,
	// 2: workspace records.
	`
CREATE TABLE workspaces (
	id         TEXT PRIMARY KEY,
	project    TEXT NOT NULL REFERENCES projects(name),
	branch     TEXT NOT NULL,
	base       BLOB NOT NULL,
	head       BLOB NOT NULL,
	mount_path TEXT NOT NULL,
	upper_dir  TEXT NOT NULL,
	state      TEXT NOT NULL,
	created    INTEGER NOT NULL,
	updated    INTEGER NOT NULL,
	options    BLOB
) STRICT;
`,
}

// SchemaVersion is the schema version this code writes.
func SchemaVersion() int { return len(migrations) }

// migrate brings the schema to version target (len(migrations) outside
// tests) in one write transaction. create says the database is new.
func (db *DB) migrate(ctx context.Context, target int, create bool) error {
	return db.withTx(ctx, txWrite, func(tx *tx) error {
		v, err := schemaVersion(ctx, tx.tx)
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
			if _, err := tx.exec(ctx, migrations[v]); err != nil {
				return fmt.Errorf("migrate schema to version %d: %w", v+1, err)
			}
			if _, err := tx.exec(ctx, `INSERT INTO meta(key, value) VALUES ('schema_version', ?)
				ON CONFLICT(key) DO UPDATE SET value = excluded.value`, v+1); err != nil {
				return fmt.Errorf("migrate schema to version %d: %w", v+1, err)
			}
			db.log.Info("store schema migrated", "dir", db.dir, "version", v+1)
		}
		return nil
	})
}
