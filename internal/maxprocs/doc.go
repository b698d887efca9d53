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
// has no P to run on until sysmon's next look. Measured on a 2-CPU VM with
// `layerfs bench session`: an exec of `true` after 50 ms idle took 13.0 ms
// at the median with GOMAXPROCS=2 and 4.8-6.3 ms with 4 or 8 Ps, where 6
// of 15 execs in a row of the sandbox alone waited 10-15 ms for their
// output's end. A spare P is idle when nothing needs it, and costs a few
// kilobytes.
package maxprocs
