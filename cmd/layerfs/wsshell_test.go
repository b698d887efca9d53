package main

import (
	"bytes"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"layerfs.dev/layerfs/wire"
)

// openPty opens a pty pair on this host for the test's "user terminal".
func openPty(t *testing.T, rows, cols uint16) (master, slave *os.File) {
	t.Helper()
	m, err := unix.Open("/dev/ptmx", unix.O_RDWR|unix.O_NOCTTY|unix.O_CLOEXEC, 0)
	require.NoError(t, err)
	require.NoError(t, unix.IoctlSetPointerInt(m, unix.TIOCSPTLCK, 0))
	require.NoError(t, unix.IoctlSetWinsize(m, unix.TIOCSWINSZ, &unix.Winsize{Row: rows, Col: cols}))
	s, _, errno := unix.Syscall(unix.SYS_IOCTL, uintptr(m), unix.TIOCGPTPEER, unix.O_RDWR|unix.O_NOCTTY|unix.O_CLOEXEC)
	if errno != 0 {
		t.Fatal(errno)
	}
	master, slave = os.NewFile(uintptr(m), "ptmx"), os.NewFile(s, "pts")
	t.Cleanup(func() { master.Close(); slave.Close() })
	return master, slave
}

// TestWsShell runs `layerfs ws shell` on a real terminal of this host, as
// a user would: the sandbox's shell gets this window's size and its
// changes, Ctrl-C interrupts its foreground command, and its exit code
// becomes layerfs's.
func TestWsShell(t *testing.T) {
	c := newCLI(t)
	c.ok("project", "create", "shell")
	var ws wire.Workspace
	c.json(&ws, "ws", "create", "shell", "main")

	master, slave := openPty(t, 33, 101)
	cmd := exec.Command(filepath.Join(binaries(t), "layerfs"), "--store", c.store, "ws", "shell", ws.ID, "--", "bash", "--norc", "--noprofile", "-i")
	cmd.Stdin, cmd.Stdout, cmd.Stderr = slave, slave, slave
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Setctty: true, Ctty: 0}
	require.NoError(t, cmd.Start())
	slave.Close()
	var mu sync.Mutex
	var screen bytes.Buffer
	go func() {
		b := make([]byte, 4096)
		for {
			n, err := master.Read(b)
			mu.Lock()
			screen.Write(b[:n])
			mu.Unlock()
			if err != nil {
				return
			}
		}
	}()
	waitFor := func(text string) {
		t.Helper()
		for deadline := time.Now().Add(time.Minute); ; time.Sleep(20 * time.Millisecond) {
			mu.Lock()
			s := screen.String()
			mu.Unlock()
			if strings.Contains(s, text) {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("the terminal never showed %q; it shows %q", text, s)
			}
		}
	}
	type_ := func(s string) {
		_, err := master.Write([]byte(s))
		require.NoError(t, err)
	}
	type_("stty size; echo a-$((6*7))\r")
	waitFor("33 101")
	require.NoError(t, unix.IoctlSetWinsize(int(master.Fd()), unix.TIOCSWINSZ, &unix.Winsize{Row: 44, Col: 132}))
	time.Sleep(300 * time.Millisecond)
	type_("stty size\r")
	waitFor("44 132")
	type_("sleep 60; echo slept-$((6*7))\r")
	time.Sleep(500 * time.Millisecond)
	type_("\x03")
	type_("echo back-$((6*7))\r")
	waitFor("back-42")
	type_("exit 9\r")
	err := cmd.Wait()
	var ee *exec.ExitError
	require.ErrorAs(t, err, &ee, "layerfs ws shell")
	if ee.ExitCode() != 9 {
		t.Errorf("exit code %d, want the shell's 9", ee.ExitCode())
	}
	mu.Lock()
	if strings.Contains(screen.String(), "slept-42") {
		t.Errorf("Ctrl-C did not interrupt the sleep: %q", screen.String())
	}
	mu.Unlock()
	c.ok("ws", "end", ws.ID, "--discard")
}

// TestWsExecStreamsStdin: `ws exec -i` feeds the command its input as it
// comes, so the command answers a line before the next is written.
func TestWsExecStreamsStdin(t *testing.T) {
	c := newCLI(t)
	c.ok("project", "create", "stream")
	var ws wire.Workspace
	c.json(&ws, "ws", "create", "stream", "main")

	cmd := exec.Command(filepath.Join(binaries(t), "layerfs"), "--store", c.store, "ws", "exec", "-i", ws.ID, "-c",
		"read a; echo got-$a; read b; echo got-$b; exit 6")
	in, err := cmd.StdinPipe()
	require.NoError(t, err)
	out, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	// Without streaming the first answer never comes: fail, not hang.
	defer time.AfterFunc(time.Minute, func() { _ = cmd.Process.Kill() }).Stop()
	_, err = in.Write([]byte("one\n"))
	require.NoError(t, err)
	first := make([]byte, len("got-one\n"))
	_, err = io.ReadFull(out, first)
	require.NoError(t, err, "the answer to the first line, before the second is written")
	_, err = in.Write([]byte("two\n"))
	require.NoError(t, err)
	require.NoError(t, in.Close())
	rest, err := io.ReadAll(out)
	require.NoError(t, err)
	err = cmd.Wait()
	var ee *exec.ExitError
	require.ErrorAs(t, err, &ee)
	if got := string(first) + string(rest); got != "got-one\ngot-two\n" || ee.ExitCode() != 6 {
		t.Errorf("got %q, exit %d; want both lines answered and exit 6", got, ee.ExitCode())
	}
	c.ok("ws", "end", ws.ID, "--discard")
}
