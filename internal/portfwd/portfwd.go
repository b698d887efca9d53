package portfwd

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"runtime"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"layerfs.dev/layerfs/wire/errclass"
)

// Errors of Dial, each of a class of errclass.
var (
	// ErrRefused: nothing listens on the port in the namespace.
	ErrRefused = errclass.New(errclass.Unreachable, "nothing listens on the port")
	// ErrBadPort: a port number outside 1-65535.
	ErrBadPort = errclass.New(errclass.Invalid, "bad port number")
)

// CheckPort returns ErrBadPort, wrapped with the number, unless port is
// in 1-65535.
func CheckPort(port int) error {
	if port < 1 || port > 65535 {
		return fmt.Errorf("%w: %d: a TCP port is 1 to 65535", ErrBadPort, port)
	}
	return nil
}

// Dial connects to port on the loopback of the network namespace ns (an
// open /proc/PID/ns/net, or a pidfd of a process in the namespace): on
// 127.0.0.1, then, when that is refused, on ::1. The connection stays in
// that namespace. It fails with ErrRefused when both are refused, and
// with ctx's error when ctx ends first.
func Dial(ctx context.Context, ns *os.File, port int) (net.Conn, error) {
	if err := CheckPort(port); err != nil {
		return nil, err
	}
	c, err := dialIn(ctx, ns, unix.AF_INET, &unix.SockaddrInet4{Port: port, Addr: [4]byte{127, 0, 0, 1}})
	if !nobody(err) {
		return c, err
	}
	c, err6 := dialIn(ctx, ns, unix.AF_INET6, &unix.SockaddrInet6{Port: port, Addr: [16]byte{15: 1}})
	switch {
	case err6 == nil:
		return c, nil
	case nobody(err6) || errors.Is(err6, unix.EAFNOSUPPORT):
		return nil, fmt.Errorf("%w: port %d: %w", ErrRefused, port, err)
	default:
		return nil, err6
	}
}

// nobody reports whether a connect's error means that nothing listens:
// refused, or no loopback yet (a sandbox whose lo is not up yet runs
// nothing).
func nobody(err error) bool {
	return errors.Is(err, unix.ECONNREFUSED) || errors.Is(err, unix.EADDRNOTAVAIL) || errors.Is(err, unix.ENETUNREACH)
}

// dialIn makes a socket of family in ns and connects it to sa.
func dialIn(ctx context.Context, ns *os.File, family int, sa unix.Sockaddr) (net.Conn, error) {
	fd, err := socketIn(ns, family)
	if err != nil {
		return nil, err
	}
	f := os.NewFile(uintptr(fd), "port")
	defer f.Close()
	if err := connect(ctx, f, sa); err != nil {
		return nil, err
	}
	c, err := net.FileConn(f)
	if err != nil {
		return nil, fmt.Errorf("port connection: %w", err)
	}
	if tc, ok := c.(*net.TCPConn); ok {
		// As net.Dial's connections: what is written goes out at once.
		_ = tc.SetNoDelay(true)
	}
	return c, nil
}

// socketIn makes a non-blocking TCP socket of family in the network
// namespace ns, on a thread of its own that goes back to its namespace
// after (or, when it cannot, ends with its goroutine).
func socketIn(ns *os.File, family int) (int, error) {
	type result struct {
		fd  int
		err error
	}
	ch := make(chan result, 1)
	go func() {
		runtime.LockOSThread()
		fd, err, back := socketOnThread(ns, family)
		if back {
			runtime.UnlockOSThread()
		}
		ch <- result{fd, err}
	}()
	r := <-ch
	return r.fd, r.err
}

