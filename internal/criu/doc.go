// Package criu runs CRIU, the checkpointer of Linux process trees, for the
// sandboxes LayerFS checkpoints: a dump of a running tree into a
// directory of image files, a restore of one, the scan that refuses what
// CRIU cannot hold before anything is frozen, and the few edits of a
// dump's images a restore into a fresh sandbox needs.
//
// # The binary
//
// CRIU is not Go: it is the criu program, run as a command (its CLI, one
// run per dump or restore; the swrk RPC mode would save only the exec).
// Binary finds it: LAYERFS_CRIU, else scripts/ensure-criu's install in
// /var/cache/layerfs/criu (Debian trixie's criu 4.1.1 with its own
// libraries, started through that libc's loader with a small preloaded
// library: see scripts/criu/preload.c for what it changes and why), else
// criu on PATH. Without one, every call fails with ErrUnavailable.
//
// # Dump
//
// Dump.Run dumps the tree of one process (with its namespaces, where they
// are not CRIU's own) and, with LeaveRunning, lets it run on afterwards.
// Frozen, when set, runs while every process of the tree is still frozen
// and the images are complete (CRIU's post-dump action script, handed
// over on two FIFOs): what must be captured at the same instant as the
// processes (a workspace's files) is captured there, and an error from it
// fails the dump and lets the tree run on, unchanged. Mounts the tree sees
// that CRIU must not copy (the runtime, the workspace, device nodes bound
// from the host) are external: Dump records them by a key, and a restore
// binds whatever the caller maps the key to.
//
// # Restore
//
// Restore's Args are one restore's command line: the image directory, the
// root the restored mount namespace is built on, each external mount's
// source, and the descriptors the restored tree inherits in place of the
// ends it held of pipes and sockets outside it (--inherit-fd). The caller
// runs them (a sandbox runs criu from a helper that first stages the
// sources in a private mount namespace); Restore.Run runs them as they
// are. The restored root process is detached and becomes a child of the
// process that started criu (--restore-sibling), so that it can be waited
// for and dies with it.
//
// # What cannot be checkpointed
//
// Scan lists, for every process of a tree, what CRIU cannot dump or a
// restore elsewhere cannot give back: a device other than the memory
// devices and terminals (a FUSE device above all), a socket of another
// network namespace (a connection to outside the sandbox), a file on a
// mount outside the tree's mount namespace, io_uring, userfaultfd, perf
// and BPF descriptors. Each Problem names the process (its pid inside its
// PID namespace and its name), the descriptor and the resource; a caller
// refuses the checkpoint with them before anything is frozen. What Scan
// does not see and CRIU refuses is reported from CRIU's log (Failure).
//
// # Images
//
// RelinkMemfdExe edits a dump so that CRIU 4.1.1 can restore a process
// whose executable is a memfd (a sandbox's init runs from a sealed memfd
// copy of its binary): CRIU dumps such an executable as the memfd but can
// restore an executable only from a regular file, so the dump's
// executable link is pointed at a regular file the restore provides with
// the same bytes (the memfd's pages are restored from the images as
// before). A memfd whose owner the dumped user namespace does not map
// (the host's root) is given that namespace's root, as CRIU cannot make a
// file inside a user namespace belong to an id it does not map.
package criu
