// Package maxprocs gives the Go scheduler a few more Ps than the CPUs the
// process may use, for the daemon and the CLI that embeds the engine.
//
// Why: a goroutine in a blocking system call keeps its P until the
// runtime's monitor thread (sysmon) takes it back, and sysmon, once the
// process has been idle for a few milliseconds, looks only every 10 ms.
// When every P is held that way (a sandbox launcher waiting for its init
// to exit, a fork waiting for its child's exec, FUSE readers waiting on
// /dev/fuse), a goroutine the network poller wakes, such as the one that
// reads an exec's output to its end or an HTTP request that just arrived,
// has no P to run on until sysmon's next look, and an exec after idle
// waits for it (docs/benchmarks.md has the session bench's figures). A
// spare P is idle when nothing needs it, and costs a few kilobytes.
package maxprocs
