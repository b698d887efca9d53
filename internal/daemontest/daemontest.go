package daemontest

import (
	"bytes"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"layerfs.dev/layerfs/internal/testenv"
)

var (
	buildOnce sync.Once
	binDir    string
	buildErr  error
)

// Binaries builds layerfs and layerfsd side by side (as `make build`
// places them, so that layerfs finds layerfsd to auto-start it) and returns
// their directory. The build happens once per test binary; RemoveBinaries
// (from TestMain, after m.Run) deletes it.
func Binaries(t testing.TB) string {
	t.Helper()
	buildOnce.Do(func() {
		binDir, buildErr = os.MkdirTemp("", "layerfs-daemontest-")
		if buildErr != nil {
			return
		}
		for _, cmd := range []string{"layerfs", "layerfsd"} {
			out, err := exec.Command("go", "build", "-o", filepath.Join(binDir, cmd), "layerfs.dev/layerfs/cmd/"+cmd).CombinedOutput()
			if err != nil {
				buildErr = fmt.Errorf("go build %s: %w\n%s", cmd, err, out)
				return
			}
		}
	})
	require.NoError(t, buildErr)
	return binDir
}

// Main runs the tests of a package that uses Binaries and removes them
// after: call it from TestMain.
func Main(m *testing.M) {
	code := m.Run()
	RemoveBinaries()
	os.Exit(code)
}

// RemoveBinaries deletes what Binaries built, if anything.
func RemoveBinaries() {
	if binDir != "" {
		os.RemoveAll(binDir)
	}
}

// Daemon is one running layerfsd.
type Daemon struct {
	Store  string // the Store's directory
	Socket string // its unix socket
	Bin    string // the directory holding layerfs and layerfsd
	cmd    *exec.Cmd
	log    *syncBuffer
	done   chan error
}

// Addr is the socket as a client address (unix:///...).
func (d *Daemon) Addr() string { return "unix://" + d.Socket }

// Start starts layerfsd serve on a fresh Store and waits until it answers.
func Start(t testing.TB, extra ...string) *Daemon {
	t.Helper()
	testenv.RequireFUSE(t)
	bin := Binaries(t)
	store := filepath.Join(t.TempDir(), "store")
	d := &Daemon{Store: store, Socket: filepath.Join(store, "layerfsd.sock"), Bin: bin, log: &syncBuffer{}, done: make(chan error, 1)}
	d.cmd = exec.Command(filepath.Join(bin, "layerfsd"), append([]string{"serve", "--store", store}, extra...)...)
	d.cmd.Stdout, d.cmd.Stderr = d.log, d.log
	require.NoError(t, d.cmd.Start())
	go func() { d.done <- d.cmd.Wait() }()
	t.Cleanup(func() { d.stop(t) })
	deadline := time.Now().Add(60 * time.Second)
	for {
		if c, err := net.Dial("unix", d.Socket); err == nil {
			c.Close()
			return d
		}
		select {
		case err := <-d.done:
			d.done <- err
			t.Fatalf("layerfsd exited at start: %v\n%s", err, d.log)
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("layerfsd did not answer within 60s\n%s", d.log)
		}
	}
}

func (d *Daemon) stop(t testing.TB) {
	d.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-d.done:
	case <-time.After(60 * time.Second):
		d.cmd.Process.Kill()
		<-d.done
	}
	if t.Failed() {
		t.Logf("layerfsd log:\n%s", d.log)
	}
}

// syncBuffer is a bytes.Buffer the daemon's two output streams share.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
