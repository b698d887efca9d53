package schema

// SQLite is the embedded Store's migrations: SQLite[i] takes the schema
// from version i to i+1.
var SQLite = []string{
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
	// 3: images (named trees with their OCI config), derivations (what a
	// step applied to a commit gave, so an import or a build does it once),
	// the image commit a workspace's root stands on, a project's default
	// image.
	`
CREATE TABLE images (
	name      TEXT PRIMARY KEY,
	digest    TEXT NOT NULL,
	commit_id BLOB NOT NULL REFERENCES objects(id),
	record    BLOB NOT NULL,
	created   INTEGER NOT NULL
) STRICT;
CREATE INDEX images_commit ON images(commit_id);
CREATE INDEX images_digest ON images(digest);

CREATE TABLE derivations (
	key       TEXT PRIMARY KEY,
	commit_id BLOB NOT NULL,
	created   INTEGER NOT NULL
) STRICT;

ALTER TABLE workspaces ADD COLUMN image BLOB;
ALTER TABLE projects ADD COLUMN image TEXT NOT NULL DEFAULT '';
`,
	// 4: checkpoint records (package store's checkpoint.go).
	`
CREATE TABLE checkpoints (
	id        TEXT PRIMARY KEY,
	project   TEXT NOT NULL REFERENCES projects(name),
	workspace TEXT NOT NULL,
	commit_id BLOB NOT NULL,
	files     BLOB NOT NULL,
	message   TEXT NOT NULL,
	meta      BLOB,
	created   INTEGER NOT NULL
) STRICT;
CREATE INDEX checkpoints_project ON checkpoints(project, created);
`,
	// 5: the share tokens of workspaces' ports (package store's
	// portshare.go).
	`
CREATE TABLE port_shares (
	token     TEXT PRIMARY KEY,
	workspace TEXT NOT NULL,
	port      INTEGER NOT NULL,
	public    INTEGER NOT NULL,
	created   INTEGER NOT NULL,
	UNIQUE (workspace, port)
) STRICT;
`,
}

