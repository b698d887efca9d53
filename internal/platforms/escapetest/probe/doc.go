// Command probe is the escape suite's program inside a sandbox: each case
// tries one way out and reports whether the kernel let it.
//
//	probe CASE [ARG...]
//
// prints "refused: ERRNO-NAME" and exits 0 when the attempt failed,
// "allowed" and exits 3 when it succeeded (an escape, except for the
// control cases, which must succeed), and exits 2 when the probe itself
// could not run the case. It is built static (CGO_ENABLED=0)
// so that it runs in any sandbox root.
package main
