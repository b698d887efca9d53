// Package writeruns gathers a file's data, written at increasing offsets in
// small pieces (a manifest's chunks), into large writes.
//
// The page cache keeps a file in folios of the size it was written in, and
// every later read walks them, so a file written chunk by chunk reads back
// slower than one written in runs of a huge page. The Store's cache files
// and checkouts are written through a Writer, so committed files read as
// fast as native ones.
package writeruns
