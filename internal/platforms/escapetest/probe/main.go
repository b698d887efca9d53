package main

import (
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"unsafe"

	"golang.org/x/sys/unix"
)

// attempt tries one way out. nil means it worked; an error is the reason
// it did not.
type attempt func(args []string) error

var cases = map[string]attempt{
	"mount":           tryMount,
	"unshare-mnt":     func([]string) error { return unix.Unshare(unix.CLONE_NEWNS) },
	"unshare-user":    func([]string) error { return unix.Unshare(unix.CLONE_NEWUSER) },
	"clone-newuser":   tryCloneNewUser,
	"setns":           trySetns,
	"open-by-handle":  tryOpenByHandle,
	"name-to-handle":  tryNameToHandle,
	"bpf":             func([]string) error { return rawErr(unix.SYS_BPF, 0, 0, 0) },
	"perf-event-open": func([]string) error { return rawErr(unix.SYS_PERF_EVENT_OPEN, 0, 0, 0) },
	"keyctl":          func([]string) error { return rawErr(unix.SYS_KEYCTL, 0, 0, 0) },
	"add-key":         func([]string) error { return rawErr(unix.SYS_ADD_KEY, 0, 0, 0) },
	"userfaultfd":     func([]string) error { return rawErr(unix.SYS_USERFAULTFD, 0, 0, 0) },
	"io-uring-setup":  func([]string) error { return rawErr(unix.SYS_IO_URING_SETUP, 0, 0, 0) },
	"kexec-load":      func([]string) error { return rawErr(unix.SYS_KEXEC_LOAD, 0, 0, 0) },
	"init-module":     func([]string) error { return rawErr(unix.SYS_INIT_MODULE, 0, 0, 0) },
	"reboot":          func([]string) error { return rawErr(unix.SYS_REBOOT, 0, 0, 0) },
	"swapon":          func([]string) error { return rawErr(unix.SYS_SWAPON, 0, 0, 0) },
	"acct":            func([]string) error { return rawErr(unix.SYS_ACCT, 0, 0, 0) },
	"ptrace":          tryPtrace,
	"proc-root":       tryProcRoot,
	"write":           tryWrite,
	"read":            tryRead,
	"mknod":           tryMknod,
	"setuid-exec":     trySetuidExec,
	"euid":            tryEuid,
	"hardlink":        tryHardlink,
	"connect-unix":    func(a []string) error { return tryConnect("unix", a) },
	"connect-tcp":     func(a []string) error { return tryConnect("tcp", a) },
	"vsock":           func([]string) error { return socketErr(unix.AF_VSOCK) },
	"socket-inet":     func([]string) error { return socketErr(unix.AF_INET) }, // allowed: a control
	"chroot":          func([]string) error { return unix.Chroot("/tmp") },
	"sysctl-hostname": func([]string) error { return unix.Sethostname([]byte("x")) },
	"write-workspace": tryWriteWorkspace, // allowed: a control
	"host-root":       tryHostRoot,
}

// tryHostRoot reads the sandbox's uid_map: uid 0 inside being the host's
// uid 0 is the "escape"; otherwise the refusal names the host uid.
func tryHostRoot([]string) error {
	b, err := os.ReadFile("/proc/self/uid_map")
	if err != nil {
		return usageError{err}
	}
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) == 3 && f[0] == "0" {
			if f[1] == "0" {
				return nil
			}
			return fmt.Errorf("uid 0 is host uid %s", f[1])
		}
	}
	return errors.New("uid 0 is not mapped")
}

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: probe CASE [ARG...]")
		os.Exit(2)
	}
	a, ok := cases[os.Args[1]]
	if !ok {
		fmt.Fprintln(os.Stderr, "probe: no case", os.Args[1])
		os.Exit(2)
	}
	err := a(os.Args[2:])
	var usage usageError
	switch {
	case errors.As(err, &usage):
		fmt.Fprintln(os.Stderr, "probe:", err)
		os.Exit(2)
	case err != nil:
		fmt.Println("refused:", errnoName(err))
	default:
		fmt.Println("allowed")
		os.Exit(3)
	}
}

