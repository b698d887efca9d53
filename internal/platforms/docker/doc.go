// Package docker is the "docker" platform: sandboxes are Docker containers
// driven through the Engine API (github.com/docker/docker/client, API
// version negotiated, so an engine older than the client works).
//
// # Lifecycle
//
//	New(Options) -> Up -> Attach(workspace) -> Exec ... -> Sandbox.Close -> Down
//
// Up pings the engine (a missing engine is platforms.ErrUnavailable, with
// the address and how to start one in the message), reads its identity and
// ensures the sandbox image. Attach creates one long-lived container per
// workspace; each Exec is one docker exec in it. Down removes every
// container and volume this Platform created (they carry the labels
// dev.layerfs.workspace=<id>, dev.layerfs.owner=<pid>-<random> and
// dev.layerfs.pidns=<the owner's PID namespace>) and keeps the sandbox
// image. Up also removes what owners that no longer run left
// behind, so a crashed run is cleaned up by the next one, and removes
// sandbox images of older content.
//
// # The sandbox image
//
// There is no registry: the image is assembled from this host's runtime,
// the files of a list of Debian packages (DefaultPackages: bash, dash as
// sh, coreutils, findutils, git, python3, ...) as dpkg lists them, plus
// every shared library they need, found by reading their ELF headers
// (interpreter, DT_NEEDED, RUNPATH) rather than by running ldd. Documentation, locales and
// git's server programs are left out, identical files become hard links,
// and /etc/passwd and /etc/group are written fresh. The tar stream is
// written in a fixed order with fixed ownership, so equal host files give
// equal bytes; its BLAKE3 hash tags the image (layerfs-sandbox:<hash>), and
// Up only hashes (no import) when an image with that tag exists. The
// stream is sent to ImageImport straight from Go through a pipe. The image
// id is Identity.Image.
//
// # Containers
//
// A workspace's container runs the image with a read-only root, a tmpfs
// /tmp, the workspace's host path (a FUSE mount or a plain directory)
// bind-mounted at /workspace with private propagation, all capabilities
// dropped, no-new-privileges, a private IPC namespace, memory and pids
// limits for the container as a whole, no log driver, and network mode
// "none", or "host" when the workspace is granted the network (the engine
// may run without a bridge: scripts/ensure-docker starts it so); a
// workspace with network egress gets its link to the platform's egress
// (package egress) in the container's network namespace, found by the
// container's pid, once the container runs and before Attach returns. The bind
// holds a FUSE workspace's connection until the container is removed, so a
// workspace's Sandbox must be closed before its FUSE mount is unmounted.
//
// # User namespaces
//
// Docker puts containers in a user namespace only with userns-remap, a
// setting of the whole engine, and does not id-map bind mounts. So the
// platform makes the namespace itself, per exec, with the local platform's
// range (userns.DefaultRange): Up holds a namespace with that mapping
// (the supervisor started as "hold"), which the engine id-maps a docker
// workspace's overlay layers with (platforms.IDMapper); a workspace that
// is a plain directory is bound as an id-mapped clone under idmapRoot
// instead. Such a container keeps CAP_SETUID and CAP_SETGID for its root,
// the supervisor, whose profile (seccomp.DockerProfile(true)) lets it
// clone into a new user namespace; each exec's supervisor forks the
// command into one with the range and the exec's ids, where the command
// loads the BPF filter (which refuses that clone again) before it starts;
// see package supervise. It fails closed: an engine with userns-remap, a
// remote engine or a host that allows no user namespace fails Up, and a
// workspace that cannot be id-mapped fails Attach. Only
// Options.NoUserNamespace leaves commands in the host's namespace as uid 0
// without capabilities, and ExecResult.UserNamespace and Isolation say so.
//
// # Execs, and why a supervisor
//
// Docker has no API to kill an exec, and an exec's output stream stays
// open while any process it started holds stdout or stderr. So every exec
// runs under a supervisor (package internal/supervise), bind-mounted
// read-only at /.layerfs/layerfs-supervise; it is also the container's
// PID 1, which reaps orphans. It becomes a child subreaper, starts the
// command in its own process group, times it on the container's clock
// (ExecResult.Command), enforces the timeout on that clock, and on SIGTERM
// from the host does the same: SIGKILL to every descendant until none is
// left. When the command ends it kills what it left behind, so that, as
// the contract says, all its processes are gone when Exec returns; then it
// writes a fixed-size trailer (exit status, signal, flags, command time)
// as the last bytes of its stderr, which the host strips.
//
// The supervisor's start-up is part of every exec's fixed cost, so it is a
// small static program, cmd/layerfs-supervise, found beside the running
// executable or on PATH (or named by Options.Supervisor). Where it is not installed,
// the running executable itself is mounted instead: this package's init
// hook runs the supervisor when the process is started under that name
// (the re-exec pattern); it costs a larger binary's start-up, and needs its
// shared libraries in the image, which are added when it is dynamically
// linked.
//
// The trailer is read from the stream rather than from ExecInspect, which
// may still report the exec as running when the stream ends. Killing from
// inside the container works for any engine; the host adds a backstop: when
// the context ends, or the stream has not ended stopGrace after the
// timeout, it signals the
// supervisor by the pid ExecInspect reports (checked to be a supervisor, so
// an engine in another PID namespace is never confused with a local pid),
// then kills the tree itself. A wrapper shell script was the alternative:
// it cannot become a subreaper, so a setsid'd grandchild would escape it.
//
// Output is demultiplexed with stdcopy, capped per stream at
// ExecSpec.OutputLimit (the rest is read and discarded). Stdin is copied to
// the hijacked connection and then half-closed; with no Stdin the command
// reads end-of-file at once. PATH, HOME (/tmp, since the root is read-only) and
// TERM (dumb) are added when ExecSpec.Env lacks them.
//
// # Limits
//
// The container's memory and pids limits (Options) bound a workspace's
// execs together. An exec that sets ExecSpec.MemoryBytes or Pids gets its
// own limits too, where the engine is local and the host has cgroup v1
// (Features tells): it is created with "wait", the host reads the
// supervisor's pid from ExecInspect, makes child cgroups of the
// container's memory and pids cgroups with the exec's limits, moves the
// supervisor in, and only then sends the one byte on stdin that lets the
// supervisor start the command; the cgroups are removed when the exec
// ends. Execs without explicit limits skip this round trip.
// ExecSpec.Hostname must be empty or the container's hostname ("layerfs").
//
// A Workspace.RootDir is imported as its own image (layerfs-rootdir:<hash>,
// removed on Close and Down); a dynamically linked supervisor needs its
// interpreter there, which Attach checks. A writable one (the workspace's
// own root) is bound instead, and Attach makes it the container's root
// from the host once the container runs (nsenter into its namespaces and
// the supervisor's pivot, see ownRoot and pivotRoot).
package docker
