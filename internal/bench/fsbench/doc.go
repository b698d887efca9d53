// Package fsbench measures the FUSE path alone: the cell bodies of package
// cells run directly (no sandbox, no daemon API) on a LayerFS workspace
// mount served from this process, against a plain directory on the same
// file system. It reports per cell the median of N samples per arm, the
// ratio, the FUSE requests the timed body caused by opcode, the daemon's
// service time per request and which data path served file data.
// `layerfs bench fs` is its command.
//
// Each sample follows the cells' method (cache state class B): a fresh
// Store with the cell's base committed first, one untimed run of the body
// on an earlier mount (unmounted afterwards), then a fresh mount for the
// timed run. The native arm gets fresh directories the same way, the base
// written into each. Samples of all cells and both arms run in one shuffled
// order. The body's time is taken inside the shell (date +%s%N around it),
// so the shell's own start is not counted; shells start outside the mount
// and cd into it, because the process serving a mount must never fork a
// child whose working directory is on it. Every timed run's end state is
// checked by package verifier, its in-sandbox checks (C12's git fsck) run
// by bash in the directory.
package fsbench
