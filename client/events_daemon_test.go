package client_test

import (
	"context"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"layerfs.dev/layerfs/client"
	"layerfs.dev/layerfs/internal/daemontest"
	"layerfs.dev/layerfs/internal/fsids"
	"layerfs.dev/layerfs/wire"
)

// mirror applies events to a set of paths, as a consumer that mirrors the
// tree does; it is what the coalesced stream must keep right.
type mirror map[string]string // path -> type

func (m mirror) apply(ev wire.FileEvent) {
	switch ev.Kind {
	case "created", "modified":
		m[ev.Path] = ev.Type
	case "removed":
		m.drop(ev.Path)
	case "renamed":
		for p, typ := range m {
			if p == ev.OldPath || strings.HasPrefix(p, ev.OldPath+"/") {
				delete(m, p)
				m[ev.Path+p[len(ev.OldPath):]] = typ
			}
		}
		m[ev.Path] = ev.Type
	}
}

func (m mirror) drop(p string) {
	for q := range m {
		if q == p || strings.HasPrefix(q, p+"/") {
			delete(m, q)
		}
	}
}

func (m mirror) String() string {
	var out []string
	for _, p := range slices.Sorted(maps.Keys(m)) {
		out = append(out, p+":"+m[p])
	}
	return strings.Join(out, " ")
}

// until reads events into m until it reads want (bounded by the stream's ctx).
func until(t *testing.T, st *client.EventStream, m mirror, want string) {
	t.Helper()
	for m.String() != want {
		ev, err := st.Next()
		require.NoError(t, err, "mirror %q, want %q", m, want)
		m.apply(ev)
	}
}

// TestWatchRealDaemon: changes made in a sandbox, through the API and by a
// host process on the mount all reach the stream of a real daemon, the
// prefix filters, and ending the workspace ends the stream.
func TestWatchRealDaemon(t *testing.T) {
	d := daemontest.Start(t)
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	c, err := client.Dial(ctx, d.Addr())
	require.NoError(t, err)
	defer c.Close()
	_, err = c.CreateProject(ctx, wire.CreateProject{Name: "events"})
	require.NoError(t, err)
	ws, err := c.CreateWorkspace(ctx, client.WorkspaceSpec{Project: "events", Branch: "main"})
	require.NoError(t, err)
	st, err := ws.Watch(ctx, "")
	require.NoError(t, err)
	defer st.Close()
	m := mirror{}
	if res, err := ws.Exec(ctx, "mkdir -p d/e && echo hi > d/f && mv d/f d/g && echo x > d/e/h && rm d/e/h", client.ExecOptions{}); err != nil || res.ExitCode != 0 {
		t.Fatalf("exec: %+v %v", res, err)
	}
	until(t, st, m, "d:dir d/e:dir d/g:file")
	require.NoError(t, ws.WriteFile(ctx, "api.txt", []byte("from the API"), 0o644))
	until(t, st, m, "api.txt:file d:dir d/e:dir d/g:file")
	// A host process creates files in a workspace as a uid its mount maps:
	// on the overlay data path of local sandboxes, the mount shows on-disk
	// root as the user namespace's root (kerneloverlay.IDMap).
	owner, err := os.Stat(ws.MountPath())
	require.NoError(t, err)
	require.NoError(t, fsids.Do(owner.Sys().(*syscall.Stat_t).Uid, func() error {
		return os.WriteFile(filepath.Join(ws.MountPath(), "d", "host.txt"), []byte("from the host"), 0o644)
	}))
	until(t, st, m, "api.txt:file d:dir d/e:dir d/g:file d/host.txt:file")
	if res, err := ws.Exec(ctx, "mv d moved", client.ExecOptions{}); err != nil || res.ExitCode != 0 {
		t.Fatalf("exec mv: %+v %v", res, err)
	}
	until(t, st, m, "api.txt:file moved:dir moved/e:dir moved/g:file moved/host.txt:file")

	// A prefix sees only its directory.
	sub, err := ws.Watch(ctx, "moved/e")
	require.NoError(t, err)
	defer sub.Close()
	ws.Exec(ctx, "echo 1 > top.txt && echo 2 > moved/e/in.txt", client.ExecOptions{})
	ev, err := sub.Next()
	if err != nil || ev.Path != "moved/e/in.txt" {
		t.Errorf("prefix stream: %+v %v", ev, err)
	}
	if _, err := ws.Watch(ctx, "moved/g"); !client.IsInvalid(err) {
		t.Errorf("watch of a file: %v", err)
	}

	require.NoError(t, ws.End(ctx, client.EndOptions{Discard: true}))
	for {
		ev, err := st.Next()
		if err == io.EOF {
			t.Fatal("stream closed without an ended event")
		}
		require.NoError(t, err)
		if ev.Kind == wire.EventEnded {
			break
		}
	}
	if _, err := st.Next(); err != io.EOF {
		t.Errorf("after ended: %v", err)
	}
}

