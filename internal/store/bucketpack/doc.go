// Package bucketpack is a shared Store's packs: objects in an S3 bucket,
// in the pack format (package pack), and the node-local cache of chunks
// read from them.
//
// A pack object is named packs/<number>-<BLAKE3 of the pack's bytes>.pack.
// A writer spools its pack to a file of this host's directory and uploads
// it when its batch flushes; the number comes from the Store's index
// (Index) when the pack is started, as the chunk rows need it, and the
// index maps it to the object's key once uploaded. Reads are ranged GETs
// of one chunk, verified, through the chunk cache.
//
// Its contract:
//
//   - Pack objects are immutable and unique: an upload retried after a
//     timeout writes the same object, no two hosts can overwrite each
//     other's, and GC deleting a dead pack can never delete a new one that
//     happens to hold the same bytes.
//   - Durable before indexed, as for pack files: Sync returns once the
//     object is in the bucket, and only then may the Store commit the rows
//     that name its chunks.
//   - Verified reads: Read returns a chunk only if it hashes to its ID, as
//     does the chunk cache, which drops a corrupted file rather than serve
//     it (a miss: the chunk is fetched again).
//   - A spool outlives no process: RemoveDeadSpools removes those of
//     processes that died before their batch flushed; nothing indexed
//     names them.
//
// The package runs no SQL: numbering and naming packs is the Index's,
// which package store implements on its database.
package bucketpack