// socketOnThread is socketIn on its locked thread; back reports whether
// the thread is in its own namespace again.
func socketOnThread(ns *os.File, family int) (fd int, err error, back bool) {
	self, err := os.Open("/proc/thread-self/ns/net")
	if err != nil {
		return -1, fmt.Errorf("port: the daemon's own network namespace: %w", err), true
	}
	defer self.Close()
	if err := unix.Setns(int(ns.Fd()), unix.CLONE_NEWNET); err != nil {
		return -1, fmt.Errorf("%w: port: enter the sandbox's network namespace: %w", errclass.Unavailable, err), true
	}
	fd, serr := unix.Socket(family, unix.SOCK_STREAM|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, 0)
	if err := unix.Setns(int(self.Fd()), unix.CLONE_NEWNET); err != nil {
		if serr == nil {
			unix.Close(fd)
		}
		return -1, fmt.Errorf("port: return to the daemon's network namespace: %w", err), false
	}
	if serr != nil {
		return -1, fmt.Errorf("port: socket in the sandbox: %w", serr), true
	}
	return fd, nil, true
}

// connect connects f's socket to sa through the runtime's poller,
// giving up when ctx ends.
func connect(ctx context.Context, f *os.File, sa unix.Sockaddr) error {
	err := unix.Connect(int(f.Fd()), sa)
	if err == nil {
		return nil
	}
	if !errors.Is(err, unix.EINPROGRESS) {
		return err
	}
	rc, err := f.SyscallConn()
	if err != nil {
		return err
	}
	if d, ok := ctx.Deadline(); ok {
		_ = f.SetWriteDeadline(d)
	}
	stop := context.AfterFunc(ctx, func() { _ = f.SetWriteDeadline(time.Unix(1, 0)) })
	defer stop()
	var cerr error
	werr := rc.Write(func(fd uintptr) bool {
		n, err := unix.GetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_ERROR)
		switch {
		case err != nil:
			cerr = err
		case n == 0:
			// Writable with no error: connected, unless the poller woke
			// for nothing (then the peer's address is not there yet).
			if _, err := unix.Getpeername(int(fd)); err != nil {
				return false
			}
		default:
			cerr = unix.Errno(n)
		}
		return true
	})
	_ = f.SetWriteDeadline(time.Time{})
	if werr != nil {
		if ctx.Err() != nil {
			return fmt.Errorf("port: connect: %w", ctx.Err())
		}
		return werr
	}
	return cerr
}

// Splice copies a to b and b to a until both directions end: the end of
// one direction is passed on as a half-close (CloseWrite) where the other
// side has one, else as a close. It closes both connections and returns
// the bytes copied each way and the first error that was not an end of
// the connection.
func Splice(a, b net.Conn) (aToB, bToA int64, err error) {
	var wg sync.WaitGroup
	var errAB, errBA error
	wg.Add(2)
	go func() { defer wg.Done(); aToB, errAB = pipe(b, a) }()
	go func() { defer wg.Done(); bToA, errBA = pipe(a, b) }()
	wg.Wait()
	a.Close()
	b.Close()
	return aToB, bToA, errors.Join(quiet(errAB), quiet(errBA))
}

type closeWriter interface{ CloseWrite() error }

// copyBuffers hold what pipe copies where the kernel cannot splice.
var copyBuffers = sync.Pool{New: func() any { b := make([]byte, 256<<10); return &b }}

// pipe copies src to dst, then ends dst's writing side. Between two of
// the runtime's own connections (TCP, unix) io.Copy splices in the
// kernel; otherwise it copies through a large buffer.
func pipe(dst, src net.Conn) (int64, error) {
	buf := copyBuffers.Get().(*[]byte)
	n, err := io.CopyBuffer(dst, src, *buf)
	copyBuffers.Put(buf)
	if cw, ok := dst.(closeWriter); ok && err == nil {
		if cw.CloseWrite() == nil {
			return n, nil
		}
	}
	// An error, or no half-close: both ways end.
	dst.Close()
	src.Close()
	return n, err
}

// quiet drops the errors a connection ends with when its other side went
// away.
func quiet(err error) error {
	if err == nil || errors.Is(err, net.ErrClosed) || errors.Is(err, unix.EPIPE) || errors.Is(err, unix.ECONNRESET) {
		return nil
	}
	return err
}