// TestMeasureEvents measures the stream of a real daemon: latency from a
// write on the mount to its event (p50/p95), and the events per second it
// carries while one writer creates files as fast as it can. Run with
// LAYERFS_MEASURE_EVENTS=1 go test ./client -run TestMeasureEvents -v.
func TestMeasureEvents(t *testing.T) {
	if os.Getenv("LAYERFS_MEASURE_EVENTS") == "" {
		t.Skip("a measurement: set LAYERFS_MEASURE_EVENTS=1")
	}
	d := daemontest.Start(t)
	ctx := t.Context()
	c, err := client.Dial(ctx, d.Addr())
	require.NoError(t, err)
	c.CreateProject(ctx, wire.CreateProject{Name: "measure"})
	ws, err := c.CreateWorkspace(ctx, client.WorkspaceSpec{Project: "measure", Branch: "main"})
	require.NoError(t, err)
	defer ws.End(ctx, client.EndOptions{Discard: true})
	st, err := ws.Watch(ctx, "")
	require.NoError(t, err)
	defer st.Close()
	mount := ws.MountPath()

	var lat []time.Duration
	for i := range 300 {
		name := fmt.Sprintf("lat-%d", i)
		start := time.Now()
		require.NoError(t, os.WriteFile(filepath.Join(mount, name), []byte("x"), 0o644))
		for {
			ev, err := st.Next()
			require.NoError(t, err)
			if ev.Path == name {
				lat = append(lat, time.Since(start))
				break
			}
		}
	}
	slices.Sort(lat)
	t.Logf("write to event: p50 %v, p95 %v, max %v (%d writes)", lat[len(lat)/2], lat[len(lat)*95/100], lat[len(lat)-1], len(lat))

	// Writers on the mount as fast as they go; the stream must keep up.
	const files, writers = 40000, 8
	os.Mkdir(filepath.Join(mount, "burst"), 0o755)
	start := time.Now()
	done := make(chan error, writers)
	for w := range writers {
		go func() {
			for i := w; i < files; i += writers {
				if err := os.WriteFile(filepath.Join(mount, "burst", fmt.Sprint(i)), nil, 0o644); err != nil {
					done <- err
					return
				}
			}
			done <- nil
		}()
	}
	seen, dropped := 0, int64(0)
	for seen+int(dropped) < files {
		ev, err := st.Next()
		require.NoError(t, err)
		switch {
		case ev.Kind == wire.EventDropped:
			dropped += ev.Count
		case ev.Kind == wire.EventOverflow:
			t.Fatalf("kernel queue overflow after %d events", seen)
		case strings.HasPrefix(ev.Path, "burst/"):
			seen++
		}
	}
	all := time.Since(start)
	for range writers {
		require.NoError(t, <-done)
	}
	writeTime := time.Since(start)
	t.Logf("burst of %d creates by %d writers: %d events delivered, %d dropped, in %v: %.0f events/s (the writers were done after %v)",
		files, writers, seen, dropped, all.Round(time.Millisecond), float64(seen)/all.Seconds(), writeTime.Round(time.Millisecond))
}

// TestHostWritesWithoutUserNamespace: a daemon started with
// --no-user-namespace gives local overlay workspaces plain layers, so the
// host's root creates files in the mount under its own ids, and the
// receipt says the exec had no user namespace of its own.
func TestHostWritesWithoutUserNamespace(t *testing.T) {
	d := daemontest.Start(t, "--no-user-namespace")
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	c, err := client.Dial(ctx, d.Addr())
	require.NoError(t, err)
	defer c.Close()
	_, err = c.CreateProject(ctx, wire.CreateProject{Name: "plain"})
	require.NoError(t, err)
	ws, err := c.CreateWorkspace(ctx, client.WorkspaceSpec{Project: "plain", Branch: "main"})
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(ws.MountPath(), "host.txt"), []byte("from the host"), 0o644))
	res, err := ws.Exec(ctx, "stat -c %u:%g host.txt", client.ExecOptions{})
	require.NoError(t, err)
	require.Equal(t, 0, res.ExitCode, "stderr: %s", res.Stderr)
	assert.Equal(t, "0:0\n", string(res.Stdout))
	require.NotNil(t, res.Receipt)
	assert.Contains(t, res.Receipt.UserNamespace, "none")
}
