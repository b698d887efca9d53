// Package diskusage measures the space a directory tree takes on disk:
// allocated blocks, as du counts them, not apparent sizes, so that sparse
// files and holes cost what they cost.
package diskusage
