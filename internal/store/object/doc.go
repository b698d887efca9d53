// Package object is the Store's object model and its canonical encoding:
// the IDs that name objects, the four kinds (chunk, manifest, tree,
// commit), directory entries, and the bytes each kind is stored and
// hashed as.
//
// Its contract:
//
//   - An object's ID is Hash(kind, canonical bytes): BLAKE3-256 over a
//     per-kind domain prefix and the bytes, so equal bytes of different
//     kinds never share an ID and an ID names one object for ever.
//   - Encoding is canonical: Encode of a valid value gives the only bytes
//     that decode to it, and the decoders (DecodeTree, DecodeManifest,
//     DecodeCommit) refuse anything else (trailing bytes, non-minimal
//     varints, unsorted or duplicate names, extents that do not add up)
//     with an error wrapping ErrCorrupt. Whatever decodes re-encodes to the
//     same bytes, so one object never has two IDs.
//   - Stored formats never change: new fields come with a new encoding
//     version, and every version ever written stays readable (commits of
//     version 1, with at most one parent and no generation, still decode).
//
// The package does no I/O and imports nothing of LayerFS but the error
// classes (wire/errclass). Package store re-exports its types as the
// Store's vocabulary (store.ID, store.Tree, ...), which is how the rest
// of LayerFS names them.
package object
