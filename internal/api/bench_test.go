package api_test

import (
	"io"
	"net"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"layerfs.dev/layerfs/client"
	"layerfs.dev/layerfs/internal/api"
	"layerfs.dev/layerfs/internal/enginetest"
	"layerfs.dev/layerfs/wire"
)

// The API's own cost per call over the unix socket, on the real engine:
// BenchmarkExec runs the same command on the engine directly and through
// the API, so that what the daemon adds to every exec is the difference
// between its arms.

func benchClient(b *testing.B) (*enginetest.Engine, *client.Client, *client.Workspace) {
	eng := enginetest.Shared(b)
	sock := filepath.Join(b.TempDir(), "api.sock")
	l, err := net.Listen("unix", sock)
	require.NoError(b, err)
	hs := httptest.NewUnstartedServer(api.NewServer(eng, api.Options{}).Handler(api.ListenerOptions{}))
	hs.Listener.Close()
	hs.Listener = l
	hs.Start()
	b.Cleanup(hs.Close)
	ctx := b.Context()
	c, err := client.Dial(ctx, "unix://"+sock)
	require.NoError(b, err)
	c.CreateProject(ctx, wire.CreateProject{Name: "bench"}) // made by the first benchmark
	ws, err := c.CreateWorkspace(ctx, client.WorkspaceSpec{Project: "bench", Branch: "main"})
	require.NoError(b, err)
	b.Cleanup(func() { ws.End(b.Context(), client.EndOptions{Discard: true}) })
	return eng, c, ws
}

func BenchmarkVersion(b *testing.B) {
	_, c, _ := benchClient(b)
	ctx := b.Context()
	for b.Loop() {
		_, err := c.Daemon(ctx)
		require.NoError(b, err)
	}
}

func BenchmarkExec(b *testing.B) {
	eng, _, ws := benchClient(b)
	argv := []string{"echo", "hi"}
	b.Run("engine", func(b *testing.B) {
		ctx := b.Context()
		for b.Loop() {
			if res, err := eng.Exec(ctx, ws.ID(), wire.ExecRequest{Argv: argv}, io.Discard, io.Discard); err != nil || res.ExitCode != 0 {
				b.Fatal(res, err)
			}
		}
	})
	b.Run("api-whole", func(b *testing.B) {
		ctx := b.Context()
		for b.Loop() {
			if res, err := ws.ExecArgv(ctx, argv, client.ExecOptions{}); err != nil || res.ExitCode != 0 {
				b.Fatal(res, err)
			}
		}
	})
	b.Run("api-streamed", func(b *testing.B) {
		ctx := b.Context()
		var out strings.Builder
		for b.Loop() {
			if res, err := ws.ExecArgv(ctx, argv, client.ExecOptions{Stdout: &out}); err != nil || res.ExitCode != 0 {
				b.Fatal(res, err)
			}
		}
	})
}
