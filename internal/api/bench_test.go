package api_test

import (
	"context"
	"net"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"

	"layerfs.dev/layerfs/client"
	"layerfs.dev/layerfs/internal/api"
	"layerfs.dev/layerfs/internal/api/apitest"
	"layerfs.dev/layerfs/wire"
)

// The API's own cost per call over the unix socket, with an engine that
// does (almost) nothing: what the daemon adds to every exec and request.

func benchClient(b *testing.B) (*client.Client, *client.Workspace) {
	sock := filepath.Join(b.TempDir(), "api.sock")
	l, err := net.Listen("unix", sock)
	if err != nil {
		b.Fatal(err)
	}
	hs := httptest.NewUnstartedServer(api.NewServer(apitest.New(), api.Options{}).Handler(api.ListenerOptions{}))
	hs.Listener.Close()
	hs.Listener = l
	hs.Start()
	b.Cleanup(hs.Close)
	ctx := context.Background()
	c, err := client.Dial(ctx, "unix://"+sock)
	if err != nil {
		b.Fatal(err)
	}
	c.CreateProject(ctx, wire.CreateProject{Name: "p"})
	ws, err := c.CreateWorkspace(ctx, client.WorkspaceSpec{Project: "p", Branch: "main"})
	if err != nil {
		b.Fatal(err)
	}
	return c, ws
}

func BenchmarkVersion(b *testing.B) {
	c, _ := benchClient(b)
	ctx := context.Background()
	for b.Loop() {
		if _, err := c.Daemon(ctx); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkExecWhole(b *testing.B) {
	_, ws := benchClient(b)
	ctx := context.Background()
	for b.Loop() {
		if res, err := ws.ExecArgv(ctx, []string{"echo", "hi"}, client.ExecOptions{}); err != nil || res.ExitCode != 0 {
			b.Fatal(res, err)
		}
	}
}

func BenchmarkExecStreamed(b *testing.B) {
	_, ws := benchClient(b)
	ctx := context.Background()
	var out strings.Builder
	for b.Loop() {
		if res, err := ws.ExecArgv(ctx, []string{"echo", "hi"}, client.ExecOptions{Stdout: &out}); err != nil || res.ExitCode != 0 {
			b.Fatal(res, err)
		}
	}
}
