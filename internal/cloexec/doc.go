// Package cloexec keeps the daemon's file descriptors out of the processes
// it starts.
//
// A descriptor without close-on-exec survives execve, so every child of the
// daemon (a sandbox init, and through it the sandboxed command) would hold
// it. For a FUSE device that is a hole, not a leak: its holder can read the
// kernel's requests and forge replies, and while any process holds it the
// connection never aborts, so a crashed daemon's mount hangs instead of
// failing. Go opens its own descriptors close-on-exec, but not everything
// in the process does: go-fuse opens /dev/fuse without O_CLOEXEC, and a
// daemon inherits whatever its own parent leaked.
//
// Three tools, one per place:
//
//   - All, at the start of a process that starts children: everything it
//     inherited becomes close-on-exec.
//   - Around, around a call that may open a descriptor without
//     close-on-exec (a FUSE mount): no fork can happen while it runs, and
//     what it opened is close-on-exec when it returns.
//   - CloseInherited, in a freshly executed sandbox init: it closes what
//     reached it anyway, so that not even the init holds it.
package cloexec
