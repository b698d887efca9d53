// Package erofs writes EROFS images: the kernel's compact read-only file
// system (fs/erofs), mounted straight from a file since Linux 6.12.
//
// It writes what an image of metadata needs, uncompressed: directories,
// regular files, symlinks, device nodes, fifos and sockets, with modes,
// owners, nanosecond mtimes, extended attributes and hard links. A regular
// file's content is one hole of its size (a chunk-based inode whose one
// chunk is unmapped): the image records sizes, not data. That is the
// metadata layer of a kernel overlayfs mount whose file data lives in a
// data-only lower layer (the composefs design): every such file carries
// overlayfs's metacopy and redirect xattrs, set by the caller.
//
// # Layout
//
// Block 0 holds the superblock at byte 1024. The inode area starts at
// block 1: each inode is an extended (64-byte) inode followed by its
// extended attributes and, for a regular file, its one-entry block map,
// 32-byte aligned, never across a block boundary; an inode's nid is its
// offset in the area / 32, the root's 0. Directory and symlink data
// follow in whole blocks (the FLAT_PLAIN layout): a directory's entries
// sorted bytewise, "." and ".." among them, each block a run of 12-byte
// dirents and then the names they point at.
//
// The image is built in memory and written once; Write of 12,801 entries
// (GOROOT/src) takes a few milliseconds.
package erofs
