// Package dirfd names files relative to directory descriptors, so that a
// path below a trusted directory is reached at any depth (no host path
// passes PATH_MAX) and never through a symlink that could lead out of it.
//
// A directory below a root is opened with openat2, RESOLVE_BENEATH and no
// symlinks, magic links or mount crossings, in steps of a few KiB of path.
// An entry is then an At: a descriptor of its directory and its own name,
// for the *at calls; the calls with no *at form (the l*xattr calls, but
// for listxattrat on kernels that have it) take its /proc/self/fd path,
// which stays short whatever the depth. The
// overlay's upper layer and a commit's reading of it both go through here.
package dirfd
