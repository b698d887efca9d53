// Package seccomp is the system call filter of every LayerFS sandbox, one
// profile for every platform that runs sandboxes on a Linux kernel it
// controls (local and docker).
//
// # The profile
//
// Profile is Docker's default seccomp profile (github.com/moby/profiles/
// seccomp, kept as data there) resolved for a process with no capabilities
// on this machine's architecture: an allow-list of some 350 calls, with
// argument conditions on clone, socket and personality, and EPERM for
// everything else. A sandboxed command has no capabilities, so every rule
// Docker includes only for a capability is left out, and the calls the
// kernel would refuse anyway for want of one (mount, pivot_root, unshare,
// setns, bpf, perf_event_open, kexec_*, *_module, reboot, swapon, acct,
// open_by_handle_at, ...) are refused before they reach the code that
// checks. LayerFS changes it in two ways:
//
//   - name_to_handle_at is refused too (Docker allows it): it is the first
//     half of the open_by_handle_at escape and a workload has no use for it;
//   - only the native ABI is allowed: 32-bit and x32 system calls are
//     refused, since every architecture added to a filter is a second
//     table of numbers to get right.
//
// Refused calls return EPERM (clone3 returns ENOSYS, as in Docker, so that
// the C library falls back to clone, whose flags can be checked). Nothing
// is killed: a program that probes for a call degrades the way it does in
// a Docker container.
//
// # Two forms
//
// BPF compiles the profile into the classic BPF programs that the local
// sandbox init loads with seccomp(2) just before it starts the command, in
// pure Go so the binaries stay static: one program decides every call by
// its number (a binary search over ranges of numbers, assembled with
// golang.org/x/net/bpf), and one per call with argument conditions
// (assembled by github.com/elastic/go-seccomp-bpf); see BPF for why. They
// are compiled once, in the daemon: the init, which starts for every exec,
// never links the compiler (go-seccomp-bpf's package initialisation would
// run at every exec). DockerProfile renders the same rules as Docker's
// JSON profile format, for a container's SecurityOpt "seccomp=...".
package seccomp
