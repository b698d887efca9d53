// Package overlaytest drives workspaces in tests: a seeded, reproducible
// sequence of random file system operations applied in lockstep to two
// targets (a plain directory and a workspace, mounted or through the overlay
// API), and a comparison of two directory trees; and a real Store with the
// steps such tests repeat (capture a directory, commit a workspace's
// changes, check a tree out).
package overlaytest
