package criu_test

import (
	"bufio"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"layerfs.dev/layerfs/internal/criu"
	"layerfs.dev/layerfs/internal/testenv"
	"layerfs.dev/layerfs/wire/errclass"
)

// The test binary doubles as the processes it checkpoints (helperEnv).
const helperEnv = "LAYERFS_CRIU_TEST_HELPER"

func TestMain(m *testing.M) {
	switch os.Getenv(helperEnv) {
	case "server":
		counterServer()
	case "hold":
		for { // holds the descriptors it was given
			time.Sleep(time.Hour)
		}
	}
	os.Exit(m.Run())
}

// counterServer is PID 1 of its own PID and network namespaces: lo up, a
// TCP server on 127.0.0.1:7000 that answers each connection with a count
// of the connections it served and a hash of a 16 MiB heap, state a
// restore must give back exactly.
func counterServer() {
	s, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM, 0)
	if err == nil {
		var ifr *unix.Ifreq
		if ifr, err = unix.NewIfreq("lo"); err == nil {
			ifr.SetUint16(unix.IFF_UP | unix.IFF_LOOPBACK | unix.IFF_RUNNING)
			err = unix.IoctlIfreq(s, unix.SIOCSIFFLAGS, ifr)
		}
	}
	if err != nil {
		os.Exit(2)
	}
	heap := make([]byte, 16<<20)
	r := rand.NewChaCha8([32]byte{7})
	_, _ = r.Read(heap)
	sum := sha256.Sum256(heap)
	var lc net.ListenConfig
	lc.SetMultipathTCP(false) // criu cannot dump MPTCP sockets (Scan says so)
	l, err := lc.Listen(context.Background(), "tcp", "127.0.0.1:7000")
	if err != nil {
		os.Exit(3)
	}
	for n := 1; ; n++ {
		c, err := l.Accept()
		if err != nil {
			continue
		}
		fmt.Fprintf(c, "%d %x\n", n, sha256.Sum256(heap))
		c.Close()
		_ = sum
	}
}

func requireCRIU(t *testing.T) {
	t.Helper()
	testenv.RequireRoot(t)
	if _, err := criu.Binary(); err != nil {
		testenv.Skip(t, err.Error())
	}
}

// startHelper starts the test binary as mode in new PID and network
// namespaces (PID 1 there), with extra descriptors 3 and on.
func startHelper(t *testing.T, mode string, extra ...*os.File) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), helperEnv+"="+mode)
	cmd.ExtraFiles = extra
	cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: unix.CLONE_NEWPID | unix.CLONE_NEWNET, Setsid: true, Pdeathsig: syscall.SIGKILL}
	require.NoError(t, cmd.Start())
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	return cmd
}

