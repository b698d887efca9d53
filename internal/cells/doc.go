// Package cells holds LayerFS's reference workloads as data: the twelve
// cells of CELLS.md (C01..C12) and an extended set of realistic agent
// workloads (X01..). A cell is a shell body, the base the workspace holds
// before the body runs, and the end state the body must leave (an
// Expectation, checked by package verifier).
//
// # Bases
//
// A base is written by a deterministic function into a directory, which the
// bench runner commits as the project's first layer. The 64 MiB base big of
// C09-C11 is a seeded ChaCha8 stream with no zero byte, generated in 1 MiB
// pieces and never held in memory; its BLAKE3 hash (BigHash) is a constant
// checked against the generator by a test, so verifying C09-C11 needs no
// stored copy. The git cells share a repository generated in Go and loaded
// with git fast-import (fixed authors and dates, so commit ids are the same
// everywhere); the go build cell's base carries a warm build cache, which
// the host's go builds once (tens of seconds), so a runner should build each
// base once and reuse the directory.
//
// # Expectations
//
// An Expectation is exact: the workspace holds the listed entries and their
// parent directories and nothing else, except inside Opaque directories
// (.git, a build cache), which are checked by in-sandbox Commands instead.
// Twelve documents what that means cell by cell. Results a body computes
// (git status, git log, git grep) are written to files and compared with
// what the generator predicts, so a file system that returns wrong bytes,
// wrong directory listings or stale attributes fails the cell.
//
// # Eligibility
//
// A cell whose tool may be missing in a sandbox (git, tar, go) has a Probe;
// Eligible runs it through a Runner and returns ErrIneligible with the
// reason, so the sample is reported as ineligible rather than as a time.
package cells
