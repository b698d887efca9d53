package api_test

import (
	"net"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

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
	require.NoError(b, err)
	hs := httptest.NewUnstartedServer(api.NewServer(apitest.New(), api.Options{}).Handler(api.ListenerOptions{}))
	hs.Listener.Close()
	hs.Listener = l
	hs.Start()
	b.Cleanup(hs.Close)
	ctx := b.Context()
	c, err := client.Dial(ctx, "unix://"+sock)
	require.NoError(b, err)
	c.CreateProject(ctx, wire.CreateProject{Name: "p"})
	ws, err := c.CreateWorkspace(ctx, client.WorkspaceSpec{Project: "p", Branch: "main"})
	require.NoError(b, err)
	return c, ws
}

func BenchmarkVersion(b *testing.B) {
	c, _ := benchClient(b)
	ctx := b.Context()
	for b.Loop() {
		_, err := c.Daemon(ctx)
		require.NoError(b, err)
	}
}

func BenchmarkExecWhole(b *testing.B) {
	_, ws := benchClient(b)
	ctx := b.Context()
	for b.Loop() {
		if res, err := ws.ExecArgv(ctx, []string{"echo", "hi"}, client.ExecOptions{}); err != nil || res.ExitCode != 0 {
			b.Fatal(res, err)
		}
	}
}

func BenchmarkExecStreamed(b *testing.B) {
	_, ws := benchClient(b)
	ctx := b.Context()
	var out strings.Builder
	for b.Loop() {
		if res, err := ws.ExecArgv(ctx, []string{"echo", "hi"}, client.ExecOptions{Stdout: &out}); err != nil || res.ExitCode != 0 {
			b.Fatal(res, err)
		}
	}
}
