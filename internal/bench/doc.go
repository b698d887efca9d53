// Package bench runs the twelve cells (and the extended cells) the way the
// cell specification (docs/benchmarks.md) describes, and the session
// figures, through the Go SDK against a daemon, and hands the samples to
// bench/report.
//
// # Method (cache state class B)
//
// Every sample of a cell on a platform gets a fresh Store (a daemon served
// from this process over a new Store directory, or a fresh project in a
// guest's daemon), then: the base committed as the first layer (untimed);
// one untimed run of the identical body in a workspace that is then ended;
// a fresh workspace (mount timed) where the body runs once, timed on the
// sandbox's own clock (date +%s%N before and after it, inside); the
// verifier on the live workspace; the commit (timed); the verifier again on
// a fresh workspace of that commit; the end of the workspace (unmount
// timed). The native arm runs the same body through the same sandbox in a
// plain directory on the same file system, with the same warm-up. Samples
// of all cells, platforms and arms run in one randomised order; failed and
// ineligible samples are kept and shown.
//
// LoopFS gives a bench a known file system to run on (a loop-mounted
// journaled ext4 or reflink XFS) instead of whatever holds its directory.
//
// The subpackages are the other benches: storebench (dedup and capture
// throughput) and fsbench (the cell bodies straight on a mount, no
// sandbox: the FUSE path alone).
package bench
