// Package cache is a Store's cache of contents: the directory cache/
// where each file content of the Store is materialized whole, as
// <xx>/<id>, for FUSE passthrough opens and as overlayfs's data layer.
// It keeps the files' durability (the write-back window), the cache's
// bound (eviction by access time), and the contents held in memory while
// the disk is full. What goes in (materialization, the fills behind
// captures, prefetch) is package store's.
//
// Its contract:
//
//   - A content in place is whole and never changes. A File is written
//     unnamed (O_TMPFILE) or under a temporary name, then linked into
//     place; a file already in place is kept and the new one dropped. So
//     a path Path returns either does not exist or holds the content.
//   - A content in place survives a stop of the host, or is gone: files
//     are not fsynced one by one but inside a write-back window whose
//     marker (in UnsyncedDir) is durable before the first file it covers;
//     Open settles the windows of dead processes, removing after a reboot
//     every file changed since such a window opened (writeback.go).
//   - Removing a content is always safe: a reader that has it open keeps
//     the inode, and the Store makes it again on the next read. Eviction
//     and Sweep rely on that.
//   - The kernel is given only what this process trusts: a content is
//     linked into the process's trusted layer (Layer, the overlay's data
//     layer) once Trust has checked it, with the check the Store gives,
//     or once this process placed it from checked bytes and it has not
//     changed since (package fill's trust.go). Where the file system has
//     fs-verity, the files are also sealed, and the kernel checks every
//     page read (seal.go).
//
// The package knows nothing of the index or of packs: it stores bytes it
// is given under the IDs it is told.
package cache
