// Package engine owns a Store's workspaces: it mounts each as a
// copy-on-write view over a committed tree, on one of two data paths
// (kernel overlayfs over the commit's metadata image, package
// kerneloverlay, by default; or the daemon's own FUSE view, package fusefs,
// where overlayfs cannot serve it, the workspace's data path saying why),
// attaches it to the platform its sandboxes run on, runs execs there,
// commits what changed (the upper read as overlayfs wrote it, built into a
// tree by package commit) and ends it. It also offers the Store's history operations in the API's
// terms, so the api package needs nothing else.
//
// # Lifecycle of a workspace
//
//	CreateWorkspace -> (Exec | WriteFile | PutTar | ...)* -> CommitWorkspace* -> EndWorkspace
//
// A workspace is recorded in the Store before it is mounted and removed
// after it is unmounted, so a daemon killed at any point leaves a record
// and an upper layer that Recover (or MountWorkspace) serves again, with
// nothing written lost. Execs hold a workspace shared; commit, end and
// remount hold it exclusively, so a commit sees no half-finished exec.
//
// A commit that finds the branch head moved stores the commit and returns
// it with head-moved; the workspace keeps its changes uncommitted. End
// refuses to drop uncommitted changes unless asked to discard them.
//
// # Merges
//
// A commit with merge that finds the head moved merges its commit with the
// new head (commit.MergeInto) and brings the workspace to the merge; an
// update merges the workspace's tree (its head and its changes) with a
// branch's head and brings the workspace to the merge standing on that
// head, its changes uncommitted. Both change the live view through the
// mount (commit.Apply: what differs only), in steps recorded in the
// workspace's record before they are made (catchUp), so a daemon that dies
// half way makes them again when it remounts the workspace. A fork
// captures the workspace's tree once and opens workspaces on its head that
// take the same steps to hold it.
//
// # Native workspaces
//
// A native workspace is a plain directory on the Store's file system, with
// no history, served through the same platform and sandbox: the bench's
// reference arm. It lives in memory only.
//
// # Paths from requests
//
// File transfers resolve every path below the workspace root with
// openat2(RESOLVE_BENEATH), so neither ".." nor a symlink can lead
// outside; a tar upload is checked whole before anything is written.
package engine
