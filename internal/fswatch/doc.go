// Package fswatch reports the changes in a directory tree as they happen,
// for the event streams of workspaces (GET /v1/workspaces/{id}/events).
//
// # Why inotify on the mount
//
// A workspace is served by different data paths (the daemon's FUSE file
// system, or kernel overlayfs over a FUSE lower), and its files are changed
// by processes on the host and in sandboxes of several platforms. What they
// all share is the mount: every change goes through the kernel's VFS on the
// workspace's mount (a sandbox's /workspace is a bind of it, which shares
// its inodes), and the VFS reports changes to inotify whatever file system
// serves them. So a watcher on the mount sees every change from every
// process without a hook in any data path, and a new data path needs no
// work here. (It does not see changes made behind the mount's back, such
// as the daemon writing a FUSE upper layer directly; none of the data paths
// does that for a workspace's files.)
//
// # Safety
//
// Paths in a workspace are hostile: a directory is opened by name from its
// parent's descriptor with O_NOFOLLOW, starting from the root with
// openat2(RESOLVE_BENEATH), and the watch is added on that descriptor's
// /proc/self/fd path, so a symlink can never make the watcher look outside
// the tree. No descriptor is kept open between operations, so a watcher
// never keeps the mount busy: when the workspace is unmounted the kernel
// drops the watches and the watcher ends (ErrEnded).
//
// # Load
//
// The kernel queues events without slowing the writers (past its queue,
// it drops them and says so: Overflow). One goroutine drains that queue
// into a bounded coalescing buffer, so a slow consumer never slows the
// file system: repeated changes to a path become one event, and when the
// buffer holds Options.MaxPending paths, further new paths are counted and
// reported as one Dropped event instead of queued.
package fswatch
