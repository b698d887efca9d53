package portfwd_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"layerfs.dev/layerfs/internal/portfwd"
	"layerfs.dev/layerfs/internal/testenv"
	"layerfs.dev/layerfs/wire/errclass"
)

// listenEnv, in a re-executed test binary, is "ADDR" to listen on (in the
// network namespace it was started in) and echo each connection's bytes
// after a greeting line.
const listenEnv = "PORTFWD_TEST_LISTEN"

func TestMain(m *testing.M) {
	if addr := os.Getenv(listenEnv); addr != "" {
		os.Exit(echoServer(addr))
	}
	os.Exit(m.Run())
}

// echoServer brings lo up, listens on addr, says "ready" on stdout and
// echoes every connection.
func echoServer(addr string) int {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM, 0)
	if err == nil {
		ifr, _ := unix.NewIfreq("lo")
		ifr.SetUint16(unix.IFF_UP | unix.IFF_LOOPBACK | unix.IFF_RUNNING)
		err = unix.IoctlIfreq(fd, unix.SIOCSIFFLAGS, ifr)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "lo up:", err)
		return 1
	}
	l, err := net.Listen("tcp", addr)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	fmt.Println("ready")
	for {
		c, err := l.Accept()
		if err != nil {
			return 1
		}
		go func() {
			defer c.Close()
			fmt.Fprintf(c, "hello from %s\n", c.LocalAddr())
			io.Copy(c, c)
		}()
	}
}

// sandboxNet starts the echo server on addr in a new network namespace
// and returns that namespace, open.
func sandboxNet(t *testing.T, addr string) *os.File {
	t.Helper()
	testenv.RequireRoot(t)
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), listenEnv+"="+addr)
	cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: unix.CLONE_NEWNET}
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	line, err := bufio.NewReader(out).ReadString('\n')
	require.NoError(t, err)
	require.Equal(t, "ready\n", line)
	ns, err := os.Open("/proc/" + strconv.Itoa(cmd.Process.Pid) + "/ns/net")
	require.NoError(t, err)
	t.Cleanup(func() { ns.Close() })
	return ns
}

// freePort is a port nothing on the host listens on.
func freePort(t *testing.T) int {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	return port
}

func greet(t *testing.T, c net.Conn) string {
	t.Helper()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	line, err := bufio.NewReader(c).ReadString('\n')
	require.NoError(t, err)
	return line
}

func TestDialEntersTheNamespace(t *testing.T) {
	port := freePort(t)
	ns := sandboxNet(t, "127.0.0.1:"+strconv.Itoa(port))
	ctx := context.Background()

	c, err := portfwd.Dial(ctx, ns, port)
	require.NoError(t, err)
	defer c.Close()
	assert.Equal(t, fmt.Sprintf("hello from 127.0.0.1:%d\n", port), greet(t, c))

	// The host's loopback does not reach the sandbox's: the port is not
	// the host's.
	_, err = net.DialTimeout("tcp", "127.0.0.1:"+strconv.Itoa(port), time.Second)
	assert.ErrorIs(t, err, unix.ECONNREFUSED, "the sandbox's port is not on the host")
}

func TestDialTriesIPv6Loopback(t *testing.T) {
	port := freePort(t)
	ns := sandboxNet(t, "[::1]:"+strconv.Itoa(port))
	c, err := portfwd.Dial(context.Background(), ns, port)
	require.NoError(t, err)
	defer c.Close()
	assert.Equal(t, fmt.Sprintf("hello from [::1]:%d\n", port), greet(t, c))
}

func TestDialRefusedAndBadPort(t *testing.T) {
	port := freePort(t)
	ns := sandboxNet(t, "127.0.0.1:"+strconv.Itoa(port))
	other := port + 1
	if other > 65535 {
		other = port - 1
	}
	_, err := portfwd.Dial(context.Background(), ns, other)
	require.Error(t, err)
	assert.ErrorIs(t, err, portfwd.ErrRefused)
	assert.ErrorIs(t, err, errclass.Unreachable)
	assert.Contains(t, err.Error(), "port "+strconv.Itoa(other))

	for _, p := range []int{0, -1, 65536} {
		_, err := portfwd.Dial(context.Background(), ns, p)
		assert.ErrorIs(t, err, errclass.Invalid, "port %d", p)
	}
}

// Dials from many goroutines leave every thread in the daemon's own
// namespace: the host's loopback still answers afterwards.
func TestDialLeavesThreadsAtHome(t *testing.T) {
	port := freePort(t)
	ns := sandboxNet(t, "127.0.0.1:"+strconv.Itoa(port))
	var wg sync.WaitGroup
	for range 32 {
		wg.Go(func() {
			c, err := portfwd.Dial(context.Background(), ns, port)
			if assert.NoError(t, err) {
				c.Close()
			}
		})
	}
	wg.Wait()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer l.Close()
	for range 32 {
		wg.Go(func() {
			c, err := net.Dial("tcp", l.Addr().String())
			if assert.NoError(t, err, "a thread was left in the sandbox's namespace") {
				c.Close()
			}
		})
	}
	wg.Wait()
}

// Splice passes a half-close on: the client ends its writing side and
// still reads all of the answer.
func TestSpliceHalfClose(t *testing.T) {
	port := freePort(t)
	ns := sandboxNet(t, "127.0.0.1:"+strconv.Itoa(port))
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer l.Close()
	done := make(chan error, 1)
	go func() {
		in, err := l.Accept()
		if err != nil {
			done <- err
			return
		}
		up, err := portfwd.Dial(context.Background(), ns, port)
		if err != nil {
			in.Close()
			done <- err
			return
		}
		_, _, err = portfwd.Splice(in, up)
		done <- err
	}()
	c, err := net.Dial("tcp", l.Addr().String())
	require.NoError(t, err)
	defer c.Close()
	payload := strings.Repeat("x", 1<<20)
	go func() {
		io.WriteString(c, payload)
		c.(*net.TCPConn).CloseWrite()
	}()
	c.SetDeadline(time.Now().Add(20 * time.Second))
	got, err := io.ReadAll(c)
	require.NoError(t, err)
	want := fmt.Sprintf("hello from 127.0.0.1:%d\n", port) + payload
	assert.Equal(t, len(want), len(got))
	assert.True(t, string(got) == want)
	select {
	case err := <-done:
		assert.NoError(t, err)
	case <-time.After(10 * time.Second):
		t.Fatal("Splice did not return after both directions ended")
	}
}

func TestDialCanceled(t *testing.T) {
	port := freePort(t)
	ns := sandboxNet(t, "127.0.0.1:"+strconv.Itoa(port))
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	c, err := portfwd.Dial(ctx, ns, port)
	if err == nil { // a loopback connect may complete at once
		c.Close()
		return
	}
	assert.True(t, errors.Is(err, context.Canceled), "%v", err)
}