// Postgres is a shared Store's migrations, versioned on their own. The
// tables are the embedded Store's, in PostgreSQL's types, plus:
//   - packs: a pack number's object key in the bucket (packs are named by
//     their content, which is known only once they are complete);
//   - workspace_records: every host's workspace records, each with the
//     host (node) that serves it. The view workspaces shows a connection
//     only its own host's (the layerfs.node setting of the connection), so
//     a daemon lists, recovers and ends only its own workspaces with the
//     same statements as on SQLite; inserts through the view take the node
//     from the same setting.
var Postgres = []string{
	`
CREATE TABLE meta (
	key   TEXT PRIMARY KEY,
	value BIGINT NOT NULL
);

CREATE TABLE chunks (
	id   BYTEA PRIMARY KEY CHECK (octet_length(id) = 32),
	pack BIGINT NOT NULL,
	off  BIGINT NOT NULL,
	len  BIGINT NOT NULL
);

CREATE SEQUENCE pack_numbers;
CREATE TABLE packs (
	num     BIGINT PRIMARY KEY,
	key     TEXT NOT NULL,
	size    BIGINT NOT NULL,
	created BIGINT NOT NULL
);

CREATE TABLE objects (
	id   BYTEA PRIMARY KEY CHECK (octet_length(id) = 32),
	kind INTEGER NOT NULL CHECK (kind IN (2, 3, 4)),
	data BYTEA NOT NULL
);

CREATE TABLE projects (
	name    TEXT PRIMARY KEY,
	created BIGINT NOT NULL
);

CREATE TABLE layers (
	project   TEXT NOT NULL REFERENCES projects(name) ON DELETE CASCADE,
	idx       INTEGER NOT NULL CHECK (idx >= 1),
	commit_id BYTEA NOT NULL REFERENCES objects(id),
	created   BIGINT NOT NULL,
	PRIMARY KEY (project, idx)
);
CREATE INDEX layers_commit ON layers(commit_id);

CREATE TABLE branches (
	project TEXT NOT NULL REFERENCES projects(name) ON DELETE CASCADE,
	name    TEXT NOT NULL,
	head    BYTEA NOT NULL REFERENCES objects(id),
	created BIGINT NOT NULL,
	updated BIGINT NOT NULL,
	PRIMARY KEY (project, name)
);
CREATE INDEX branches_head ON branches(head);

CREATE TABLE workspace_records (
	id         TEXT PRIMARY KEY,
	node       TEXT NOT NULL DEFAULT current_setting('layerfs.node'),
	project    TEXT NOT NULL REFERENCES projects(name),
	branch     TEXT NOT NULL,
	base       BYTEA NOT NULL,
	head       BYTEA NOT NULL,
	mount_path TEXT NOT NULL,
	upper_dir  TEXT NOT NULL,
	state      TEXT NOT NULL,
	created    BIGINT NOT NULL,
	updated    BIGINT NOT NULL,
	options    BYTEA
);
CREATE INDEX workspace_records_node ON workspace_records(node);
CREATE INDEX workspace_records_branch ON workspace_records(project, branch);
CREATE VIEW workspaces AS
	SELECT id, project, branch, base, head, mount_path, upper_dir, state, created, updated, options
	FROM workspace_records WHERE node = current_setting('layerfs.node')
	WITH CASCADED CHECK OPTION;
`,
	// Fleet GC (package maintenance's gcshared.go): chunk and object rows carry
	// the time (the database's clock, ns) they were stored or last found by
	// a batch's dedup probe, and GC spares rows younger than its grace
	// period; leases (lease.go) say which hosts are alive, and only their
	// workspaces keep commits alive.
	`
ALTER TABLE chunks ADD COLUMN created BIGINT NOT NULL DEFAULT ` + NowNs + `;
ALTER TABLE objects ADD COLUMN created BIGINT NOT NULL DEFAULT ` + NowNs + `;
CREATE INDEX chunks_created ON chunks(created);
CREATE INDEX objects_created ON objects(created);
CREATE INDEX chunks_pack ON chunks(pack);

CREATE TABLE leases (
	node    TEXT PRIMARY KEY,
	expires BIGINT NOT NULL
);
`,
	// nodes: every host that has run a daemon on the Store, the address
	// its daemon advertises and its last heartbeat (nanoseconds of the
	// database's clock, so hosts' clocks need not agree); up is false once
	// it stopped cleanly.
	`
CREATE TABLE nodes (
	name    TEXT PRIMARY KEY,
	address TEXT NOT NULL,
	seen    BIGINT NOT NULL,
	up      BOOLEAN NOT NULL
);
`,
	// Images, derivations, a workspace's root image and a project's
	// default image, as the embedded Store's migration 3.
	`
CREATE TABLE images (
	name      TEXT PRIMARY KEY,
	digest    TEXT NOT NULL,
	commit_id BYTEA NOT NULL REFERENCES objects(id),
	record    BYTEA NOT NULL,
	created   BIGINT NOT NULL
);
CREATE INDEX images_commit ON images(commit_id);
CREATE INDEX images_digest ON images(digest);

CREATE TABLE derivations (
	key       TEXT PRIMARY KEY,
	commit_id BYTEA NOT NULL,
	created   BIGINT NOT NULL
);

ALTER TABLE workspace_records ADD COLUMN image BYTEA;
ALTER TABLE projects ADD COLUMN image TEXT NOT NULL DEFAULT '';
DROP VIEW workspaces;
CREATE VIEW workspaces AS
	SELECT id, project, branch, base, head, mount_path, upper_dir, state, created, updated, options, image
	FROM workspace_records WHERE node = current_setting('layerfs.node')
	WITH CASCADED CHECK OPTION;
`,
	// Checkpoint records (package store's checkpoint.go), every host's:
	// a checkpoint is restored on any host of the fleet.
	`
CREATE TABLE checkpoints (
	id        TEXT PRIMARY KEY,
	project   TEXT NOT NULL REFERENCES projects(name),
	workspace TEXT NOT NULL,
	commit_id BYTEA NOT NULL,
	files     BYTEA NOT NULL,
	message   TEXT NOT NULL,
	meta      BYTEA,
	created   BIGINT NOT NULL
);
CREATE INDEX checkpoints_project ON checkpoints(project, created);
`,
	// The share tokens of workspaces' ports, as the embedded Store's
	// migration 5; every host's (a token names its workspace, and a
	// request with it is answered by the host that serves that).
	`
CREATE TABLE port_shares (
	token     TEXT PRIMARY KEY,
	workspace TEXT NOT NULL,
	port      INTEGER NOT NULL,
	public    BOOLEAN NOT NULL,
	created   BIGINT NOT NULL,
	UNIQUE (workspace, port)
);
`,
}

// NowNs is the database's clock in nanoseconds, as a PostgreSQL
// expression: a shared Store's times are the database's, so that hosts'
// clocks need not agree.
const NowNs = `(extract(epoch from clock_timestamp()) * 1000000000)::bigint`
