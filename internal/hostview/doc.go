// Package hostview serves a workspace to the host user who works in it: a
// FUSE mount at the workspace's mount path over the mount its sandboxes
// use, which shows the sandboxes' root as that user and creates files as
// the sandbox's ids.
//
// # Why a second view
//
// Sandboxes run in a user namespace: id n inside is host id Base+n, and a
// workspace's files carry the ids inside on disk. The sandboxes' mount
// maps them (kernel overlayfs over id-mapped layers, or an id-mapped FUSE
// mount), so through it a file of 0 on disk belongs to host id Base, and
// a host process whose ids are not of the range cannot create anything
// there (EOVERFLOW). Kernel overlayfs cannot be id-mapped as a mount, and
// two overlays of one upper directory do not see each other's changes, so
// the host gets its own view of the sandboxes' mount instead: every
// namespace operation goes through that one mount (its caches stay the
// sandboxes' caches), with the ids translated.
//
// # Ids
//
// For an Owner (uid U, gid G; each kind of id alike), id n of the range
// (n on disk, n inside) is shown as:
//
//   - U for n = 0: the sandbox's root is the owner;
//   - Base+U for n = U when U is not 0 (the owner's own number inside is
//     shown by its host id, which no host user has);
//   - n for every other n: host id n is sandbox id n.
//
// With the owner root this is the identity: the host sees the ids on disk.
// A create is made with the caller's ids translated back; a caller id
// with no place in the range (root in another user's workspace, an id
// beyond the range) creates as the owner, and a chown to such an id gives
// the file to the owner. Ids of files outside the range (shown as the
// overflow id by the sandboxes' mount) are shown as they come.
//
// # Coherence and speed
//
// The kernel's entry and attribute caches of the view are off (timeouts
// of zero): a change made in a sandbox is seen by the next call on the
// host, at the cost of a request per path component and stat. File data
// of the overlay's upper layer is served by FUSE passthrough from the
// upper file itself (a backing file must be at most one level stacked,
// which the overlay, over the daemon's FUSE view, is not): the same inode
// the overlay reads and writes, so both views see every byte at once.
// Committed files not yet copied up, and every file on the fuse data path
// (whose FUSE mount caches attributes the upper file would change behind
// its back), are read and written through the daemon.
//
// A kernel inode has one backing file while any passthrough open of it
// lasts, and takes none while a cached open of it lasts: an open that
// cannot share the inode's mode retires it (ESTALE; the kernel looks the
// name up again and gets a new inode), as package fusefs does.
//
// The view is mounted nosuid and nodev, with allow_other and
// default_permissions: the kernel checks every access against the owners
// and modes it shows, as for a local directory of the owner's.
package hostview
