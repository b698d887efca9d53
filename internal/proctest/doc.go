// Package proctest finds host processes for the tests that check what a
// sandbox leaves running: processes by command line, the children of a
// process, and the sleeps a test starts to escape an exec (Escapers) and
// then looks for (Sleepers).
//
// It reads /proc, so it works only on Linux, and sees the processes of
// the caller's PID namespace.
package proctest
