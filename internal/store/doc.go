// Package store is LayerFS's durable home: one directory holding a SQLite
// database (store.db), append-only pack files of chunk payloads (packs/), a
// cache of materialized file contents (cache/) and workspace upper layers
// (workspaces/). It is the only package that speaks SQL.
//
// # Objects
//
// Everything committed is an immutable object named by the BLAKE3 hash of a
// per-kind domain prefix and its canonical bytes (package object). Chunks (a
// small file's whole content or one content-defined chunk of a larger file)
// are appended to pack files and indexed in SQLite by (pack, offset,
// length); manifests, trees and commits are small and live in SQLite as
// their canonical bytes. Every read verifies the bytes against the id, so a
// flipped bit anywhere surfaces as an error wrapping ErrCorrupt that names
// the object and where it was read from; nothing returns wrong bytes
// silently.
//
// A commit names its root tree and its parents, the first parent first
// (none for a project's first commit, two or more for a merge), with its
// generation: one above its parents', so that walks of the history go
// children before parents and stop early. Commits are written in encoding
// version 2; version 1 commits (one parent at most, no generation) are
// still read, with generation 0. GC marks through every parent and fsck
// checks every parent and each generation against its parents'.
//
// # Writing and durability
//
// Writers use a Batch: PutChunk appends new payloads to a pack the batch
// holds an exclusive flock on (so several processes can write one store
// without sharing a pack), and the index rows and objects are kept in memory
// until Flush, which first fsyncs the pack data and then commits all rows in
// one SQLite transaction with prepared multi-row inserts. A crash therefore
// leaves at worst unreferenced bytes at the end of a pack, never a row that
// points at missing data. Refs (branch heads, layers) move in their own
// small transactions after the objects they name are durable, so an
// acknowledged commit survives any crash of the process.
//
// Capture speed is decided by three costs (measured when the design was
// chosen; `layerfs bench store` measures the whole). Buffered writes that
// need fresh page-cache pages were several times slower than O_DIRECT
// writes of the same data, so packs are appended with aligned direct writes
// of 4 MiB where the file system allows (see pack.Writer), double-buffered
// so that the disk takes one buffer while the caller fills the other;
// Flush's fsync (a device cache flush, whatever the size) runs while the
// index rows are inserted and the transaction waits for it before
// committing. A dedup probe per chunk as an autocommit query through
// database/sql cost about four times the lookup itself, so a batch's probes
// run in one read snapshot through the driver's prepared statements (see
// prober). One-row inserts were dominated by per-statement overhead, so the
// index is written 128 rows per statement.
//
// SQLite runs in WAL mode with foreign keys on and a busy timeout. In-process
// writers share one connection and cross-process writers start transactions
// with BEGIN IMMEDIATE, so writers are serialised on the database while
// readers proceed. All SQL goes through DB.withTx, which rolls back on
// error, times the transaction and counts statements and rows; Counters
// exposes the totals for receipts.
//
// # Reading
//
// Decoded trees are immutable and cached in a bounded LRU keyed by id, so a
// FUSE mount touches SQLite once per directory. Materialize writes a file's
// full content into cache/<xx>/<id> (sparse where the manifest has holes),
// atomically and once: the file is linked into place and never changes, so
// it can back FUSE passthrough opens.
//
// # Locking and maintenance
//
// Every open holds a shared flock on the store's lock file; GC upgrades it
// to an exclusive lock and fails fast with ErrBusy when any other process
// has the store open. GC marks everything reachable from branch heads,
// layers and workspaces, deletes the rest, rewrites packs whose dead bytes
// exceed a threshold and removes unreachable cache files. Fsck checks SQLite
// integrity, every reference, every object hash and every pack range.
package store
