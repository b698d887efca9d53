// Package maintenance is the Store's upkeep: GC, which deletes what no
// root reaches and reclaims its space, and fsck, which checks every
// reference, object, chunk, pack range and cache file and reports what
// it finds (RepairCache evicts the damaged cache files it found).
//
// It runs inside an open Store, through what package store gives it
// (Store: the DB's transactions, locks, packs and cache), and package
// store's DB.GC, DB.Fsck and DB.RepairCache are its entry points; the
// types are re-exported there (store.GCStats, store.FsckReport, ...).
//
// Its contract:
//
//   - GC deletes only what no root reaches: branch heads, layers, images,
//     checkpoints and the bases, heads and images of workspaces (on a
//     shared Store, of hosts with a live lease, and every row younger
//     than the grace period: gcshared.go). On an embedded Store it runs
//     only with the Store to itself (else errclass.Busy). It deletes
//     nothing when a reachable object is missing or corrupt.
//   - Every step of GC is crash safe: rows go first, in one transaction;
//     a rewritten pack is fsynced before the index points at it; a pack
//     file is removed only once no row names it.
//   - Fsck reads one consistent snapshot and may run while other
//     processes write; its error is for failures to run the check, never
//     for what it found (FsckReport.Err).
package maintenance
