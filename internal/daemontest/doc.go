// Package daemontest runs the real layerfsd for tests of its clients (the
// MCP server, the Python SDK): the commands are built once per test binary
// with go build, and each test gets a daemon on a fresh Store in its temp
// directory, stopped (SIGTERM, then SIGKILL past a deadline) when the test
// ends. Tests that use it need root and /dev/fuse and skip without them
// (a failure under LAYERFS_TEST_STRICT=1).
package daemontest
