package client_test

import (
	"io"
	"testing"

	"github.com/stretchr/testify/require"

	"layerfs.dev/layerfs/client"
	"layerfs.dev/layerfs/wire"
)

// TestWatch against the engine double (the real engine's events are tested
// through a real daemon in mcpserver and sdk/python).
func TestWatch(t *testing.T) {
	ctx := t.Context()
	c := dial(t)
	p := project(t, c)
	ws, err := c.CreateWorkspace(ctx, client.WorkspaceSpec{Project: p, Branch: "main"})
	require.NoError(t, err)
	ws.WriteFile(ctx, "src/keep", nil, 0o644)
	if _, err := ws.Watch(ctx, "missing"); !client.IsNotFound(err) {
		t.Errorf("watch of a missing prefix: %v", err)
	}
	if _, err := ws.Watch(ctx, "../x"); !client.IsInvalid(err) {
		t.Errorf("watch of an escaping prefix: %v", err)
	}
	st, err := ws.Watch(ctx, "src")
	require.NoError(t, err)
	defer st.Close()
	ws.WriteFile(ctx, "other", []byte("x"), 0o644)
	ws.WriteFile(ctx, "src/a.go", []byte("package a"), 0o644)
	ev, err := st.Next()
	if err != nil || ev.Kind != "created" || ev.Path != "src/a.go" || ev.Size != 9 {
		t.Errorf("first event = %+v, %v", ev, err)
	}
	require.NoError(t, ws.End(ctx, client.EndOptions{Discard: true}))
	if ev, err := st.Next(); err != nil || ev.Kind != wire.EventEnded {
		t.Errorf("after end = %+v, %v", ev, err)
	}
	if _, err := st.Next(); err != io.EOF {
		t.Errorf("after ended: %v, want io.EOF", err)
	}
}
