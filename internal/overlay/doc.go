// Package overlay is the merged view of one workspace: an immutable lower
// tree read lazily from the Store, one directory at a time, under an upper
// layer of real files. It knows nothing of FUSE; package fusefs serves it.
//
// # The upper layer on disk
//
// The upper directory mirrors merged paths in the kernel overlayfs format,
// so the state on disk alone rebuilds the merged view after the serving
// process is killed:
//
//   - a whiteout (character device 0:0) hides a lower name;
//   - trusted.overlay.opaque = "y" on an upper directory hides the lower
//     directory of the same name;
//   - trusted.overlay.redirect on an upper directory names (absolute, in
//     the lower tree) the lower directory it merges with: a renamed lower
//     directory moves without copying anything and without EXDEV;
//   - trusted.layerfs.origin on an upper regular file makes it a metacopy:
//     its metadata is the file's, its data is still the lower content it
//     records (chmod, chown, utimens, xattrs and renames of a lower file
//     copy no data).
//
// New upper entries that replace something (a whiteout, a directory) are
// made in a work directory next to the upper and renamed into place, and a
// copy-up is prepared as an O_TMPFILE and linked into place, so a crash
// never leaves a half-made entry.
//
// # Descriptors, not paths
//
// The upper layer is reached only relative to directory descriptors (see
// at.go): an entry is its parent directory's O_PATH descriptor, opened
// beneath the upper directory with openat2 (no symlinks, no escape) or
// taken from a small cache, and its name. Paths of any depth work, and no
// host path that grows with the workspace's depth is ever built.
//
// # Copy-up
//
// Opening a lower file for writing copies its data up from the Store's
// materialized cache file (FICLONE where the file system has reflinks,
// copy_file_range otherwise, keeping holes); O_TRUNC needs no data at all.
// Lower entries sharing a Link value are one node; when one is copied up,
// every loaded name of it is linked to the one upper inode.
//
// # In memory
//
// A directory is loaded on first use: its lower tree (one Store call; the
// Store caches decoded trees) merged with its upper directory. After that,
// lookups and listings are map reads and no operation touches the Store.
// Every node has an inode number that is stable for its lifetime.
//
// # The dirty set
//
// Every change marks its path in a per-directory dirty map, with whether
// the name existed before its first change since the last commit, so
// Changes visits only what changed and describes it relative to the last
// commit's tree: Delete for removed names, Source (the upper path) for new
// or changed upper files, Entry for lower content that moved or only
// changed metadata, a moved lower directory as its stored tree plus its
// upper changes. Files open for writing always count as changed (writes
// through FUSE passthrough or a shared mmap never reach the overlay).
// MarkCommitted makes the next Changes relative to the new commit; the
// lower stays what the workspace was mounted on, so the upper must always
// be remounted over the same lower root. After a remount the dirty set is
// gone and Changes describes every top-level name completely (the whole
// upper, relative to the lower), which is right for any base tree.
//
// # Locking
//
// One RWMutex guards the tree (names, node states, directory maps, the
// dirty set); data copies run outside it, serialized per node.
package overlay
