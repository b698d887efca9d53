// Package pack is the pack format the Store keeps chunk payloads in, and
// the pack files of an embedded Store's directory.
//
// A pack is append-only: the 8-byte Magic, then records of a 32-byte chunk
// ID, a 4-byte little-endian payload length and the payload. The Store's
// index names a chunk by (pack number, payload offset, length), so a read
// needs no header; the headers make a pack self-describing for fsck and
// recovery. The same bytes are a pack file of an embedded Store (Set) and
// a pack object of a shared one (package bucketpack).
//
// Its contract:
//
//   - One writer per pack. A Set hands a pack to at most one Writer at a
//     time, in this process or any other: the Writer holds the file's
//     exclusive flock. So a Writer may roll back (truncate) what it
//     appended since a size, and no one else's bytes are lost.
//   - Durable before indexed. Appended bytes are durable only once Sync
//     returns; the Store inserts index rows naming them only after that,
//     so no index row ever points at bytes a crash could lose. A crash
//     leaves at worst unindexed bytes at a pack's end.
//   - Verified reads. Read returns a chunk's payload only if it hashes to
//     the chunk's ID, and wraps object.ErrCorrupt otherwise, naming the
//     pack and the offset; ReadRange returns bytes as they are, for a
//     caller that verifies each chunk itself.
//
// The package knows nothing of the index: which chunk is where, and which
// packs are live, is package store's.
package pack
