// Package commit turns directories into LayerFS history and back: it
// chunks and hashes file content, captures trees, rebuilds trees along only
// the paths that changed, publishes commits to branches by compare-and-swap,
// diffs trees and materializes them into directories.
//
// # Chunking
//
// Files larger than one maximum chunk are split by a FastCDC-style gear hash
// with normalized chunking: no cut before Params.Min, a strict mask until
// Params.Avg, a loose one until Params.Max. The gear table is generated from
// a fixed seed (see gear), so cuts are a pure function of the bytes: an edit
// or a prepend changes only the chunks around it and the rest deduplicate.
// Smaller files are one chunk with no manifest.
package commit
