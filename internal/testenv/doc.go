// Package testenv gates tests on what the host provides (root, /dev/fuse, a
// Docker engine) so that a missing prerequisite is a visible skip on a
// developer's machine and a failure in CI, where LAYERFS_TEST_STRICT=1.
package testenv
