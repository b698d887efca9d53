// Package loopfs makes and mounts file systems in image files (loop
// devices): the bench runs on one of a known kind, and a workspace with a
// quota keeps its upper layer on one of its own size, which bounds every
// write to it, the ones that never enter the daemon (FUSE passthrough, the
// kernel overlay data path) included.
//
// It runs mkfs.ext4 (Debian package e2fsprogs) or mkfs.xfs (xfsprogs) and
// mount (mount), and needs root.
package loopfs
