// Package commit turns directories into LayerFS history and back: it
// chunks and hashes file content, captures trees, rebuilds trees along only
// the paths that changed, publishes commits to branches by compare-and-swap,
// diffs trees and materializes them into directories. It reads and writes
// objects through two small interfaces, Reader (*store.DB) and Writer
// (*store.Batch); the history operations take a *store.DB.
//
// # Chunking
//
// Files larger than one maximum chunk are split by a FastCDC-style gear hash
// with normalized chunking: no cut before Params.Min, a strict mask until
// Params.Avg, a loose one until Params.Max. The gear table is generated from
// a fixed seed (see gear), so cuts are a pure function of the bytes: an edit
// or a prepend changes only the chunks around it and the rest deduplicate.
// DefaultParams (2/8/32 KiB) keep the chunk that holds an edit small, so
// scattered small edits of a large file store little new payload, and
// few enough chunks per file that manifests stay small; `layerfs bench
// store` measures both.
// Files no larger than Params.Max are one chunk and need no manifest. Sparse
// files are read with SEEK_DATA/SEEK_HOLE: only data is chunked, and holes
// become extents with a zero chunk id.
//
// # Capture and Build
//
// Build applies a list of Changes (delete a path; set it to an entry that is
// already stored; capture it from a host path, a directory with or without
// its subtree) to a base tree. It loads only the trees on the changed paths
// and their ancestors, applies changes parent before child, and writes one
// new tree per touched directory, so committing one file of a huge tree
// costs its depth. CaptureDir is the same machinery with the whole directory
// as the change. Directory walking and tree assembly run on the calling
// goroutine; regular files are read, chunked and hashed by Options.Workers
// goroutines, and a large file goes through a three-stage pipeline (read
// and cut, hash, store) so that one big file keeps both cores busy. Hard links found in one Build (same device
// and inode) share one content and a Link value derived from that content
// and the group's first path, so an unchanged tree captures to the same ids.
// Everything a tree entry holds is captured: type, mode bits including
// setuid/setgid/sticky, owner, size, mtime in nanoseconds, symlink target,
// device numbers and every extended attribute the host lets the process
// read; an xattr that cannot be read is an error, never a silent omission.
//
// Nothing is durable until the caller flushes its batch. Publish then writes
// the commit and moves the branch head by compare-and-swap, last, so a
// crash at any point leaves either the old head or a complete new commit.
//
// # History and merges
//
// Walk, Log and MergeBases walk the commit graph through every parent,
// highest generation first. Merge is the three-way merge of two trees
// against a base (see its comment for the rules per path), beside Diff:
// like Diff it reads only the subtrees whose ids differ, and like Build it
// writes only the trees on the changed paths, so it costs what changed.
// Its line-level merge of texts is package textmerge's, and a differential
// test holds it to git merge-tree. MergeBase makes the virtual base of a
// criss-cross history; MergeInto merges a commit into a branch and
// publishes by compare-and-swap, as Publish does, trying again a bounded
// number of times when the head moves. Apply turns a directory holding one
// tree into one holding another, touching only the paths that differ: how
// a live workspace takes in a merge.
//
// # Checkout
//
// Checkout writes a tree through directory file descriptors it created or
// opened with O_NOFOLLOW, creates files with O_EXCL, links hard links with
// openat2(RESOLVE_BENEATH|RESOLVE_NO_SYMLINKS), and sets metadata on the
// objects themselves (fchown, fchmod, fsetxattr, futimens; the
// AT_SYMLINK_NOFOLLOW forms for symlinks and devices), so nothing in a tree
// or already in the target can make it write outside the target.
// Directories get their mode and mtime after their children.
package commit