// usageError is a case that could not be tried at all.
type usageError struct{ error }

func errnoName(err error) string {
	var e unix.Errno
	if errors.As(err, &e) {
		return unix.ErrnoName(e)
	}
	return err.Error()
}

func rawErr(nr uintptr, a1, a2, a3 uintptr) error {
	_, _, e := unix.Syscall(nr, a1, a2, a3)
	if e != 0 {
		return e
	}
	return nil
}

func socketErr(domain int) error {
	fd, err := unix.Socket(domain, unix.SOCK_STREAM, 0)
	if err != nil {
		return err
	}
	unix.Close(fd)
	return nil
}

func tryMount([]string) error {
	dir, err := os.MkdirTemp("", "m")
	if err != nil {
		return usageError{err}
	}
	return unix.Mount("tmpfs", dir, "tmpfs", 0, "")
}

func tryCloneNewUser([]string) error {
	// A raw clone with CLONE_NEWUSER; the child exits at once.
	pid, _, e := unix.RawSyscall6(unix.SYS_CLONE, uintptr(unix.CLONE_NEWUSER|int(unix.SIGCHLD)), 0, 0, 0, 0, 0)
	if e != 0 {
		return e
	}
	if pid == 0 {
		unix.RawSyscall(unix.SYS_EXIT_GROUP, 0, 0, 0)
	}
	var ws unix.WaitStatus
	_, _ = unix.Wait4(int(pid), &ws, 0, nil)
	return nil
}

