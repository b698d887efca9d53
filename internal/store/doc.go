// Package store is LayerFS's durable home, the Store: immutable objects
// (file contents, directories, commits), the references that name them
// (projects, layers, branches, workspace records), and a cache of file
// contents for reads. Open a DB on a Store's directory; everything else
// of LayerFS reaches the Store through it.
//
// A Store is embedded or shared. An embedded Store is one directory: a
// SQLite database (store.db) indexing objects and holding references, pack
// files of chunk payloads (packs/), the cache (cache/) and workspace upper
// layers (workspaces/). A shared Store (Options.URL, docs/fleet.md) keeps
// the index and references in PostgreSQL and the packs as objects of an S3
// bucket; each host's directory holds only its caches, spooled packs and
// workspaces. Both keep the one contract below, and the one conformance
// suite of the package's tests (eachBackend) runs every parameterised test
// on both.
//
// # The contract
//
// Objects. Everything committed is an immutable object named by the hash
// of its kind and canonical bytes (package object). Every read verifies
// the bytes against the ID: a flipped bit anywhere surfaces as an error
// wrapping ErrCorrupt that names the object and where it was read from;
// nothing returns wrong bytes silently. A commit names its root tree and
// its parents, the first parent first, with its generation, one above its
// parents', so that walks of the history go children before parents; GC
// marks through every parent and fsck checks each generation.
//
// Writes. A Batch collects objects; nothing of it is visible until Flush
// returns, and then all of it is. Flush makes the pack data durable before
// the index rows that name it commit, in one transaction, so a crash
// leaves at worst unindexed bytes at the end of a pack, never a row that
// points at missing data. No part of an aborted or failed unit becomes
// visible.
//
// References. A branch head moves only by compare-and-swap
// (SetBranchHead: created, up-to-date or head-moved, changing nothing), and
// only to a stored commit; layers are appended, never changed; a
// reference moves in its own transaction after the objects it names are
// durable, so an acknowledged commit survives any crash of the process
// (and a power failure with Options.Durable).
//
// Concurrency. A DB is safe for concurrent use, and several processes (or
// hosts, on a shared Store) may open one Store: reference changes are
// serialised (SQLite's one writer, PostgreSQL's reference lock), readers
// read consistent snapshots, and each pack has one writer at a time.
// Every open of an embedded Store holds a shared flock on its lock file,
// which GC takes exclusively.
//
// Reads. Trees are cached decoded; Materialize places a file's whole
// content in the cache once, and a content in place never changes, so it
// can back FUSE passthrough opens (package cache). A cache file is given
// to the kernel only once this process has checked it against its
// content's ID (trust.go): a damaged one is evicted, logged and made
// again, never served.
//
// Maintenance. GC deletes only what no root reaches: branch heads,
// layers, checkpoints (checkpoint.go) and the bases and heads of
// workspaces (on a shared Store, of hosts with a live lease, and every
// row younger than the grace period). On an embedded Store it runs only
// with the Store to itself (else ErrBusy);
// every step is crash safe. Fsck checks every reference, object, chunk
// and pack range and reports what it finds.
//
// Errors. The errors a caller acts on wrap the sentinel errors
// (errors.go, vocabulary.go), each of a class of wire/errclass, which the
// API and the CLI map once.
//
// # The packages
//
// The store package is the facade: DB, Batch, the references and the SQL
// that keeps them (with its sub-packages the only code that runs SQL),
// and the producers of the cache (Materialize, the fills behind captures,
// Prefetch). The parts with one purpose each are packages of their own,
// imported only by this one:
//
//   - object: the object model and its canonical encoding. This package
//     re-exports its types as the Store's vocabulary (vocabulary.go:
//     store.ID, store.Tree, ...), the names the rest of LayerFS uses.
//   - schema: the migrations of each SQL engine and the dialect that runs
//     this package's statements on PostgreSQL.
//   - pack: the pack format and an embedded Store's pack files.
//   - bucketpack: a shared Store's pack objects and its chunk cache.
//   - cache: the cache of contents, its durability and its bound.
//   - sqltx: the counted transaction every statement runs in.
//   - maintenance: GC and fsck, run inside the DB's transactions and
//     locks through what the DB gives them (DB.GC, DB.Fsck).
//
// # How it is fast
//
// Packs are appended with aligned direct writes where the file system
// allows, double-buffered, so that the disk takes one buffer while the
// capture fills the other (pack.Writer). Flush's fsync runs while the
// index rows are inserted, and the transaction waits for it before it
// commits. A batch's dedup probes run in one read snapshot through the
// driver's prepared statements (prober), and the index is written many
// rows per statement (insertRows). SQLite runs in WAL mode with a busy
// timeout; all SQL goes through DB.withTx, which rolls back on error and
// counts transactions, statements and rows.
//
// # What a request cost
//
// Every transaction, statement, probe, pack write and read, tree look-up
// and content placed in the cache is counted twice, at the place it
// happens: in the DB's totals (Counters) and in the account of the request
// it is done for (package account: the one in the context, or the one a
// Batch took from its creator's), so that a request's receipt is its own
// work (Account) whatever runs beside it. Work of no request, and the
// cache fill behind a capture, which may outlast its request, are in the
// totals only.
package store
