// Package kerneloverlay serves a workspace on the overlay data path: the
// workspace mount is kernel overlayfs; its lower an EROFS image of the
// committed tree's metadata (see meta.go), whose files redirect to their
// contents in two data-only layers below it (see content.go): the contents
// of the Store's cache this process trusts (checked against their IDs),
// then the daemon's read-only FUSE view of the commit's
// contents (package fusefs over an overlay with an empty upper: lazy from the
// Store, passthrough for file data, per-request telemetry); its upper and
// work directories the workspace's own, on a local file system.
//
// Creates, writes, renames, unlinks, metadata changes, lookups, listings
// and stats then run in the kernel at the upper file system's speed, and
// so do reads, copies and copy-ups of committed data already in the
// Store's cache; only a first read of a content reaches the daemon,
// through the view. Without an image (a tree it cannot carry,
// Config.NoMeta) the view is of the committed tree and the whole
// lower, and lookups of new names reach the daemon too.
//
// Kernel overlayfs keeps no dirty set, but its upper directory holds
// exactly what changed since the mount was made. Changes reads it as
// overlayfs wrote it (whiteouts, opaque directories, redirects, metacopy
// files, hard links) with overlay.ChangesSince: one lstat walk of the upper,
// then only what changed since the last commit.
//
// Options used: redirect_dir=on (a renamed lower directory is a redirect,
// not EXDEV) and metacopy=on (chmod, chown and renames of a lower file copy
// no data; it also makes overlayfs follow the image's metacopy redirects
// into the data-only layer). The lower FUSE mount must have a stacking depth of 1, and the
// upper's file system must take trusted.* xattrs (Check).
//
// With Config.IDMap the overlay is mounted over id-mapped layers, for
// sandboxes that run in a user namespace: the one mount then shows every
// process the mapped ids (see IDMap).
//
// Unmount and Detach take the overlay mount down first, then the FUSE
// lower it stacks on.
package kerneloverlay
