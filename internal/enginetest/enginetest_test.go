package enginetest_test

import (
	"bytes"
	"testing"

	"github.com/stretchr/testify/require"

	"layerfs.dev/layerfs/internal/enginetest"
	"layerfs.dev/layerfs/wire"
)

func TestMain(m *testing.M) { enginetest.Main(m) }

// TestSharedAndNew: the shared engine is one engine for every caller, a
// new one is another, and both run a command in a workspace.
func TestSharedAndNew(t *testing.T) {
	shared := enginetest.Shared(t)
	require.Same(t, shared, enginetest.Shared(t), "two calls of Shared")
	own := enginetest.New(t)
	require.NotSame(t, shared, own)
	for _, e := range []*enginetest.Engine{shared, own} {
		ctx := t.Context()
		_, err := e.CreateProject(ctx, wire.CreateProject{Name: "p"})
		require.NoError(t, err)
		ws, err := e.CreateWorkspace(ctx, wire.WorkspaceSpec{Project: "p", Branch: "main"})
		require.NoError(t, err)
		var out bytes.Buffer
		res, err := e.Exec(ctx, ws.ID, wire.ExecRequest{Body: "echo hi > f && cat f"}, &out, &out)
		require.NoError(t, err)
		require.Equal(t, 0, res.ExitCode, "exit, output %q", out.String())
		require.Equal(t, "hi\n", out.String())
	}
}
