package client_test

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"layerfs.dev/layerfs/client"
	"layerfs.dev/layerfs/internal/api"
	"layerfs.dev/layerfs/internal/api/apitest"
	"layerfs.dev/layerfs/wire"
)

// fleetHost is one host's daemon on a TCP listener with a token, counting
// the requests it gets. Its engine is the real one, seen through
// apitest.Elsewhere: the hosts share it, and each answers as misdirected
// for the workspaces it is told another host serves.
type fleetHost struct {
	eng  *apitest.Elsewhere
	srv  *httptest.Server
	reqs atomic.Int64
}

func newFleetHost(t *testing.T) *fleetHost {
	h := &fleetHost{eng: apitest.NewElsewhere(localEngine)}
	handler := api.NewServer(h.eng, api.Options{}).Handler(api.ListenerOptions{Token: "tok"})
	h.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h.reqs.Add(1)
		handler.ServeHTTP(w, r)
	}))
	t.Cleanup(h.srv.Close)
	return h
}

// addr is the host's address as a daemon advertises it.
func (h *fleetHost) addr() string { return "tcp://" + h.srv.Listener.Addr().String() }

// TestFollowsMisdirected: a daemon asked for a workspace another host
// serves answers 421 misdirected naming that host; a Workspace handle
// sends the request there once (with its token), and goes there directly
// from then on; it never makes a second hop, nor dials a host that is down.
func TestFollowsMisdirected(t *testing.T) {
	ctx := t.Context()
	a, b, c := newFleetHost(t), newFleetHost(t), newFleetHost(t)
	p := projectName(t)
	_, err := a.eng.CreateProject(ctx, wire.CreateProject{Name: p})
	require.NoError(t, err)
	onA, err := a.eng.CreateWorkspace(ctx, wire.WorkspaceSpec{Project: p, Branch: "main"})
	require.NoError(t, err)
	b.eng.Serve(onA.ID, wire.Node{Name: "a", Address: a.addr(), Live: true})

	// The answer itself: 421 with the host and its address.
	req, _ := http.NewRequest(http.MethodGet, b.srv.URL+"/v1/workspaces/"+onA.ID, nil)
	req.Header.Set("Authorization", "Bearer tok")
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	var eb wire.ErrorBody
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&eb))
	resp.Body.Close()
	assert.Equal(t, http.StatusMisdirectedRequest, resp.StatusCode)
	assert.Equal(t, wire.CodeMisdirected, eb.Error.Code)
	require.NotNil(t, eb.Error.Node)
	assert.Equal(t, a.addr(), eb.Error.Node.Address)

	cl, err := client.Dial(ctx, b.addr(), client.WithToken("tok"))
	require.NoError(t, err)
	defer cl.Close()

	// A request with a body that can be sent again goes to a at once.
	ws := cl.Attach(onA.ID)
	require.NoError(t, ws.WriteFile(ctx, "hello.txt", []byte("from b's client\n"), 0o644))
	assert.Equal(t, a.addr(), ws.Address(), "the handle moved to a")
	before := b.reqs.Load()
	res, err := ws.ExecArgv(ctx, []string{"cat", "hello.txt"}, client.ExecOptions{})
	require.NoError(t, err)
	assert.Equal(t, "from b's client\n", string(res.Stdout))
	st, err := ws.Status(ctx)
	require.NoError(t, err)
	assert.Equal(t, onA.ID, st.ID)
	assert.Equal(t, before, b.reqs.Load(), "after the first answer, b is asked nothing more")

	// A streamed body on a fresh handle: a Stat finds the host first.
	src := filepath.Join(t.TempDir(), "up.txt")
	require.NoError(t, os.WriteFile(src, []byte("streamed\n"), 0o644))
	ws2 := cl.Attach(onA.ID)
	require.NoError(t, ws2.Upload(ctx, src, "up.txt"))
	got, err := ws2.ReadFile(ctx, "up.txt")
	require.NoError(t, err)
	assert.Equal(t, "streamed\n", string(got))
	var seen []string
	for _, f := range []string{"hello.txt", "up.txt"} {
		var buf bytes.Buffer
		if _, err := a.eng.ReadFile(ctx, onA.ID, f, &buf); err == nil {
			seen = append(seen, f)
		}
	}
	assert.Equal(t, []string{"hello.txt", "up.txt"}, seen, "the files are on a")

	// One hop only: b names c, which names a: the error from c comes back.
	b.eng.Serve("ws-hop", wire.Node{Name: "c", Address: c.addr(), Live: true})
	c.eng.Serve("ws-hop", wire.Node{Name: "a", Address: a.addr(), Live: true})
	aBefore := a.reqs.Load()
	_, err = cl.Attach("ws-hop").Exec(ctx, "echo", client.ExecOptions{})
	require.True(t, client.IsMisdirected(err), "second hop: %v", err)
	n, ok := client.ServedBy(err)
	require.True(t, ok)
	assert.Equal(t, "a", n.Name, "the error is c's, naming a")
	assert.Equal(t, aBefore, a.reqs.Load(), "no second hop to a")

	// A host that is down is named, not dialled.
	b.eng.Serve("ws-down", wire.Node{Name: "down", Address: "tcp://192.0.2.1:7070", Live: false})
	_, err = cl.Attach("ws-down").Status(ctx)
	require.True(t, client.IsMisdirected(err), "down: %v", err)
	n, _ = client.ServedBy(err)
	assert.Equal(t, "down", n.Name)
}
