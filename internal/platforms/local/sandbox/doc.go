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
// small init, with "/" as its working directory and new PID, UTS, IPC,
// mount and network namespaces made by clone. It hands the init, as
// descriptors, what needs the host's view and privileges: detached clones
// (open_tree) of the runtime (the host's /usr, /etc, or every top-level
// entry of an image directory; the /bin, /sbin and /lib* symlinks are
// recreated), read-only, made when the init starts (fds 4 on, described in
// its environment), and, for each exec, the workspace's clone, sent on the
// init's control socket (fd 3) in the exec's message with the read end of
// a pipe its config comes on and its stdin, stdout and stderr. Everything
// else the init does itself, as PID 1 of the new PID namespace. First,
// before any exec (a warm init long before):
//
//  1. brings up lo (new network namespace);
//  2. builds the root on a thread of its own, which unshares a mount
//     namespace, makes all mounts private, mounts a tmpfs as the new root
//     and moves the runtime's clones into it; a
//     private /tmp; a fresh /proc with /proc/sys and friends read-only and
//     the files that tell about the host's kernel masked (Docker's list); a
//     read-only /sys; a minimal read-only /dev (null, zero, full, random,
//     urandom, tty, pts, shm and the fd symlinks); then pivot_root(".", "."), detaches the old
//     root and makes the new root read-only (writes outside /workspace and
//     /tmp fail with EROFS), and ends, leaving the namespace to an fd;
//  3. enters the new namespace on its main thread and on a mounter thread
//     (unshare CLONE_FS, setns), empties the main thread's ambient and
//     inheritable capability sets and its bounding set (in a user
//     namespace, all but a container root's usual capabilities: see
//     rootCaps), sets no_new_privs (both are per thread) and loads the
//     seccomp filter (Launcher.SyscallFilter, which came in the init's
//     environment) there, and says it is ready.
//
// Then, for each exec it is sent:
//
//  4. reads its config as JSON (the launcher sends the exec only after
//     the init is in its cgroup, so nothing runs outside the limits);
//  5. has the mounter set the hostname and mount the workspace's clone
//     read-write at /workspace, and chdirs there;
//  6. on its main thread, locked to its OS thread, forks the command with a
//     vfork, in its own process group, as the configured uid and gid,
//     under the filter; the main thread then keeps only what it needs to
//     signal and reap and to fork the next command (see keepAfterFork);
//  7. reaps every process until the namespace is empty, kills what the
//     command left behind when it exits (or everything when the timeout
//     fires: kill(-1) from PID 1 reaches the whole namespace), holds none
//     of the exec's descriptors any more and reports the exit status, the
//     CPU time used and the command's start and end on the sandbox clock
//     as JSON on the control socket.
//
// The launcher caps stdout and stderr (the excess is drained and reported
// as truncation) and kills the init when the context ends or the init
// overstays its timeout. Run returns as soon as the report and the end of
// both output streams are in: the command's processes are gone by then.
// An init that served Launcher.Run's exec exits after its report; its own
// exit, the teardown of its namespaces and the removal of its cgroup
// finish in the background (Settle waits for them).
//
// # User namespaces
//
// With Launcher.UserNamespace (platforms/local sets it) the whole sandbox,
// init and command, runs in a user namespace, uid and gid 0 to Size-1
// inside being Host to Host+Size-1 outside. The launcher makes it once: its
// spawner (spawner_linux.go) is started in it as its root, and starts
// every init there with a plain vfork; the init then forks its command
// with a vfork too. Nothing of the exec's path makes a user namespace or
// writes a mapping (a fork into a new one copies the process and waits for
// its parent to write the mapping: see docs/security.md for what that
// cost). The runtime's and the workspace's clones are id-mapped
// (MOUNT_ATTR_IDMAP) with the namespace by the launcher, so that the ids on
// disk are the ids inside. Kernel overlayfs cannot be id-mapped as a mount,
// only its layers: a workspace mounted over layers id-mapped with that
// namespace (Launcher.IDMap, kerneloverlay.IDMap) shows the mapped ids
// already and is cloned as it is (Config.IDMapped). It fails closed: a
// launcher that cannot make its namespace refuses every exec, and an exec
// whose workspace's file system cannot be id-mapped is refused
// (ErrNoUserNamespace); neither runs in the host's user namespace instead.
// The spawner is exec'd from the init binary's sealed copy, not by its
// path, which the namespace's root may not be allowed to traverse. Only a
// launcher without UserNamespace starts its inits itself, in the host's
// user namespace. The filter refuses a clone into a new user
// namespace. The sandbox's mount namespace belongs to the user namespace,
// so its root must not have CAP_SYS_ADMIN there (with it, it could unmount
// the masks or make the runtime writable): the bounding set keeps only
// rootCaps. The init is exec'd from an execute-only copy of its binary, so
// its /proc entries belong to the host's root and need CAP_SYS_PTRACE in
// the host's user namespace to inspect.
//
// # Warm inits
//
// With Launcher.Warm > 0 the launcher keeps that many inits started ahead:
// each is an ordinary fresh init (its own new process, PID, UTS, IPC and
// network namespaces and cgroup) that has done steps 1-3 and waits for an
// exec. The workspace is cloned when the exec comes, so it may be one
// mounted after the init started. An exec without network or image takes
// one, sets its cgroup's limits and sends the exec; a replacement starts in
// the background once the exec is done. Execs with network or an image
// directory, and execs that find the pool empty, start their own. Close
// kills the waiting ones.
//
// # Kept inits
//
// A Session (platforms/local makes one per attached workspace) keeps the
// init of an exec that ended cleanly and runs the workspace's next exec on
// it: steps 4-7 only, no process, namespace, cgroup or root made, which is
// most of what an exec cost beyond its command (docs/benchmarks.md has the
// account). Before it says it is ready again, the init resets its sandbox
// on the mounter: the workspace is unmounted (a waiting init holds none),
// /tmp and /dev/shm are fresh tmpfs mounts, and every System V IPC object
// and POSIX message queue of its IPC namespace is removed. The processes
// of the exec are all gone by then, and what else could outlive them needs
// a capability the command's root lacks (CAP_SYS_ADMIN for mounts and the
// domain name, CAP_NET_ADMIN for the network namespace's devices, routes
// and rules) or is read-only (/proc/sys, /sys, the root): the next exec
// finds the sandbox as a fresh init leaves it, except that its PID
// namespace's pids go on counting and sockets the exec closed may linger in
// TIME_WAIT in its network namespace (a server that binds without
// SO_REUSEADDR then waits for them, as it would on a host). An init does
// not serve another exec after one that set an rlimit (it cannot raise its
// own back in a user namespace), timed out, failed to set up, was killed,
// or left the main thread's nice value, scheduling policy, CPU affinity or
// I/O priority changed (a command of the init's uid may change them, and
// the next command would inherit them): it exits, and the next exec starts
// or takes another. A Session keeps one init, for Launcher.KeepIdle after
// its exec; concurrent execs of one workspace each get an init of their
// own, and the Session keeps one of them. Session.Close ends the kept init.
//
// A command that signals PID 1 on purpose ends its own exec (the init is a
// Go program and dies of SIGTERM); the result then reports that signal.
// It cannot reach anything outside its sandbox.
//
// # Resident inits: services
//
// Session.Start starts a service: a command that keeps running after the
// call. The Session's first service makes an init resident (see
// resident_linux.go and service_linux.go): it mounts the workspace for
// good, never resets its sandbox again, runs each later command of the
// Session (services and execs, Session.Run) as a job beside the others, in
// its namespaces and cgroup, and reports each job by its id on the
// control socket. Its cgroup's limits are the first service's, for every
// job together. It ends once neither a service nor an exec runs in it, or
// with the Session.
//
// # Checkpoints
//
// Session.Checkpoint dumps a Session's resident sandbox (its init and
// every service, with their memory, /tmp and /dev/shm, IPC objects and
// sockets on the sandbox's lo) with CRIU (package criu), left running or
// stopped; Session.Restore makes a fresh sandbox of the images: new PID,
// network, IPC, UTS and mount namespaces, a new cgroup with the
// checkpoint's limits, the same seccomp filter, a user namespace of its
// own with the launcher's mapping (CRIU cannot restore into an existing
// one) and another workspace at /workspace. The runtime, the device nodes
// and the workspace are external mounts, cloned anew for a restore; the
// init's control socket and the services' output pipes are handed over in
// place of those the dump saw (checkpoint_linux.go and
// checkpoint_restore_linux.go say how). What CRIU cannot hold is refused
// before anything is frozen, naming the process and the resource, and so
// is an exec running beside the services; a restore that fails leaves no
// process, mount or cgroup. The init's binary must be linked statically
// (CGO_ENABLED=0, as the Makefile builds it): a dynamically linked one maps
// libraries from outside the sandbox.
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
//	go build -o /tmp/heavy ./internal/platforms/local/sandbox/internal/initbench/heavy
//	go test -c -o /tmp/sandbox.test ./internal/platforms/local/sandbox
//	LAYERFS_SANDBOX_EXES=/tmp/init:/tmp/heavy /tmp/sandbox.test -test.run Phases -test.v
//
// which prints the median of every phase of an exec of `true` for each
// binary, interleaved.
//
// # Limits
//
// Memory, pids and CPU limits use a cgroup per init (so per exec, but for
// a kept init's, whose limits each exec sets again) created below the
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
// or, for the execs of one workspace, a Session's Run, which keeps the
// sandbox of each for the next:
//
//	s := l.NewSession()
//	defer s.Close(ctx)
//	res, err := s.Run(ctx, sandbox.Config{Workspace: dir, Spec: spec}, stdout, stderr)
//
// MeasureOverhead measures the fixed cost of an exec for the bench, beside
// a plain spawn of the same command as the yardstick of the moment.
package sandbox
