// Package fusefs serves an overlay as a FUSE file system with go-fuse v2
// (imported as gofs): one go-fuse inode per overlay node, with the same
// inode number.
//
// # Where the speed comes from
//
// A FUSE round trip costs far more than the daemon's work on a request
// (docs/benchmarks.md has the figures), so the design counts requests
// first:
//
//   - Entry, attribute and negative-entry timeouts are long (an hour by
//     default): every change goes through the mount, so the kernel's
//     caches are never stale. Lookups of the overlay are map reads.
//   - File data never enters the daemon where the kernel supports FUSE
//     passthrough: an open registers the upper file, or the Store's
//     materialized copy of a lower file, as the backing file of the
//     kernel inode. The registration is made by this package (not by
//     go-fuse's automatic one, which could hand a read-only lower backing
//     to a later writer) once per node and file, and kept until the kernel
//     forgets the node, so re-opens cost no ioctl. A refused registration
//     turns passthrough off for the mount; Stats.DataPath says which path
//     ran.
//   - Opens carry FOPEN_NOFLUSH and Flush answers ENOSYS, so close(2)
//     sends no FLUSH; O_TRUNC is handled in OPEN (atomic_o_trunc), not as
//     a separate SETATTR.
//   - Without passthrough, lower files are opened with FOPEN_KEEP_CACHE
//     (their content never changes).
//
// A kernel inode has one backing file while any passthrough open of it
// lasts. While a lower file is open for reading (backed by the Store's
// cache file), an open of it for writing copies it up and then needs the
// upper file as its backing, which the kernel would refuse (EIO); handing
// the writer the cache file would let it write into the Store. Instead the
// node's kernel inode is retired: the open answers ESTALE, the kernel walks
// the path again revalidating its entries, the lookup answers a new
// generation, so a new kernel inode, and the open is made on that. The
// reader keeps the old inode and the bytes it opened.
// TestWriteWhileLowerOpen pins this down.
//
// # Errors and telemetry
//
// One mapper turns errors into errnos (see errnoMapper). A wrapper around
// the go-fuse bridge counts every request by opcode and records the
// daemon's service time in a log-linear histogram, with atomics only;
// Server.Stats returns a snapshot and Stats.Sub the delta between two.
// The wrapper also counts each request in the account of the process that
// made it, when the mount is given a way to find it (Options.Account); the
// Store work a request causes is counted by the overlay's Lower, which can
// tell the process from the request's context (CallerPid).
//
// # Deadlocks
//
// The process that serves a mount must never start a child whose working
// directory is on the mount (the child's chdir waits for the server,
// which may be stuck in the fork). Run shells with a working directory
// outside the mount and cd in the script, or serve from another process.
package fusefs
