// Package writeruns gathers a file's data, written at increasing offsets in
// small pieces (a manifest's chunks), into large writes.
//
// The page cache keeps a file in folios of the size it was written in, and
// every later read walks them: a 64 MiB file written in 4-64 KiB chunks
// read back (cat) in 8.0 ms on this project's test machine, and in 5.4 ms
// when written in 2 MiB runs. The Store's cache files and checkouts are
// written through a Writer, so committed files read as fast as native ones.
package writeruns
