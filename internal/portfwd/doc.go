// Package portfwd connects to a TCP port inside another network namespace
// (a sandbox's) without opening the host's network to it.
//
// Dial enters the namespace on a locked OS thread of its own (setns with
// an open /proc/PID/ns/net, or a pidfd of a process in it), makes the
// socket there and returns the thread to the namespace it came from; the
// socket stays in the sandbox's namespace, where its connect then reaches
// the sandbox's loopback. Nothing is added to either namespace: no
// device, route or address, so a sandbox whose namespace holds only lo
// still reaches nothing of the host, and only the daemon, which holds the
// namespace's descriptor, can connect in. A thread that cannot return to
// its namespace is never used again: its goroutine ends still locked to
// it, so the Go runtime ends the thread.
//
// Dial tries 127.0.0.1 first and then ::1, so a server bound to either
// loopback (or to a wildcard address) answers. A port nobody listens on
// fails with ErrRefused, of class errclass.Unreachable; a port outside
// 1-65535 with ErrBadPort, of class errclass.Invalid.
//
// Splice copies the bytes of two connections both ways until both
// directions end, passing on each direction's end as a half-close, as a
// forward of a TCP port must (a client that shuts its write side down
// still reads the answer).
package portfwd
