// Package supervise is the process that runs every docker exec of LayerFS
// inside its container, and the container's idle PID 1.
//
// Docker has no API to kill an exec, and an exec's output stream stays open
// while any process it started holds stdout or stderr. So each exec is
//
//	layerfs-supervise exec TIMEOUT_NS [wait] -- ARGV...
//
// which runs ARGV in a new process group as a child subreaper, so that every
// process the command starts, even one that double-forks or calls setsid,
// stays its descendant. When the command ends, its timeout passes (on the
// container's clock) or the supervisor gets SIGTERM, SIGINT or SIGHUP from
// the host, it SIGKILLs all descendants (found from /proc) until none is
// left, reaps them, and writes a fixed-size Trailer (exit status, signal,
// flags, the command's time from just before fork to just after it was
// reaped) as the very last bytes of its stderr. Nothing can write after it:
// every process that held the stream is gone. It exits with the command's
// status. With "wait" it first reads one byte from stdin, the host's word
// that it has been moved into the exec's cgroups; EOF means the host gave
// up, and the command is not started.
//
// With "userns=HOST:SIZE as=UID:GID" (the supervisor is the container's
// root then, with CAP_SETUID and CAP_SETGID) the command is forked into a
// new user namespace whose ids 0 to SIZE-1 are HOST... on the host, as
// UID:GID inside it: the supervisor's binary starts there once more as
// "enter -- PATH ARGV...", sets no_new_privs, loads the seccomp filter the
// host sent in FilterEnv (dropped from the command's environment) and
// execs the command. "hold" only waits for its stdin to close: the
// platform starts it once in a namespace with the range, to keep that
// namespace for id-mapping workspaces.
//
// The supervisor is small on purpose: its start-up is part of every exec's
// fixed cost. cmd/layerfs-supervise is the stand-alone static binary;
// package docker also runs Main from an init hook when its own executable
// is started under the name layerfs-supervise, as a fallback for when that
// binary is not installed.
package supervise
