package userns

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// Range is the host ids a user namespace maps its ids 0 to Size-1 to.
type Range struct {
	Host uint32
	Size uint32
}

// String is the mapping as /proc/PID/uid_map shows it: "inside host size".
func (r Range) String() string { return fmt.Sprintf("0 %d %d", r.Host, r.Size) }

// Default is the host ids a sandbox's user namespace maps its ids 0-65535
// to when nothing else is configured: a range no user or subordinate range
// on a usual host has (useradd hands out subordinate ranges from 100000 up,
// systemd-nspawn's dynamic ranges end at 1879048191, and systemd's
// "foreign" range starts at 2147352576).
var Default = Range{Host: 2_000_000_000, Size: 65536}

// Validate checks that r can be a user namespace's mapping.
func (r Range) Validate() error {
	switch {
	case r.Size == 0:
		return fmt.Errorf("user namespace range %v is empty", r)
	case r.Host == 0:
		return fmt.Errorf("user namespace range %v would map a sandbox's root to the host's", r)
	case uint64(r.Host)+uint64(r.Size) > 1<<32-1:
		return fmt.Errorf("user namespace range %v goes past the last id", r)
	}
	return nil
}

// Arg is r as "HOST:SIZE", the form ParseArg reads (an environment
// variable's value, a command's argument).
func (r Range) Arg() string { return fmt.Sprintf("%d:%d", r.Host, r.Size) }

// ParseArg reads Arg's form and checks that it can be a mapping.
func ParseArg(s string) (Range, error) {
	host, size, ok := strings.Cut(s, ":")
	h, err1 := strconv.ParseUint(host, 10, 32)
	n, err2 := strconv.ParseUint(size, 10, 32)
	if !ok || err1 != nil || err2 != nil {
		return Range{}, fmt.Errorf("user namespace range %q: want HOST:SIZE", s)
	}
	r := Range{Host: uint32(h), Size: uint32(n)}
	return r, r.Validate()
}

// Mapping is r as a uid or gid mapping for syscall.SysProcAttr.
func (r Range) Mapping() []syscall.SysProcIDMap {
	return []syscall.SysProcIDMap{{ContainerID: 0, HostID: int(r.Host), Size: int(r.Size)}}
}

// Hold makes a user namespace with mapping r and returns it as an open
// /proc/PID/ns/user: exe is started with args in a new user namespace with
// that mapping and must only wait for its stdin to close; the file keeps
// the namespace once the process is gone. Any namespace with a sandbox's
// mapping id-maps its workspace alike, and one made once costs the execs
// nothing.
func Hold(exe string, args []string, r Range) (*os.File, error) {
	if err := r.Validate(); err != nil {
		return nil, err
	}
	cmd := &exec.Cmd{
		Path: exe, Args: args, Env: []string{"HOME=/"}, Dir: "/",
		SysProcAttr: &syscall.SysProcAttr{
			Cloneflags: syscall.CLONE_NEWUSER, UidMappings: r.Mapping(), GidMappings: r.Mapping(),
			Pdeathsig: syscall.SIGKILL,
		},
	}
	in, err := cmd.StdinPipe()
	if err != nil {
		return nil, fmt.Errorf("user namespace: %w", err)
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("user namespace: start %s in one: %w", exe, err)
	}
	f, err := os.Open("/proc/" + strconv.Itoa(cmd.Process.Pid) + "/ns/user")
	in.Close()
	if werr := cmd.Wait(); err == nil && werr != nil {
		err = fmt.Errorf("%s ended with %w (does it wait for its stdin to close?)", exe, werr)
	}
	if err != nil {
		if f != nil {
			f.Close()
		}
		return nil, fmt.Errorf("user namespace: %w", err)
	}
	return f, nil
}

// WaitStdin is the whole life of a process Hold starts: it returns when
// its stdin closes.
func WaitStdin() {
	var b [1]byte
	for {
		if _, err := os.Stdin.Read(b[:]); err != nil {
			return
		}
	}
}

// IDMap id-maps every mount of the detached tree fd (from open_tree with
// OPEN_TREE_CLONE) with the user namespace userns.
func IDMap(fd, userns int) error {
	attr := unix.MountAttr{Attr_set: unix.MOUNT_ATTR_IDMAP, Userns_fd: uint64(userns)}
	return unix.MountSetattr(fd, "", unix.AT_EMPTY_PATH|unix.AT_RECURSIVE, &attr)
}

// Remedy says what to change on the host, given why a process could not be
// started in a new user namespace.
func Remedy(err error) string {
	switch {
	case errors.Is(err, unix.ENOSPC):
		return "the host allows no more user namespaces: raise user.max_user_namespaces"
	case errors.Is(err, unix.EPERM), errors.Is(err, unix.EACCES):
		return "the host refuses this process a user namespace, or its root the binary: a security module " +
			"(AppArmor's kernel.apparmor_restrict_unprivileged_userns), a seccomp profile, a container without CAP_SYS_ADMIN, " +
			"or a binary on a noexec mount"
	case errors.Is(err, unix.EINVAL):
		return "the host's kernel has no user namespaces (CONFIG_USER_NS), or the id range is not free"
	}
	return "the host must allow user namespaces"
}
