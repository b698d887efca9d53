package main

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
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
	"connect-data":    tryConnectData,
	"dns":             tryDNS,
	"raw-syn":         tryRawSYN,
	"stream":          tryStream,
	"tls":             tryTLS,
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

// tryConnectData connects to a TCP address and reads an HTTP answer: a
// connection a proxy took and then reset is refused too.
func tryConnectData(args []string) error {
	if len(args) != 1 {
		return usageError{errors.New("connect-data ADDRESS")}
	}
	c, err := net.DialTimeout("tcp", args[0], 3*time.Second)
	if err != nil {
		return sysErr(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(3 * time.Second))
	if _, err := io.WriteString(c, "GET / HTTP/1.0\r\n\r\n"); err != nil {
		return sysErr(err)
	}
	b := make([]byte, 64)
	n, err := c.Read(b)
	if n > 0 {
		return nil
	}
	if err == io.EOF {
		return errors.New("closed without an answer")
	}
	return sysErr(err)
}

func sysErr(err error) error {
	var se *os.SyscallError
	if errors.As(err, &se) {
		return se.Err
	}
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return errors.New("timed out")
	}
	return err
}

// tryStream fetches http://ADDRESS/PATH to its end: a download that ends
// cleanly is allowed, one cut (a reset) refused.
func tryStream(args []string) error {
	if len(args) != 2 {
		return usageError{errors.New("stream ADDRESS PATH")}
	}
	c, err := net.DialTimeout("tcp", args[0], 3*time.Second)
	if err != nil {
		return sysErr(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(30 * time.Second))
	if _, err := fmt.Fprintf(c, "GET %s HTTP/1.0\r\n\r\n", args[1]); err != nil {
		return sysErr(err)
	}
	if _, err := io.Copy(io.Discard, c); err != nil {
		return sysErr(err)
	}
	return nil
}

// tryTLS fetches https://NAME/ from ADDRESS, trusting only the
// certificates of the PEM file CA: an answer is allowed.
func tryTLS(args []string) error {
	if len(args) != 3 {
		return usageError{errors.New("tls ADDRESS NAME CAFILE")}
	}
	b, err := os.ReadFile(args[2])
	if err != nil {
		return usageError{err}
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(b) {
		return usageError{errors.New("no certificate in " + args[2])}
	}
	d := &net.Dialer{Timeout: 3 * time.Second}
	c, err := tls.DialWithDialer(d, "tcp", args[0], &tls.Config{RootCAs: pool, ServerName: args[1]})
	if err != nil {
		return sysErr(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(3 * time.Second))
	if _, err := fmt.Fprintf(c, "GET / HTTP/1.0\r\nHost: %s\r\n\r\n", args[1]); err != nil {
		return sysErr(err)
	}
	n, err := c.Read(make([]byte, 64))
	if n > 0 {
		return nil
	}
	return sysErr(err)
}

// tryDNS asks SERVER (host:port) for NAME's A record over UDP: an answer
// with an address is allowed.
func tryDNS(args []string) error {
	if len(args) != 2 {
		return usageError{errors.New("dns NAME SERVER")}
	}
	c, err := net.Dial("udp", args[1])
	if err != nil {
		return sysErr(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(3 * time.Second))
	q := []byte{0x12, 0x34, 1, 0, 0, 1, 0, 0, 0, 0, 0, 0}
	for _, l := range strings.Split(strings.TrimSuffix(args[0], "."), ".") {
		q = append(q, byte(len(l)))
		q = append(q, l...)
	}
	q = append(q, 0, 0, 1, 0, 1)
	if _, err := c.Write(q); err != nil {
		return sysErr(err)
	}
	b := make([]byte, 512)
	n, err := c.Read(b)
	if err != nil {
		return sysErr(err)
	}
	if n < 12 {
		return errors.New("short answer")
	}
	if rcode := b[3] & 0xf; rcode != 0 {
		return fmt.Errorf("rcode %d", rcode)
	}
	if answers := int(b[6])<<8 | int(b[7]); answers == 0 {
		return errors.New("no address")
	}
	return nil
}

// tryRawSYN sends a hand-made TCP SYN to ADDRESS:PORT from a raw socket
// and waits a second for a SYN-ACK from it: a reset, or nothing, is
// refused.
func tryRawSYN(args []string) error {
	if len(args) != 2 {
		return usageError{errors.New("raw-syn ADDRESS PORT")}
	}
	dst := net.ParseIP(args[0]).To4()
	port, _ := strconv.Atoi(args[1])
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_RAW, unix.IPPROTO_TCP)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	// The kernel picks the source address; the checksum needs it.
	u, err := net.Dial("udp4", net.JoinHostPort(args[0], args[1]))
	if err != nil {
		return sysErr(err)
	}
	src := u.LocalAddr().(*net.UDPAddr).IP.To4()
	u.Close()
	seg := make([]byte, 20)
	seg[0], seg[1] = 0xa1, 0x7e // source port 41342
	seg[2], seg[3] = byte(port>>8), byte(port)
	seg[4], seg[7] = 0x01, 0x01
	seg[12] = 5 << 4
	seg[13] = 0x02 // SYN
	seg[14], seg[15] = 0xff, 0xff
	sum := uint32(0)
	pseudo := append(append(append([]byte{}, src...), dst...), 0, unix.IPPROTO_TCP, 0, 20)
	for _, b := range [][]byte{pseudo, seg} {
		for i := 0; i+1 < len(b); i += 2 {
			sum += uint32(b[i])<<8 | uint32(b[i+1])
		}
	}
	for sum>>16 != 0 {
		sum = sum&0xffff + sum>>16
	}
	cs := ^uint16(sum)
	seg[16], seg[17] = byte(cs>>8), byte(cs)
	if err := unix.Sendto(fd, seg, 0, &unix.SockaddrInet4{Addr: [4]byte(dst)}); err != nil {
		return err
	}
	tv := unix.Timeval{Sec: 1}
	_ = unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv)
	buf := make([]byte, 1500)
	for end := time.Now().Add(time.Second); time.Now().Before(end); {
		n, _, err := unix.Recvfrom(fd, buf, 0)
		if err != nil {
			return errors.New("no answer")
		}
		ihl := int(buf[0]&0xf) * 4
		if n < ihl+14 || !net.IP(buf[12:16]).Equal(dst) {
			continue
		}
		flags := buf[ihl+13]
		if flags&0x12 == 0x12 {
			return nil // SYN-ACK: the packet got through
		}
		if flags&0x04 != 0 {
			return errors.New("reset")
		}
	}
	return errors.New("no answer")
}
