// Package storebench measures what issue 2 promises of the Store and the
// commit path, on this machine, in one run: payload growth for a prepend,
// for scattered small overwrites and for an unchanged re-import (dedup);
// capture throughput for one large random file and for many small files;
// and the time to fork a branch from a small and from a 100,000-file tree.
// Each figure is printed with its target and PASS or MISS. Throughput and
// fork times are medians of several runs, each into a fresh store where
// dedup would otherwise make a repeat free.
//
// `layerfs bench store` runs it; the README shows its table.
package storebench
