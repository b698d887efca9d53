package platformtest

import (
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"layerfs.dev/layerfs/internal/platforms"
	"layerfs.dev/layerfs/wire/errclass"
)

// testPorts checks PortDialer on a platform with Features.Ports: a server
// an exec runs answers through DialPort, a port nobody listens on is
// unreachable and named, a bad port invalid, and the server's port is
// unreachable again once its exec has ended.
func testPorts(t *testing.T, e *env) {
	if !e.p.Features().Ports {
		if _, ok := e.sb.(platforms.PortDialer); ok {
			t.Errorf("%s: a PortDialer without Features.Ports", e.p.Name())
		}
		t.Skipf("%s forwards no ports", e.p.Name())
	}
	pd, ok := e.sb.(platforms.PortDialer)
	if !ok {
		t.Fatalf("%s: Features.Ports but its sandbox is no PortDialer", e.p.Name())
	}
	if err := os.WriteFile(filepath.Join(e.ws, "ports-hello.txt"), []byte("hello through the port\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx := ctxFor(t, execTimeout)
	srvCtx, stop := context.WithCancel(ctx)
	defer stop()
	ended := make(chan error, 1)
	go func() {
		_, err := e.sb.Exec(srvCtx, platforms.ExecSpec{Argv: []string{"python3", "-m", "http.server", "8000", "--bind", "127.0.0.1"},
			Timeout: execTimeout}, io.Discard, io.Discard)
		ended <- err
	}()
	var body string
	deadline := time.Now().Add(execTimeout / 2)
	for {
		c, err := pd.DialPort(ctx, 8000)
		if err == nil {
			_ = c.SetDeadline(time.Now().Add(10 * time.Second))
			_, _ = io.WriteString(c, "GET /ports-hello.txt HTTP/1.0\r\n\r\n")
			b, _ := io.ReadAll(c)
			c.Close()
			body = string(b)
			break
		}
		if !errors.Is(err, errclass.Unreachable) || time.Now().After(deadline) {
			t.Fatalf("DialPort 8000 while a server starts: %v", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if !strings.HasPrefix(body, "HTTP/1.0 200") || !strings.HasSuffix(body, "hello through the port\n") {
		t.Errorf("GET through DialPort: %q", body)
	}
	_, err := pd.DialPort(ctx, 8001)
	if !errors.Is(err, errclass.Unreachable) || !strings.Contains(err.Error(), "8001") {
		t.Errorf("DialPort of a port nobody listens on: got %v, want unreachable naming 8001", err)
	}
	for _, port := range []int{0, 65536} {
		if _, err := pd.DialPort(ctx, port); !errors.Is(err, errclass.Invalid) {
			t.Errorf("DialPort %d: got %v, want invalid", port, err)
		}
	}
	stop()
	<-ended
	if c, err := pd.DialPort(ctx, 8000); !errors.Is(err, errclass.Unreachable) {
		if c != nil {
			c.Close()
		}
		t.Errorf("DialPort 8000 after its server's exec ended: got %v, want unreachable", err)
	}

	if e.p.Features().Network {
		sb, err := e.sh.Attach(ctx, platforms.Workspace{ID: workspaceID(), HostPath: e.newWorkspace(t), Network: true})
		if err != nil {
			t.Fatalf("Attach with network: %v", err)
		}
		defer sb.Close(ctx)
		if _, err := sb.(platforms.PortDialer).DialPort(ctx, 8000); !errors.Is(err, platforms.ErrHostNetwork) {
			t.Errorf("DialPort in a workspace with the host's network: got %v, want ErrHostNetwork", err)
		}
	}
}
