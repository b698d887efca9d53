// Package verifier checks a workspace's end state against a cell's
// expectation (package cells), after the body ran and again on a fresh
// workspace of the commit made from it. A sample whose verification fails
// is a failed sample.
//
// The input is an io/fs.FS of the workspace root: the bench passes
// os.DirFS(mountpath), or better (*os.Root).FS(), which cannot be led
// outside the root by a symlink. The verifier never follows a symlink
// itself: it walks the tree with fs.WalkDir (which reports entry types as
// lstat does), opens only entries the walk saw as regular files, and reads
// link targets with fs.ReadLink.
//
// Expectations are exact. Every entry in the tree must be expected (or a
// parent directory of one), except inside the expectation's opaque
// directories; every expected entry must be present with its kind, its
// content (exact bytes, zeros, or a BLAKE3 hash, read streaming in 1 MiB
// pieces so 64 MiB files never sit in memory) and, where given, its
// execute bit. Checks that need the sandbox (git fsck for C12) go through a
// Runner, declared here and implemented by the bench.
//
// The result is nil or an errors.Join of every problem, sorted by path, each
// naming the path: "f17: missing", "big: size 67108863, want 67108864",
// "f3: content \"4\\n\", want \"3\\n\"", "d3/d4/f11: unexpected file".
// Differences are *Problem values matching ErrMismatch; an error that does
// not match it is a failure to look (I/O, a runner that could not start),
// which fails the sample just the same but means something else.
package verifier
