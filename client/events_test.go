package client_test

import (
	"context"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"layerfs.dev/layerfs/client"
	"layerfs.dev/layerfs/wire"
)

// TestWatch: the API's own writes reach a watch of the engine in this test
// binary (changes made in sandboxes and by host processes are tested
// through a real daemon in events_daemon_test.go, mcpserver and
// sdk/python).
func TestWatch(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
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
	// The upload is written beside its name and renamed onto it; a batch
	// may show the two steps or only their sum, src/a.go created. A mirror
	// of the stream holds src/a.go alone, and nothing from outside src.
	m := mirror{}
	var last wire.FileEvent
	for m.String() != "src/a.go:file" {
		ev, err := st.Next()
		require.NoError(t, err, "mirror %q", m)
		m.apply(ev)
		if ev.Path == "src/a.go" {
			last = ev
		}
	}
	if last.Size != 9 {
		t.Errorf("last event of src/a.go = %+v, want its 9 bytes", last)
	}
	require.NoError(t, ws.End(ctx, client.EndOptions{Discard: true}))
	for {
		ev, err := st.Next()
		require.NoError(t, err, "after end")
		if ev.Kind == wire.EventEnded {
			break
		}
		if !strings.HasPrefix(ev.Path, "src/") {
			t.Errorf("after end: %+v, outside the prefix", ev)
		}
	}
	if _, err := st.Next(); err != io.EOF {
		t.Errorf("after ended: %v, want io.EOF", err)
	}
}
