// Package enginetest runs the real engine inside a test binary, for the
// tests of what serves it (the API, the daemon's shutdown) and of what talks
// to it (the Go SDK): a fresh embedded Store in a temporary directory, the
// local platform (namespace sandboxes) and the default data path, as
// `layerfsd serve` brings them up.
//
// A test binary that uses it lets the sandbox init run first: its TestMain
// is Main, or calls InitMain before anything else (the local platform
// re-executes the test binary as each sandbox's init).
//
// New gives one test its own engine, shut down when the test ends; Shared
// gives every test of the binary the same one, started by the first test
// that asks and shut down by Main after the last, so that a package pays
// for one Store and one platform. Tests that share it keep to projects of
// their own. Both need root and /dev/fuse and skip without them (a failure
// under LAYERFS_TEST_STRICT=1).
package enginetest
