// Package sandbox runs one command in a fresh Linux sandbox: new mount, PID,
// UTS, IPC and (unless the workspace was granted the host's) network
// namespaces, a read-only root, the workspace at /workspace, no
// capabilities, and cgroup limits.
//
// # Two processes
//
// The Launcher (in the daemon) never forks a child that touches a
// workspace. A process that serves a FUSE mount and forks a child whose
// chdir or first path lookups land on that mount can deadlock, so the
// launcher re-executes a binary (by default its own, /proc/self/exe) as a
// small init, with "/" as its working directory and new PID, UTS, IPC and
// network namespaces made by clone. Everything else the init does itself,
// as PID 1 of the new PID namespace:
//
//  1. reads its config as JSON from fd 3 (the launcher writes it only after
//     the init is in its cgroup, so nothing runs outside the limits);
//  2. brings up lo (new network namespace) and sets the hostname;
//  3. builds the root on a thread of its own, which unshares a mount
//     namespace, makes all mounts private, mounts a tmpfs as the new root
//     and moves into it clones (open_tree) of the runtime (the host's /usr,
//     /etc and their /bin, /sbin, /lib* symlinks, or every top-level entry
//     of an image directory), read-only with one mount_setattr each; a
//     private /tmp; a fresh /proc with /proc/sys and friends read-only and
//     the files that tell about the host's kernel masked (Docker's list); a
//     read-only /sys; a minimal read-only /dev (null, zero, full, random,
//     urandom, tty, pts, shm and the fd symlinks); then pivot_root(".", "."), detaches the old
//     root and makes the new root read-only (writes outside /workspace and
//     /tmp fail with EROFS), and ends, leaving the namespace to an fd;
//  4. on its main thread, which has stayed in the host's mount namespace
//     and so sees the host's mounts as they are now, clones the workspace,
//     enters the new namespace (unshare CLONE_FS, setns) and mounts the
//     clone read-write at /workspace, then chdirs there;
//  5. on its main thread, locked to its OS thread, empties the bounding,
//     ambient and inheritable capability sets and sets no_new_privs (both
//     are per thread), then forks the command from that thread, in its own
//     process group, as the configured uid and gid, so the command starts
//     with no capabilities at all, under the seccomp filter
//     (Launcher.SyscallFilter, which came in the init's environment) that
//     the init loaded on that thread just before the fork; the init thread
//     then keeps only CAP_KILL. With Launcher.UserNamespace the fork makes a
//     new user namespace for the command (see below), whose root has that
//     namespace's capabilities;
//  6. reaps every process until the namespace is empty, kills what the
//     command left behind when it exits (or everything when the timeout
//     fires: kill(-1) from PID 1 reaches the whole namespace), closes its
//     stdio and reports the exit status and the command's start and end on
//     the sandbox clock as JSON on fd 4.
//
// The launcher caps stdout and stderr (the excess is drained and reported
// as truncation) and kills the init when the context ends or the init
// overstays its timeout. Run returns as soon as the report and the end of
// both output streams are in: the command's processes are gone by then.
// The init's own exit, the teardown of its namespaces and the removal of
// the exec's cgroup finish in the background (Settle waits for them).
//
// # User namespaces
//
// With Launcher.UserNamespace (platforms/local sets it) the command runs in
// a user namespace of its own, uid and gid 0 to Size-1 inside being Host
// to Host+Size-1 outside, while the init stays in the host's: it builds
// the root and clones the workspace with the host's privileges, and forks
// the command with CLONE_NEWUSER, writing its uid_map and gid_map. The
// workspace clone is id-mapped (MOUNT_ATTR_IDMAP) with a user namespace of
// the same mapping that the launcher makes once (holdUserNS) and hands
// every init as fd 5, so that the ids on disk are the ids inside. Kernel
// overlayfs cannot be id-mapped as a mount, only its layers: a workspace
// mounted over layers id-mapped with that namespace (Launcher.IDMap,
// kerneloverlay.IDMap) shows the mapped ids already and is cloned as it is
// (Config.IDMapped). A workspace whose file system cannot be id-mapped
// runs its command in the host's user namespace, and the result says why
// (ExecResult.UserNamespace). The fork runs under the filter: clone's
// program returns SECCOMP_RET_USER_NOTIF for CLONE_NEWUSER, and the init,
// which loaded it with a listener, lets its own fork through and answers
// EPERM to every other (answerNewUser). /, /tmp and /dev/shm are owned by
// the namespace's root.
//
// # Warm inits
//
// With Launcher.Warm > 0 the launcher keeps that many inits started ahead:
// each is an ordinary fresh init (its own new process, PID, UTS, IPC and
// network namespaces and cgroup) that has already started the Go runtime,
// brought up lo, built the default root (step 3) and dropped its
// privileges, and is blocked on reading its config. The workspace is still
// cloned when the config comes (step 4), so it sees workspaces mounted
// after it started. With a user namespace, a warm init also forks its
// command's process ahead, once the launcher has put it in its cgroup: a
// stub (this binary again, started through the sandbox's /proc/self/exe
// from a thread in the sandbox's mount namespace) in the new user
// namespace, with no_new_privs and the filter loaded, that waits on a pipe;
// when the exec comes the init sends it the command, its ids, directory
// and limits, and the stub execs it (ahead_linux.go). The init forks at
// exec time instead when the workspace gets no user namespace, a limit is
// above what the stub may set, or a cgroup v1 cpu cgroup was made for the
// exec. An exec without network or image takes one, sets its
// cgroup's limits and sends the config; a replacement starts in the
// background. Execs with network or an image directory, and execs that find
// the pool empty, start their own. Close kills the waiting ones.
//
// A command that signals PID 1 on purpose ends its own exec (the init is a
// Go program and dies of SIGTERM); the result then reports that signal.
// It cannot reach anything outside its sandbox.
//
// # The binary that is re-executed
//
// Go runs every linked package's init functions before main, so
// re-executing layerfsd (SQLite, go-fuse, the Docker client) costs several
// times what re-executing a binary that only holds the init costs. The
// launcher re-executes whatever Launcher.Exe names; InitBinary finds the
// dedicated init (cmd/layerfs-sandbox-init here) installed next to the
// daemon, and the default is the running binary itself. To compare them:
//
//	go build -o /tmp/init ./cmd/layerfs-sandbox-init
//	go build -o /tmp/heavy ./engine/sandbox/internal/initbench/heavy
//	go test -c -o /tmp/sandbox.test ./engine/sandbox
//	LAYERFS_SANDBOX_EXES=/tmp/init:/tmp/heavy /tmp/sandbox.test -test.run Phases -test.v
//
// which prints the median of every phase of an exec of `true` for each
// binary, interleaved.
//
// # Limits
//
// Memory, pids and CPU limits use a per-exec cgroup created below the
// launcher's own: cgroup v2 when the launcher's unified cgroup delegates
// memory and pids (and cpu, for CPU limits; the init is cloned straight
// into it), else the v1 memory, pids and cpu hierarchies (the init is moved
// in before it reads its config). The open files limit is an rlimit the
// init sets around the fork.
// Without cgroups the init sets RLIMIT_AS and, for a non-root uid only,
// RLIMIT_NPROC (it counts every process of the uid on the host). The pids
// limit includes headroom for the init's own threads.
//
// # Using it
//
// A binary that launches sandboxes calls InitMain first thing in main (and
// a test binary in TestMain); then
//
//	l := &sandbox.Launcher{Exe: sandbox.InitBinary(), Logger: log}
//	res, err := l.Run(ctx, sandbox.Config{Workspace: dir, Spec: spec}, stdout, stderr)
//
// MeasureOverhead measures the fixed cost of an exec for the bench, beside
// a plain spawn of the same command as the yardstick of the moment.
package sandbox
