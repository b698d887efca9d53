// Command layerfsd is the LayerFS daemon. `layerfsd serve` owns one Store
// and every workspace mounted from it, and serves the HTTP API (package
// api) on a unix socket (mode 0600, default <store>/layerfsd.sock) and,
// optionally, on TCP behind a bearer token.
//
// The same binary is the sandbox init: an exec re-executes layerfsd, which
// recognises that role before anything else happens in main, so that the
// process serving FUSE mounts never forks a child into one of them.
//
// Lifecycle: take the Store's daemon lock, refuse to start when another
// daemon answers on the socket (a stale socket is removed), open the Store
// (creating it when missing), build the engine and recover the workspaces a
// previous daemon left, then serve. SIGTERM or SIGINT (or POST
// /v1/daemon/stop, or --idle-exit without requests and workspaces) drain:
// new work is refused with 503, running execs get --grace to finish and are
// then killed, mounts are unmounted, the socket is removed, exit 0.
package main