// ask connects to port 7000 in the network namespace of pid and returns
// the answer's line, retrying until the server listens.
func ask(t *testing.T, pid int) string {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		line, err := askOnce(pid)
		if err == nil {
			return line
		}
		if time.Now().After(deadline) {
			t.Fatalf("no answer from the server in %d's namespace: %v", pid, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func askOnce(pid int) (string, error) {
	type res struct {
		line string
		err  error
	}
	ch := make(chan res, 1)
	go func() {
		// Back to its own namespace before it is unlocked: a thread that
		// ends would take with it the helpers it forked (their
		// parent-death signal).
		runtime.LockOSThread()
		own, err := os.Open("/proc/thread-self/ns/net")
		if err != nil {
			ch <- res{err: err}
			return
		}
		defer own.Close()
		ns, err := os.Open("/proc/" + strconv.Itoa(pid) + "/ns/net")
		if err != nil {
			ch <- res{err: err}
			return
		}
		defer ns.Close()
		if err := unix.Setns(int(ns.Fd()), unix.CLONE_NEWNET); err != nil {
			ch <- res{err: err}
			return
		}
		defer func() {
			if unix.Setns(int(own.Fd()), unix.CLONE_NEWNET) == nil {
				runtime.UnlockOSThread()
			}
		}()
		c, err := net.DialTimeout("tcp", "127.0.0.1:7000", 2*time.Second)
		if err != nil {
			ch <- res{err: err}
			return
		}
		defer c.Close()
		_ = c.SetDeadline(time.Now().Add(5 * time.Second))
		line, err := bufio.NewReader(c).ReadString('\n')
		ch <- res{strings.TrimSpace(line), err}
	}()
	r := <-ch
	return r.line, r.err
}

func procState(pid int) string {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return ""
	}
	s := string(b)
	return strings.Fields(s[strings.LastIndexByte(s, ')')+1:])[0]
}

// A TCP server with state in memory is dumped left running, with a hook
// that sees it frozen, and restored twice into network namespaces of
// their own: each copy answers with the state the dump saw, and goes on
// from it on its own, as the source does.
func TestDumpRestore(t *testing.T) {
	requireCRIU(t)
	ctx := t.Context()
	src := startHelper(t, "server")
	pid := src.Process.Pid
	first := ask(t, pid) // connection 1
	count, hash, _ := strings.Cut(first, " ")
	require.Equal(t, "1", count)

	dir, work := t.TempDir(), t.TempDir()
	var frozenState string
	d := &criu.Dump{Pid: pid, Dir: dir, WorkDir: work, LeaveRunning: true,
		Frozen: func(context.Context) error { frozenState = procState(pid); return nil }}
	st, err := d.Run(ctx)
	require.NoError(t, err)
	require.Equal(t, "t", frozenState, "the hook runs while the tree is stopped by its tracer")
	require.Positive(t, st.Pages)
	require.Greater(t, st.Bytes, int64(16<<20), "the heap is in the images")
	t.Logf("dump: frozen %v, total %v, %d pages, %d bytes", st.Frozen, st.Total, st.Pages, st.Bytes)

	require.Equal(t, "2 "+hash, ask(t, pid), "the source runs on")
	for i := range 2 {
		r := &criu.Restore{Dir: dir, WorkDir: t.TempDir()}
		rpid, err := r.Run(ctx)
		require.NoError(t, err)
		p, _ := os.FindProcess(rpid)
		t.Cleanup(func() { _ = p.Kill(); _, _ = p.Wait() })
		require.NotEqual(t, pid, rpid)
		t.Logf("restore %d: %v by criu's account", i, r.Took())
		require.Equal(t, "2 "+hash, ask(t, rpid), "copy %d answers from the state the dump saw", i)
		require.Equal(t, "3 "+hash, ask(t, rpid), "copy %d goes on on its own", i)
	}
	require.Equal(t, "3 "+hash, ask(t, pid))
}

// A tree whose process holds a FUSE device or a socket of the host's
// network namespace is refused by Scan, naming the process, the
// descriptor and the resource; an allowed descriptor is not named. Dumped
// anyway, criu refuses it with the reason from its log, and the tree runs
// on.
func TestScanRefuses(t *testing.T) {
	requireCRIU(t)
	if why := testenv.MissingFUSE(); why != "" {
		testenv.Skip(t, why)
	}
	fuse, err := os.OpenFile("/dev/fuse", os.O_RDWR, 0)
	require.NoError(t, err)
	defer fuse.Close()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer l.Close()
	sock, err := l.(*net.TCPListener).File()
	require.NoError(t, err)
	defer sock.Close()
	null, err := os.Open(os.DevNull)
	require.NoError(t, err)
	defer null.Close()

	h := startHelper(t, "hold", fuse, sock, null)
	pid := h.Process.Pid
	time.Sleep(100 * time.Millisecond) // past exec: its descriptors are the helper's own
	ps, err := criu.Scan(pid, nil)
	require.NoError(t, err)
	require.Len(t, ps, 2, "%v", ps)
	require.Equal(t, 1, ps[0].Pid, "named by its pid inside its namespace")
	require.Equal(t, 3, ps[0].FD)
	require.Contains(t, ps[0].Resource, "FUSE device")
	require.Equal(t, 4, ps[1].FD)
	require.Contains(t, ps[1].Resource, "another network namespace")
	msg := criu.ProblemsError(ps).Error()
	require.Contains(t, msg, "process 1 ("+ps[0].Comm+") fd 3: /dev/fuse: a FUSE device")
	require.True(t, errors.Is(criu.ProblemsError(ps), errclass.Invalid))

	ps, err = criu.Scan(pid, func(hostPid, fd int) bool { return hostPid == pid && fd == 4 })
	require.NoError(t, err)
	require.Len(t, ps, 1)

	_, err = (&criu.Dump{Pid: pid, Dir: t.TempDir(), WorkDir: t.TempDir(), LeaveRunning: true}).Run(t.Context())
	require.ErrorIs(t, err, criu.ErrUnsupported)
	var f *criu.Failure
	require.ErrorAs(t, err, &f)
	require.NotEmpty(t, f.Errors)
	t.Logf("criu refuses: %v", err)
	require.NotContains(t, []string{"t", "T", "Z", ""}, procState(pid), "the tree runs on, untouched")
}

// RelinkMemfdExe is exercised for real by the sandbox's checkpoint tests
// (a sandbox's init runs from a memfd); here, what it writes is what criu
// reads: a dump whose process runs from a memfd keeps its images intact
// through the edit.
func TestRelinkMemfdExeNoMemfd(t *testing.T) {
	requireCRIU(t)
	src := startHelper(t, "server")
	ask(t, src.Process.Pid)
	dir := t.TempDir()
	_, err := (&criu.Dump{Pid: src.Process.Pid, Dir: dir, WorkDir: t.TempDir(), LeaveRunning: true}).Run(t.Context())
	require.NoError(t, err)
	before, err := os.ReadFile(filepath.Join(dir, "files.img"))
	require.NoError(t, err)
	_, err = criu.RelinkMemfdExe(dir, "/x", 1, 0o100755)
	require.ErrorIs(t, err, errclass.Corrupt, "no mount namespace was dumped: no root to put the executable on")
	after, err := os.ReadFile(filepath.Join(dir, "files.img"))
	require.NoError(t, err)
	require.Equal(t, before, after, "nothing is changed when the edit cannot be made")
}