// trySetns enters the mount namespace of the sandbox's PID 1 (args[0]
// names another pid).
func trySetns(args []string) error {
	pid := "1"
	if len(args) > 0 {
		pid = args[0]
	}
	fd, err := unix.Open("/proc/"+pid+"/ns/mnt", unix.O_RDONLY, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	return unix.Setns(fd, unix.CLONE_NEWNS)
}

// tryOpenByHandle is the "shocker" attack: a file handle for inode 2 (the
// root directory of an ext4 file system) opened through a descriptor of
// the sandbox's own file system resolves outside any mount's root.
func tryOpenByHandle([]string) error {
	mount, err := unix.Open("/", unix.O_RDONLY|unix.O_DIRECTORY, 0)
	if err != nil {
		return usageError{err}
	}
	defer unix.Close(mount)
	var h struct {
		bytes uint32
		typ   int32
		ino   uint64
	}
	h.bytes, h.typ, h.ino = 8, 1, 2 // FILEID_INO32_GEN: {ino 2, generation 0}
	fd, _, e := unix.Syscall(unix.SYS_OPEN_BY_HANDLE_AT, uintptr(mount), uintptr(unsafe.Pointer(&h)), unix.O_RDONLY)
	if e != 0 {
		return e
	}
	unix.Close(int(fd))
	return nil
}

func tryNameToHandle([]string) error {
	_, _, err := unix.NameToHandleAt(unix.AT_FDCWD, "/", 0)
	return err
}

// tryPtrace attaches to args[0], a pid (the daemon's, as the host sees it).
func tryPtrace(args []string) error {
	if len(args) != 1 {
		return usageError{errors.New("ptrace PID")}
	}
	pid, err := strconv.Atoi(args[0])
	if err != nil {
		return usageError{err}
	}
	if err := unix.PtraceAttach(pid); err != nil {
		return err
	}
	_ = unix.PtraceDetach(pid)
	return nil
}

// tryProcRoot looks for args[0], a path that exists only on the host,
// through the root of every process and thread the sandbox can see (the
// sandbox init's threads other than its main one stay in the host's mount
// namespace).
func tryProcRoot(args []string) error {
	if len(args) != 1 {
		return usageError{errors.New("proc-root HOST-PATH")}
	}
	roots, err := filepath.Glob("/proc/[0-9]*/task/[0-9]*/root")
	if err != nil || len(roots) == 0 {
		return usageError{fmt.Errorf("no /proc/PID/task/TID/root: %v", err)}
	}
	more, _ := filepath.Glob("/proc/[0-9]*/root")
	var last error = unix.ENOENT
	for _, r := range append(roots, more...) {
		p := filepath.Join(r, args[0])
		if _, err := os.Stat(p); err == nil {
			fmt.Println("found", p)
			return nil
		} else if !errors.Is(err, unix.ENOENT) {
			last = err
		}
	}
	return last
}

// tryRead reads a byte of args[0]; an escape when there is one.
func tryRead(args []string) error {
	if len(args) != 1 {
		return usageError{errors.New("read PATH")}
	}
	f, err := os.Open(args[0])
	if err != nil {
		return err
	}
	defer f.Close()
	var b [1]byte
	n, err := f.Read(b[:])
	if n == 1 {
		return nil
	}
	if err == nil || errors.Is(err, io.EOF) {
		return errors.New("EMPTY")
	}
	return err
}

// tryWrite opens args[0] for writing: that it opens is the escape (the
// probe writes nothing, so the host is unchanged even then).
func tryWrite(args []string) error {
	if len(args) != 1 {
		return usageError{errors.New("write PATH")}
	}
	f, err := os.OpenFile(args[0], os.O_WRONLY, 0)
	if err != nil {
		return err
	}
	return f.Close()
}

func tryMknod(args []string) error {
	if len(args) != 1 {
		return usageError{errors.New("mknod PATH")}
	}
	return unix.Mknod(args[0], unix.S_IFCHR|0o666, int(unix.Mkdev(1, 3)))
}

// trySetuidExec runs args[0], a setuid-root program, which reports its
// euid; it is an escape when the caller was not root and it runs as root.
func trySetuidExec(args []string) error {
	if len(args) != 1 {
		return usageError{errors.New("setuid-exec PROGRAM")}
	}
	if os.Geteuid() == 0 {
		return usageError{errors.New("run it as a non-root uid")}
	}
	out, err := execOutput(args[0], "euid")
	if err != nil {
		return usageError{err}
	}
	if strings.TrimSpace(out) == "0" {
		return nil
	}
	return fmt.Errorf("EUID_%s", strings.TrimSpace(out))
}

func tryEuid([]string) error {
	fmt.Println(os.Geteuid())
	return errors.New("reported")
}

func execOutput(prog string, args ...string) (string, error) {
	r, w, err := os.Pipe()
	if err != nil {
		return "", err
	}
	p, err := os.StartProcess(prog, append([]string{prog}, args...), &os.ProcAttr{Files: []*os.File{nil, w, os.Stderr}})
	w.Close()
	if err != nil {
		r.Close()
		return "", err
	}
	buf := make([]byte, 64)
	n, _ := r.Read(buf)
	r.Close()
	_, _ = p.Wait()
	out := string(buf[:n])
	if i := strings.Index(out, "\n"); i >= 0 {
		out = out[:i]
	}
	return out, nil
}

// tryHardlink links args[0], outside the workspace, into args[1].
func tryHardlink(args []string) error {
	if len(args) != 2 {
		return usageError{errors.New("hardlink TARGET LINK")}
	}
	return unix.Link(args[0], args[1])
}

func tryConnect(network string, args []string) error {
	if len(args) != 1 {
		return usageError{errors.New("connect ADDRESS")}
	}
	c, err := net.Dial(network, args[0])
	if err != nil {
		var se *os.SyscallError
		if errors.As(err, &se) {
			return se.Err
		}
		return err
	}
	c.Close()
	return nil
}

func tryWriteWorkspace([]string) error {
	return os.WriteFile("/workspace/.probe-write", []byte("ok"), 0o644)
}
