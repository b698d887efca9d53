package api_test

import (
	"archive/tar"
	"bufio"
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/google/go-containerregistry/pkg/registry"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"layerfs.dev/layerfs/internal/api"
	"layerfs.dev/layerfs/internal/api/apitest"
	"layerfs.dev/layerfs/internal/engine"
	"layerfs.dev/layerfs/internal/enginetest"
	"layerfs.dev/layerfs/internal/testenv"
	"layerfs.dev/layerfs/wire"
	"layerfs.dev/layerfs/wire/errclass"
)

// The real engine serves every service the API declares.
var (
	_ api.ProjectManager   = (*engine.Engine)(nil)
	_ api.BranchManager    = (*engine.Engine)(nil)
	_ api.History          = (*engine.Engine)(nil)
	_ api.WorkspaceManager = (*engine.Engine)(nil)
	_ api.Executor         = (*engine.Engine)(nil)
	_ api.Files            = (*engine.Engine)(nil)
	_ api.Watcher          = (*engine.Engine)(nil)
	_ api.Maintenance      = (*engine.Engine)(nil)
	_ api.MetricsWriter    = (*engine.Engine)(nil)
)

// The tests share one real engine (enginetest.Shared), each in a project
// named after it, unless a test counts what the engine holds.
func TestMain(m *testing.M) { enginetest.Main(m) }

// harness is a server on a unix socket (as layerfsd serves it) with an
// HTTP client that dials it.
type harness struct {
	t   *testing.T
	eng api.Engine
	srv *api.Server
	hc  *http.Client
	url string
	// project is the test's own project, made by setup.
	project string
}

func newHarness(t *testing.T, eng api.Engine, opts api.Options) *harness {
	t.Helper()
	sock := filepath.Join(t.TempDir(), "api.sock")
	l, err := net.Listen("unix", sock)
	require.NoError(t, err)
	srv := api.NewServer(eng, opts)
	hs := httptest.NewUnstartedServer(srv.Handler(api.ListenerOptions{}))
	hs.Listener.Close()
	hs.Listener = l
	hs.Start()
	t.Cleanup(hs.Close)
	tr := &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "unix", sock)
	}}
	t.Cleanup(tr.CloseIdleConnections)
	return &harness{t: t, eng: eng, srv: srv, hc: &http.Client{Transport: tr}, url: "http://layerfsd",
		project: projectName(t)}
}

// projectName is a valid project name made of t's name.
func projectName(t *testing.T) string {
	return strings.ToLower(strings.NewReplacer("/", "-", "_", "-").Replace(t.Name()))
}

type response struct {
	status int
	header http.Header
	body   []byte
}

// errBody decodes a typed error, failing the test when the body is not one.
func (r response) err(t *testing.T) wire.Error {
	t.Helper()
	var eb wire.ErrorBody
	if err := json.Unmarshal(r.body, &eb); err != nil || eb.Error.Code == "" {
		t.Fatalf("status %d: body is not a JSON error: %q", r.status, r.body)
	}
	return eb.Error
}

func (h *harness) do(method, path string, body io.Reader, hdr ...string) response {
	h.t.Helper()
	req, err := http.NewRequest(method, h.url+path, body)
	require.NoError(h.t, err)
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := h.hc.Do(req)
	require.NoError(h.t, err, "%s %s", method, path)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(h.t, err, "%s %s: read body", method, path)
	return response{resp.StatusCode, resp.Header, b}
}

// attach runs req attached over an upgraded connection, sends input and
// the end of it, and returns the output and the last event.
func (h *harness) attach(path string, req wire.ExecRequest, input string) (string, wire.ExecEvent) {
	h.t.Helper()
	b, err := json.Marshal(req)
	require.NoError(h.t, err)
	hr, err := http.NewRequest("POST", h.url+path, bytes.NewReader(b))
	require.NoError(h.t, err)
	hr.Header.Set("Content-Type", "application/json")
	hr.Header.Set("Connection", "Upgrade")
	hr.Header.Set("Upgrade", wire.AttachProtocol)
	resp, err := h.hc.Do(hr)
	require.NoError(h.t, err)
	require.Equal(h.t, http.StatusSwitchingProtocols, resp.StatusCode)
	conn := resp.Body.(io.ReadWriteCloser)
	defer conn.Close()
	require.NoError(h.t, wire.WriteFrame(conn, wire.FrameStdin, []byte(input)))
	require.NoError(h.t, wire.WriteFrame(conn, wire.FrameStdinEnd, nil))
	var out strings.Builder
	for {
		typ, p, err := wire.ReadFrame(conn)
		require.NoError(h.t, err)
		switch typ {
		case wire.FrameStdout:
			out.Write(p)
		case wire.FrameEnd:
			var ev wire.ExecEvent
			require.NoError(h.t, json.Unmarshal(p, &ev))
			return out.String(), ev
		}
	}
}

func (h *harness) json(method, path string, in any, wantStatus int, out any) response {
	h.t.Helper()
	var body io.Reader
	if in != nil {
		b, err := json.Marshal(in)
		require.NoError(h.t, err)
		body = bytes.NewReader(b)
	}
	r := h.do(method, path, body, "Content-Type", "application/json")
	if r.status != wantStatus {
		h.t.Fatalf("%s %s: status %d, want %d; body %s", method, path, r.status, wantStatus, r.body)
	}
	if out != nil {
		require.NoError(h.t, json.Unmarshal(r.body, out), "%s %s: decode %q", method, path, r.body)
	}
	return r
}

// setup makes the test's project and a workspace on its main branch.
func (h *harness) setup() wire.Workspace {
	h.t.Helper()
	h.json("POST", "/v1/projects", wire.CreateProject{Name: h.project}, http.StatusCreated, nil)
	var ws wire.Workspace
	h.json("POST", "/v1/workspaces", wire.WorkspaceSpec{Project: h.project, Branch: "main"}, http.StatusCreated, &ws)
	return ws
}

// engineState is what an engine holds as its services report it: every
// project with its branches and layers, every workspace with its changes
// and upper layer, and what the Store holds. A request that changes
// nothing leaves it as it was. Left out is what reading changes: a
// mount's request counters, the Store's cache of materialized contents
// and the size of its database file.
type engineState struct {
	Projects   []wire.Project
	Branches   map[string][]wire.Branch
	Layers     map[string][]wire.Layer
	Workspaces []wire.WorkspaceStatus
	Store      wire.StoreStats
}

func (h *harness) state() engineState {
	h.t.Helper()
	ctx := h.t.Context()
	st := engineState{Branches: map[string][]wire.Branch{}, Layers: map[string][]wire.Layer{}}
	var err error
	st.Projects, err = h.eng.Projects(ctx)
	require.NoError(h.t, err)
	for _, p := range st.Projects {
		st.Branches[p.Name], err = h.eng.Branches(ctx, p.Name)
		require.NoError(h.t, err)
		st.Layers[p.Name], err = h.eng.Layers(ctx, p.Name)
		require.NoError(h.t, err)
	}
	wss, err := h.eng.Workspaces(ctx)
	require.NoError(h.t, err)
	for _, ws := range wss {
		ws, err := h.eng.WorkspaceStatus(ctx, ws.ID)
		require.NoError(h.t, err)
		ws.FUSE = wire.FUSEStats{}
		st.Workspaces = append(st.Workspaces, ws)
	}
	st.Store, err = h.eng.Stats(ctx)
	require.NoError(h.t, err)
	st.Store.CacheBytes, st.Store.DBBytes = 0, 0
	return st
}

func tarOf(t *testing.T, entries ...tar.Header) []byte {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, h := range entries {
		data := ""
		if h.Typeflag == tar.TypeReg {
			data = "content of " + h.Name
			h.Size = int64(len(data))
		}
		if h.Mode == 0 {
			h.Mode = 0o644
		}
		require.NoError(t, tw.WriteHeader(&h))
		io.WriteString(tw, data)
	}
	require.NoError(t, tw.Close())
	return buf.Bytes()
}

// TestRoutes walks every route through its happy path, on an engine of its
// own: it counts projects and workspaces.
func TestRoutes(t *testing.T) {
	h := newHarness(t, enginetest.New(t), api.Options{Daemon: wire.DaemonStatus{Socket: "/run/x.sock", Platforms: []string{"local"}}})

	var v wire.Version
	h.json("GET", "/v1/version", nil, 200, &v)
	if v.API != "v1" || v.PID == 0 || v.GoVersion == "" {
		t.Errorf("version = %+v", v)
	}

	var p wire.Project
	r := h.json("POST", "/v1/projects", wire.CreateProject{Name: "p", Message: "hello"}, 201, &p)
	if p.Name != "p" || r.header.Get("Content-Type") != "application/json" || r.header.Get("X-Request-Id") == "" {
		t.Errorf("create project: %+v %v", p, r.header)
	}
	var ps []wire.Project
	h.json("GET", "/v1/projects", nil, 200, &ps)
	h.json("GET", "/v1/projects/p", nil, 200, &p)
	if len(ps) != 1 || p.Name != "p" {
		t.Errorf("projects = %+v, project = %+v", ps, p)
	}
	var ls []wire.Layer
	h.json("GET", "/v1/projects/p/layers", nil, 200, &ls)
	if len(ls) != 1 || ls[0].Index != 1 {
		t.Fatalf("layers = %+v", ls)
	}

	var ws wire.Workspace
	r = h.json("POST", "/v1/workspaces", wire.WorkspaceSpec{Project: "p", Branch: "main", Network: "host"}, 201, &ws)
	if ws.ID == "" || ws.Network != "host" || r.header.Get("Location") != "/v1/workspaces/"+ws.ID {
		t.Fatalf("workspace = %+v, Location %q", ws, r.header.Get("Location"))
	}
	base := "/v1/workspaces/" + ws.ID
	var wss []wire.Workspace
	h.json("GET", "/v1/workspaces", nil, 200, &wss)
	if len(wss) != 1 {
		t.Errorf("workspaces = %+v", wss)
	}

	if r := h.do("PUT", base+"/files/src/a%20b.txt?mode=0600", strings.NewReader("hello")); r.status != 204 {
		t.Fatalf("put file: %d %s", r.status, r.body)
	}
	if r := h.do("GET", base+"/files/src/a%20b.txt", nil); r.status != 200 || string(r.body) != "hello" ||
		r.header.Get("Content-Type") != "application/octet-stream" {
		t.Fatalf("get file: %d %q %v", r.status, r.body, r.header)
	}
	tb := tarOf(t, tar.Header{Name: "d/", Typeflag: tar.TypeDir, Mode: 0o755}, tar.Header{Name: "d/x", Typeflag: tar.TypeReg})
	if r := h.do("PUT", base+"/tar?path=up", bytes.NewReader(tb), "Content-Type", wire.MediaTar); r.status != 204 {
		t.Fatalf("put tar: %d %s", r.status, r.body)
	}
	r = h.do("GET", base+"/tar?path=up/d", nil)
	if r.status != 200 || r.header.Get("Content-Type") != wire.MediaTar {
		t.Fatalf("get tar: %d %s", r.status, r.body)
	}
	var names []string
	tr := tar.NewReader(bytes.NewReader(r.body))
	for {
		th, err := tr.Next()
		if err != nil {
			break
		}
		names = append(names, th.Name)
	}
	if fmt.Sprint(names) != "[d/ d/x]" {
		t.Errorf("tar names = %v", names)
	}
	// Compressed when asked for, the same archive.
	r = h.do("GET", base+"/tar?path=up/d", nil, "Accept-Encoding", "deflate, gzip;q=0.8")
	if r.status != 200 || r.header.Get("Content-Encoding") != "gzip" {
		t.Fatalf("get tar, gzip accepted: %d %v", r.status, r.header)
	}
	zr, err := gzip.NewReader(bytes.NewReader(r.body))
	require.NoError(t, err)
	if plain, err := io.ReadAll(zr); err != nil || !bytes.Equal(plain, h.do("GET", base+"/tar?path=up/d", nil, "Accept-Encoding", "identity").body) {
		t.Errorf("the gzip body is not the archive: %v", err)
	}

	var res wire.ExecResult
	h.json("POST", base+"/execs", wire.ExecRequest{Argv: []string{"cat", "up/d/x"}, TimeoutMs: 1000}, 200, &res)
	if res.ExitCode != 0 || string(res.Stdout) != "content of d/x" {
		t.Errorf("exec = %+v", res)
	}
	h.json("POST", base+"/execs", wire.ExecRequest{Body: "exit 3"}, 200, &res)
	if res.ExitCode != 3 {
		t.Errorf("exec exit 3 = %+v", res)
	}
	var sv wire.Service
	h.json("POST", base+"/services", wire.ServiceRequest{Name: "svc", Body: "echo up; exec sleep 1000"}, 201, &sv)
	if sv.Name != "svc" || sv.State != wire.ServiceRunning || sv.Pid <= 1 {
		t.Errorf("start service = %+v", sv)
	}
	var svl wire.ServiceList
	h.json("GET", base+"/services", nil, 200, &svl)
	if len(svl.Services) != 1 || svl.Services[0].Name != "svc" {
		t.Errorf("services = %+v", svl)
	}
	for i := 0; string(h.do("GET", base+"/services/svc/logs", nil).body) != "up\n"; i++ {
		if i == 500 {
			t.Fatal("the service's log never showed its output")
		}
		time.Sleep(10 * time.Millisecond)
	}
	h.json("POST", base+"/services/svc/stop", wire.ServiceStopRequest{GraceMs: 2000}, 200, &sv)
	if sv.State != wire.ServiceEnded || sv.Reason != wire.ServiceStopped {
		t.Errorf("stop service = %+v", sv)
	}
	h.json("POST", base+"/services/svc/wait", nil, 200, &sv)
	if logs := h.do("GET", base+"/services/svc/logs?follow=true", nil); logs.status != 200 || string(logs.body) != "up\n" ||
		logs.header.Get("Content-Type") != "text/plain; charset=utf-8" {
		t.Errorf("service logs: %d %q %v", logs.status, logs.body, logs.header)
	}
	out, ev := h.attach(base+"/attach", wire.ExecRequest{Body: "read a; echo got-$a; exit 4"}, "hi\n")
	if ev.Result == nil || ev.Result.ExitCode != 4 || out != "got-hi\n" {
		t.Errorf("attach = %q, %+v", out, ev)
	}
	if r := h.do("POST", base+"/attach", strings.NewReader(`{"body": "true"}`), "Content-Type", "application/json"); r.status != 400 || !strings.Contains(string(r.body), "Upgrade") {
		t.Errorf("attach without an upgrade: %d %s", r.status, r.body)
	}

	var st wire.WorkspaceStatus
	h.json("GET", base, nil, 200, &st)
	// A directory made in the workspace is one change, its tree with it.
	if fmt.Sprint(st.Changes) != fmt.Sprint([]wire.Change{{Path: "src", Kind: wire.Added, NewType: "dir"}, {Path: "up", Kind: wire.Added, NewType: "dir"}}) {
		t.Errorf("changes = %+v", st.Changes)
	}
	// A plain end refuses to drop changes.
	if e := h.do("DELETE", base, nil); e.status != 409 || e.err(t).Code != wire.CodeUncommitted {
		t.Errorf("end with changes: %d %s", e.status, e.body)
	}
	var cr wire.CommitResult
	h.json("POST", base+"/commit", wire.CommitRequest{Message: "m"}, 200, &cr)
	if cr.Result != wire.Created {
		t.Errorf("commit = %+v", cr)
	}
	h.json("POST", base+"/commit", nil, 200, &cr) // the body is optional
	if cr.Result != wire.UpToDate {
		t.Errorf("second commit = %+v", cr)
	}
	h.json("POST", base+"/mount", nil, 200, &ws)

	var c wire.Commit
	h.json("GET", "/v1/projects/p/commits/main", nil, 200, &c)
	assert.Equal(t, cr.Commit, c.ID, "commit main")
	h.json("GET", "/v1/projects/p/commits/layer:1", nil, 200, &c)
	var log []wire.Commit
	h.json("GET", "/v1/projects/p/log?ref=main&limit=10", nil, 200, &log)
	if len(log) != 2 {
		t.Errorf("log = %+v", log)
	}
	var page wire.DiffPage
	h.json("GET", "/v1/projects/p/diff?from=layer:1&to=main&limit=2", nil, 200, &page)
	if len(page.Changes) != 2 || page.Next == "" {
		t.Errorf("diff page = %+v", page)
	}
	// Commits diff path by path: src, src/a b.txt, then up and its tree.
	var page2 wire.DiffPage
	h.json("GET", "/v1/projects/p/diff?from=layer:1&to=main&cursor="+url.QueryEscape(page.Next), nil, 200, &page2)
	if len(page2.Changes) != 3 || page2.Changes[0].Path != "up" || page2.Next != "" {
		t.Errorf("second diff page = %+v", page2)
	}

	var b wire.Branch
	h.json("POST", "/v1/projects/p/branches", wire.ForkBranch{Name: "feature", From: "main"}, 201, &b)
	if b.Head != cr.Commit {
		t.Errorf("fork = %+v", b)
	}
	var bs []wire.Branch
	h.json("GET", "/v1/projects/p/branches", nil, 200, &bs)
	h.json("GET", "/v1/projects/p/branches/feature", nil, 200, &b)
	var l wire.Layer
	h.json("POST", "/v1/projects/p/layers", wire.AddLayer{Branch: "feature"}, 201, &l)
	if l.Index != 2 || len(bs) != 2 {
		t.Errorf("layer = %+v, branches = %+v", l, bs)
	}
	h.json("DELETE", "/v1/projects/p/branches/feature", nil, 204, nil)
	h.json("GET", "/v1/projects/p/branches/feature", nil, 404, nil)

	// A directory of the daemon's host becomes main's next commit, and
	// main's tree is checked out into another.
	hostSrc, hostOut := t.TempDir(), filepath.Join(t.TempDir(), "out")
	require.NoError(t, os.WriteFile(filepath.Join(hostSrc, "host.txt"), []byte("from the host"), 0o644))
	h.json("POST", "/v1/projects/p/branches/main/commits", wire.CommitDir{FromPath: hostSrc, Message: "host"}, 200, &cr)
	if cr.Result != wire.Created {
		t.Errorf("commit of a host directory = %+v", cr)
	}
	var co wire.CheckoutResult
	h.json("POST", "/v1/projects/p/checkout", wire.Checkout{Ref: "main", Path: hostOut}, 200, &co)
	if b, err := os.ReadFile(filepath.Join(hostOut, "host.txt")); err != nil || string(b) != "from the host" || co.Commit != cr.Commit {
		t.Errorf("checkout = %+v: host.txt %q, %v", co, b, err)
	}

	testImageRoutes(t, h, base, hostSrc)

	var gc wire.GCResult
	h.json("POST", "/v1/gc", nil, 200, &gc)
	var fr wire.FsckReport
	h.json("POST", "/v1/fsck", nil, 200, &fr)
	if !fr.OK || fr.Problems == nil {
		t.Errorf("fsck = %+v", fr)
	}
	var ss wire.StoreStats
	h.json("GET", "/v1/stats", nil, 200, &ss)

	var ds wire.DaemonStatus
	h.json("GET", "/v1/daemon", nil, 200, &ds)
	if ds.Workspaces != 1 || ds.Socket != "/run/x.sock" || ds.Started.IsZero() || ds.API != "v1" {
		t.Errorf("daemon = %+v", ds)
	}
	h.json("DELETE", base+"?discard=true", nil, 204, nil)
	h.json("GET", base, nil, 404, nil)
	// Without a Stop function the daemon cannot be stopped through the API.
	h.json("POST", "/v1/daemon/stop", nil, 503, nil)

	m := h.do("GET", "/metrics", nil)
	for _, want := range []string{
		`layerfs_api_requests_total{route="POST /v1/workspaces/{id}/execs",code="200"} 2`,
		`layerfs_api_requests_total{route="GET /v1/workspaces/{id}",code="404"} 1`,
		`layerfs_api_request_duration_seconds_bucket{route="GET /v1/version",le="+Inf"} 1`,
		`layerfs_api_request_duration_seconds_count{route="POST /v1/projects"} 1`,
		"layerfs_api_execs_running 0",
		"layerfs_execs_running 0", // written by the engine
	} {
		if !strings.Contains(string(m.body), want) { // not assert.Contains: it would print every metric
			t.Errorf("metrics lack %q", want)
		}
	}
	if !strings.HasPrefix(m.header.Get("Content-Type"), "text/plain; version=0.0.4") {
		t.Errorf("metrics content type %q", m.header.Get("Content-Type"))
	}
}

func TestStopDaemon(t *testing.T) {
	stopped := make(chan struct{})
	h := newHarness(t, enginetest.Shared(t), api.Options{Stop: func() { close(stopped) }})
	h.json("POST", "/v1/daemon/stop", nil, 202, nil)
	h.json("POST", "/v1/daemon/stop", nil, 202, nil) // Stop runs once
	select {
	case <-stopped:
	case <-time.After(5 * time.Second):
		t.Fatal("Stop was not called")
	}
}

// TestBadInput sends malformed requests; each gets a 4xx with a JSON error
// that says what is wrong, and the engine's state does not change.
func TestBadInput(t *testing.T) {
	h := newHarness(t, enginetest.Shared(t), api.Options{})
	ws := h.setup()
	base := "/v1/workspaces/" + ws.ID
	proj := "/v1/projects/" + h.project
	h.do("PUT", base+"/files/keep.txt", strings.NewReader("keep"))
	before := h.state()

	evil := tarOf(t, tar.Header{Name: "ok.txt", Typeflag: tar.TypeReg}, tar.Header{Name: "../../etc/evil", Typeflag: tar.TypeReg})
	absTar := tarOf(t, tar.Header{Name: "/etc/evil", Typeflag: tar.TypeReg})
	devTar := tarOf(t, tar.Header{Name: "null", Typeflag: tar.TypeChar})

	cases := []struct {
		name, method, path, body string
		hdr                      []string
		status                   int
		code, msg                string
	}{
		{"malformed JSON", "POST", "/v1/projects", `{"name": "x"`, nil, 400, wire.CodeInvalid, "malformed JSON"},
		{"syntax error", "POST", "/v1/projects", `{"name": x}`, nil, 400, wire.CodeInvalid, "malformed JSON at byte"},
		{"empty body", "POST", "/v1/projects", ``, nil, 400, wire.CodeInvalid, "empty"},
		{"unknown field", "POST", "/v1/projects", `{"name": "x", "nmae": "y"}`, nil, 400, wire.CodeInvalid, `unknown field "nmae"`},
		{"wrong type", "POST", "/v1/workspaces", `{"project": 7, "branch": "main"}`, nil, 400, wire.CodeInvalid, `field "project": want a string, got number`},
		{"wrong type nested", "POST", base + "/execs", `{"argv": "ls"}`, nil, 400, wire.CodeInvalid, `field "argv": want an array, got string`},
		{"wrong type number", "POST", base + "/execs", `{"body": "x", "timeout_ms": "10"}`, nil, 400, wire.CodeInvalid, `field "timeout_ms": want a number`},
		{"not an object", "POST", "/v1/projects", `["x"]`, nil, 400, wire.CodeInvalid, "want a JSON object"},
		{"two values", "POST", "/v1/projects", `{"name": "x"} {"name": "y"}`, nil, 400, wire.CodeInvalid, "exactly one JSON value"},
		{"wrong content type", "POST", "/v1/projects", `{"name": "x"}`, []string{"Content-Type", "text/plain"}, 400, wire.CodeInvalid, "content type"},
		{"name with slash", "POST", "/v1/projects", `{"name": "a/b"}`, nil, 400, wire.CodeInvalid, `"a/b" is not a valid name`},
		{"name dotdot", "POST", "/v1/projects", `{"name": ".."}`, nil, 400, wire.CodeInvalid, "not a valid name"},
		{"name upper", "POST", "/v1/projects", `{"name": "Ab"}`, nil, 400, wire.CodeInvalid, "not a valid name"},
		{"name missing", "POST", "/v1/projects", `{}`, nil, 400, wire.CodeInvalid, "name is required"},
		{"from_path relative", "POST", "/v1/projects", `{"name": "x", "from_path": "src"}`, nil, 400, wire.CodeInvalid, "absolute path"},
		{"from_path unclean", "POST", "/v1/projects", `{"name": "x", "from_path": "/srv/../etc"}`, nil, 400, wire.CodeInvalid, "not clean"},
		{"branch dotdot", "POST", proj + "/branches", `{"name": "../x", "from": "main"}`, nil, 400, wire.CodeInvalid, "not a valid name"},
		{"ref dotdot", "POST", proj + "/branches", `{"name": "x", "from": "a..b"}`, nil, 400, wire.CodeInvalid, "not a valid ref"},
		{"project path dotdot", "GET", "/v1/projects/%2e%2e/branches", ``, nil, 400, wire.CodeInvalid, ""},
		{"project path encoded slash", "GET", "/v1/projects/a%2Fb", ``, nil, 400, wire.CodeInvalid, "not a valid name"},
		{"unknown project", "GET", "/v1/projects/nope", ``, nil, 404, wire.CodeNotFound, "nope"},
		{"unknown workspace", "GET", "/v1/workspaces/ws-ffff", ``, nil, 404, wire.CodeNotFound, "ws-ffff"},
		{"bad workspace id", "GET", "/v1/workspaces/WS_1", ``, nil, 400, wire.CodeInvalid, "workspace id"},
		{"unknown workspace exec", "POST", "/v1/workspaces/ws-ffff/execs", `{"body": "echo"}`, nil, 404, wire.CodeNotFound, ""},
		{"negative timeout", "POST", base + "/execs", `{"body": "echo", "timeout_ms": -5}`, nil, 400, wire.CodeInvalid, "timeout_ms: -5"},
		{"argv and body", "POST", base + "/execs", `{"body": "echo", "argv": ["echo"]}`, nil, 400, wire.CodeInvalid, "exclusive"},
		{"no command", "POST", base + "/execs", `{}`, nil, 400, wire.CodeInvalid, "one of argv and body"},
		{"bad env", "POST", base + "/execs", `{"body": "echo", "env": ["NOEQUALS"]}`, nil, 400, wire.CodeInvalid, "env[0]"},
		{"exec dir escapes", "POST", base + "/execs", `{"body": "echo", "dir": "../.."}`, nil, 400, wire.CodeInvalid, "dir"},
		{"bad network", "POST", "/v1/workspaces", `{"project": "` + h.project + `", "branch": "main", "network": "bridge"}`, nil, 400, wire.CodeInvalid, "network"},
		{"upload dotdot", "PUT", base + "/files/a/../../etc/passwd", "x", nil, 400, wire.CodeInvalid, `".."`},
		{"upload encoded dotdot", "PUT", base + "/files/%2e%2e/etc/passwd", "x", nil, 400, wire.CodeInvalid, `".."`},
		{"upload encoded slash dotdot", "PUT", base + "/files/a%2F..%2F..%2Fx", "x", nil, 400, wire.CodeInvalid, `".."`},
		{"upload absolute", "PUT", base + "/files//etc/passwd", "x", nil, 400, wire.CodeInvalid, "empty elements"},
		{"upload encoded absolute", "PUT", base + "/files/%2Fetc%2Fpasswd", "x", nil, 400, wire.CodeInvalid, "empty elements"},
		{"upload bad mode", "PUT", base + "/files/x?mode=99", "x", nil, 400, wire.CodeInvalid, "mode"},
		{"download dotdot", "GET", base + "/files/%2e%2e/x", ``, nil, 400, wire.CodeInvalid, `".."`},
		{"download root", "GET", base + "/files/", ``, nil, 400, wire.CodeInvalid, "root"},
		{"tar path dotdot", "GET", base + "/tar?path=../x", ``, nil, 400, wire.CodeInvalid, `".."`},
		{"tar path absolute dotdot", "PUT", base + "/tar?path=/../etc", string(tarOf(t, tar.Header{Name: "x", Typeflag: tar.TypeReg})), nil, 400, wire.CodeInvalid, `".."`},
		{"tar entry dotdot", "PUT", base + "/tar", string(evil), nil, 400, wire.CodeInvalid, `has a ".." component`},
		{"tar entry absolute", "PUT", base + "/tar", string(absTar), nil, 400, wire.CodeInvalid, "is absolute"},
		{"tar device", "PUT", base + "/tar", string(devTar), nil, 400, wire.CodeInvalid, "type"},
		{"unknown query", "GET", proj + "/log?ref=main&limt=3", ``, nil, 400, wire.CodeInvalid, `unknown query parameter "limt"`},
		{"bad limit", "GET", proj + "/log?ref=main&limit=-1", ``, nil, 400, wire.CodeInvalid, "limit"},
		{"missing ref", "GET", proj + "/log", ``, nil, 400, wire.CodeInvalid, "ref is required"},
		{"bad discard", "DELETE", base + "?discard=maybe", ``, nil, 400, wire.CodeInvalid, "discard"},
		{"unknown route", "GET", "/v1/nope", ``, nil, 404, wire.CodeNotFound, "no such route"},
		{"wrong method", "PATCH", "/v1/projects", ``, nil, 405, wire.CodeMethodNotAllowed, "not allowed"},
		{"exists", "POST", "/v1/projects", `{"name": "` + h.project + `"}`, nil, 409, wire.CodeExists, ""},
		{"service without command", "POST", base + "/services", `{"name": "a"}`, nil, 400, wire.CodeInvalid, "one of argv and body"},
		{"service bad name", "POST", base + "/services", `{"name": "A B", "body": "true"}`, nil, 400, wire.CodeInvalid, "name"},
		{"service bad restart", "POST", base + "/services", `{"body": "true", "restart": "always"}`, nil, 400, wire.CodeInvalid, "restart"},
		{"service not started", "POST", base + "/services", `{"argv": ["no-such-command"]}`, nil, 400, wire.CodeInvalid, "no-such-command"},
		{"unknown service logs", "GET", base + "/services/nope/logs", ``, nil, 404, wire.CodeNotFound, "nope"},
		{"unknown service stop", "POST", base + "/services/nope/stop", ``, nil, 404, wire.CodeNotFound, "nope"},
		{"service bad grace", "POST", base + "/services/nope/stop", `{"grace_ms": -1}`, nil, 400, wire.CodeInvalid, "grace_ms"},
		{"service logs bad follow", "GET", base + "/services/nope/logs?follow=maybe", ``, nil, 400, wire.CodeInvalid, "follow"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var body io.Reader
			if c.body != "" {
				body = strings.NewReader(c.body)
			}
			r := h.do(c.method, c.path, body, c.hdr...)
			e := r.err(t)
			if r.status != c.status || e.Code != c.code || !strings.Contains(e.Message, c.msg) {
				t.Errorf("got %d %s %q, want %d %s containing %q", r.status, e.Code, e.Message, c.status, c.code, c.msg)
			}
			if r.header.Get("Content-Type") != "application/json" {
				t.Errorf("content type %q", r.header.Get("Content-Type"))
			}
		})
	}
	assert.Equal(t, before, h.state(), "bad requests changed the engine's state")
	if r := h.do("GET", base+"/files/keep.txt", nil); string(r.body) != "keep" {
		t.Errorf("keep.txt = %q", r.body)
	}
}

// zeros is a long stream (a prefix, then fill bytes) that allocates
// nothing per byte.
// The transport may still be reading it when the test looks at sent.
type zeros struct {
	prefix []byte
	fill   byte
	max    int64
	sent   atomic.Int64
}

func (z *zeros) Read(p []byte) (int, error) {
	done := z.sent.Load()
	if done >= z.max {
		return 0, io.EOF
	}
	n := min(int64(len(p)), z.max-done)
	for i := range p[:n] {
		if done+int64(i) < int64(len(z.prefix)) {
			p[i] = z.prefix[done+int64(i)]
		} else {
			p[i] = z.fill
		}
	}
	z.sent.Add(n)
	return int(n), nil
}

// TestBodyLimits sends 2 GiB bodies; each is refused with 413 after at most
// the limit was read, and nothing is stored.
func TestBodyLimits(t *testing.T) {
	h := newHarness(t, enginetest.Shared(t), api.Options{MaxUpload: 4 << 20})
	ws := h.setup()
	base := "/v1/workspaces/" + ws.ID
	before := h.state()
	const twoGiB = 2 << 30

	send := func(method, path string, z *zeros, length int64) response {
		t.Helper()
		req, err := http.NewRequest(method, h.url+path, z)
		require.NoError(t, err)
		req.ContentLength = length // -1: chunked, the server cannot know up front
		resp, err := h.hc.Do(req)
		require.NoError(t, err, "%s %s", method, path)
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return response{resp.StatusCode, resp.Header, b}
	}
	// A tar whose one file claims 2 GiB: the engine reads it whole before
	// extracting, so the cap stops it first.
	var th bytes.Buffer
	tw := tar.NewWriter(&th)
	tw.WriteHeader(&tar.Header{Name: "big", Typeflag: tar.TypeReg, Size: twoGiB - 1024, Mode: 0o644})
	jsonPrefix := []byte(`{"name": "`)
	for _, c := range []struct {
		name, method, path string
		prefix             []byte
		fill               byte
		length             int64
		maxRead            int64
	}{
		{"json with length", "POST", "/v1/projects", jsonPrefix, 'a', twoGiB, 64 << 20},
		{"json chunked", "POST", "/v1/projects", jsonPrefix, 'a', -1, 64 << 20},
		{"file with length", "PUT", base + "/files/big", nil, 0, twoGiB, 64 << 20},
		{"file chunked", "PUT", base + "/files/big", nil, 0, -1, 64 << 20},
		{"tar chunked", "PUT", base + "/tar", th.Bytes(), 0, -1, 64 << 20},
	} {
		t.Run(c.name, func(t *testing.T) {
			z := &zeros{prefix: c.prefix, fill: c.fill, max: twoGiB}
			r := send(c.method, c.path, z, c.length)
			e := r.err(t)
			if r.status != 413 || e.Code != wire.CodeTooLarge || !strings.Contains(e.Message, "limit") {
				t.Errorf("got %d %+v, want 413 too_large", r.status, e)
			}
			// The client stops sending when the server answers and closes;
			// what was read must be far below 2 GiB.
			if n := z.sent.Load(); n > c.maxRead {
				t.Errorf("client sent %d bytes before the refusal", n)
			}
		})
	}
	assert.Equal(t, before, h.state(), "a refused upload changed the engine's state")
	if r := h.do("GET", base+"/files/big", nil); r.status != 404 {
		t.Errorf("big exists after refused uploads: %d", r.status)
	}
}

func TestExecStream(t *testing.T) {
	h := newHarness(t, enginetest.Shared(t), api.Options{})
	ws := h.setup()
	body := `{"body": "for i in 0 1 2 3 4; do echo line $i; sleep 0.1; done"}`
	req, _ := http.NewRequest("POST", h.url+"/v1/workspaces/"+ws.ID+"/execs", strings.NewReader(body))
	req.Header.Set("Accept", "application/x-ndjson")
	start := time.Now()
	resp, err := h.hc.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != wire.MediaNDJSON {
		t.Fatalf("status %d, content type %q", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	sc := bufio.NewScanner(resp.Body)
	var lines []string
	var firstAt time.Duration
	var result *wire.ExecResult
	for sc.Scan() {
		var ev wire.ExecEvent
		require.NoError(t, json.Unmarshal(sc.Bytes(), &ev), "event %q", sc.Text())
		if ev.Stream == "stdout" {
			if lines == nil {
				firstAt = time.Since(start)
			}
			lines = append(lines, string(ev.Data))
		}
		if ev.Result != nil {
			result = ev.Result
		}
	}
	total := time.Since(start)
	if len(lines) != 5 || lines[4] != "line 4\n" || result == nil || result.ExitCode != 0 {
		t.Fatalf("lines %q, result %+v", lines, result)
	}
	if len(result.Stdout) != 0 {
		t.Errorf("streamed result repeats stdout: %q", result.Stdout)
	}
	// The first line arrives while the command still runs (5 x 100 ms).
	if firstAt > total-300*time.Millisecond {
		t.Errorf("first line after %v of %v: output was not streamed", firstAt, total)
	}

	// An exec the engine refuses before any output is a plain JSON error.
	r := h.do("POST", "/v1/workspaces/ws-ffff/execs", strings.NewReader(`{"body": "echo"}`), "Accept", wire.MediaNDJSON)
	if r.status != 404 || r.err(t).Code != wire.CodeNotFound {
		t.Errorf("unknown workspace streamed: %d %s", r.status, r.body)
	}
}

func TestOutputCap(t *testing.T) {
	h := newHarness(t, enginetest.Shared(t), api.Options{MaxExecOutput: 10})
	ws := h.setup()
	var res wire.ExecResult
	h.json("POST", "/v1/workspaces/"+ws.ID+"/execs", wire.ExecRequest{Argv: []string{"echo", "0123456789abcdef"}}, 200, &res)
	if string(res.Stdout) != "0123456789" || !res.OutputTruncated {
		t.Errorf("stdout %q truncated %v", res.Stdout, res.OutputTruncated)
	}
}

func TestToken(t *testing.T) {
	srv := api.NewServer(enginetest.Shared(t), api.Options{})
	hs := httptest.NewServer(srv.Handler(api.ListenerOptions{Token: "s3cret"}))
	defer hs.Close()
	for _, c := range []struct {
		auth   string
		status int
	}{
		{"", 401}, {"Bearer wrong", 401}, {"Bearer s3cre", 401}, {"s3cret", 401}, {"Basic s3cret", 401},
		{"Bearer s3cret", 200},
	} {
		req, _ := http.NewRequest("GET", hs.URL+"/v1/projects", nil)
		if c.auth != "" {
			req.Header.Set("Authorization", c.auth)
		}
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		assert.Equal(t, c.status, resp.StatusCode, "Authorization %q", c.auth)
		if c.status == 401 && (!strings.Contains(string(b), wire.CodeUnauth) || resp.Header.Get("WWW-Authenticate") == "") {
			t.Errorf("401 body %q, headers %v", b, resp.Header)
		}
	}
}

// TestDrain: draining refuses new work, keeps reads, lets running execs
// finish, and Abort ends what is left: the engine kills the command and the
// exec is answered as unavailable.
func TestDrain(t *testing.T) {
	eng := enginetest.Shared(t)
	h := newHarness(t, eng, api.Options{})
	ws := h.setup()
	base := "/v1/workspaces/" + ws.ID
	done := make(chan response, 2)
	go func() {
		done <- h.do("POST", base+"/execs", strings.NewReader(`{"argv": ["sleep", "0.3"]}`))
	}()
	waitFor(t, func() bool { return eng.Running() == 1 })
	if n := h.srv.RunningExecs(); n != 1 {
		t.Errorf("RunningExecs = %d", n)
	}
	h.srv.Drain()
	if r := h.do("POST", base+"/execs", strings.NewReader(`{"body": "echo"}`)); r.status != 503 || r.err(t).Code != wire.CodeUnavailable {
		t.Errorf("exec while draining: %d %s", r.status, r.body)
	}
	if r := h.do("GET", base, nil); r.status != 200 {
		t.Errorf("read while draining: %d", r.status)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	require.NoError(t, h.srv.WaitIdle(ctx))
	if r := <-done; r.status != 200 {
		t.Errorf("running exec after drain: %d %s", r.status, r.body)
	}

	// Abort cancels a running exec whose grace period ran out.
	h2 := newHarness(t, eng, api.Options{})
	h2.project += "-abort"
	ws2 := h2.setup()
	go func() {
		done <- h2.do("POST", "/v1/workspaces/"+ws2.ID+"/execs", strings.NewReader(`{"argv": ["sleep", "60"]}`))
	}()
	waitFor(t, func() bool { return eng.Running() == 1 })
	h2.srv.Drain()
	short, cancel2 := context.WithTimeout(t.Context(), 50*time.Millisecond)
	defer cancel2()
	assert.ErrorIs(t, h2.srv.WaitIdle(short), context.DeadlineExceeded, "WaitIdle with a running exec")
	h2.srv.Abort()
	select {
	case r := <-done:
		if r.status != 503 || r.err(t).Code != wire.CodeUnavailable {
			t.Errorf("aborted exec: %d %s", r.status, r.body)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Abort did not end the exec")
	}
	waitFor(t, func() bool { return eng.Running() == 0 })
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		if cond() {
			return
		}
	}
	t.Fatal("condition not reached in 5s")
}

// failing returns a configured error from Projects, the rest from the
// real engine.
type failing struct {
	api.Engine
	err error
}

func (f failing) Projects(ctx context.Context) ([]wire.Project, error) { return nil, f.err }

func TestErrorMapping(t *testing.T) {
	for _, c := range []struct {
		err    error
		status int
		code   string
	}{
		{fmt.Errorf("x: %w", errclass.NotFound), 404, wire.CodeNotFound},
		{fmt.Errorf("x: %w", errclass.Exists), 409, wire.CodeExists},
		{fmt.Errorf("x: %w", errclass.HeadMoved), 409, wire.CodeHeadMoved},
		{fmt.Errorf("x: %w", errclass.Uncommitted), 409, wire.CodeUncommitted},
		{fmt.Errorf("x: %w", errclass.Busy), 409, wire.CodeBusy},
		{fmt.Errorf("x: %w", errclass.Invalid), 400, wire.CodeInvalid},
		{fmt.Errorf("x: %w", errclass.Unavailable), 503, wire.CodeUnavailable},
		{fmt.Errorf("name %q: %w", "X", errclass.New(errclass.Invalid, "invalid name")), 400, wire.CodeInvalid},
		{fmt.Errorf("%w: delete branch: workspace %s stands on it", errclass.Busy, "ws-1"), 409, wire.CodeBusy},
		// The class wrapped first counts, whatever the cause's class.
		{fmt.Errorf("%w: base: %w", errclass.Invalid, fmt.Errorf("branch x: %w", errclass.NotFound)), 400, wire.CodeInvalid},
		{fmt.Errorf("read chunk: %w", errclass.New(errclass.Corrupt, "corrupt object")), 500, wire.CodeCorrupt},
		{fmt.Errorf("exec: %w", context.Canceled), 503, wire.CodeUnavailable},
		{errors.New("disk on fire at /secret/path"), 500, wire.CodeInternal},
		{&os.PathError{Op: "write", Path: "/secret/pack", Err: syscall.ENOSPC}, 507, wire.CodeNoSpace},
	} {
		h := newHarness(t, failing{enginetest.Shared(t), c.err}, api.Options{})
		r := h.do("GET", "/v1/projects", nil)
		e := r.err(t)
		if r.status != c.status || e.Code != c.code {
			t.Errorf("%v: got %d %s, want %d %s", c.err, r.status, e.Code, c.status, c.code)
		}
		assert.NotContains(t, e.Message, "secret", "message leaks a host path")
		if c.code != wire.CodeInternal && c.code != wire.CodeNoSpace && !strings.Contains(e.Message, c.err.Error()) {
			t.Errorf("message %q lacks the error's own %q", e.Message, c.err.Error())
		}
		if c.code == wire.CodeInternal && (strings.Contains(e.Message, "secret") || !strings.Contains(e.Message, r.header.Get("X-Request-Id"))) {
			t.Errorf("500 message %q leaks or lacks the request id", e.Message)
		}
	}
}

func TestIdle(t *testing.T) {
	now := time.Unix(1000, 0)
	clock := func() time.Time { return now }
	h := newHarness(t, enginetest.Shared(t), api.Options{Now: clock})
	now = now.Add(time.Minute)
	if d := h.srv.Idle(); d != time.Minute {
		t.Errorf("Idle = %v, want 1m", d)
	}
	h.do("GET", "/v1/version", nil)
	now = now.Add(time.Second)
	if d := h.srv.Idle(); d != time.Second {
		t.Errorf("Idle after a request = %v, want 1s", d)
	}
}

// TestContract runs the contract suite against the real engine, with its
// workspaces on each data path.
func TestContract(t *testing.T) {
	t.Run(wire.DataPathOverlay, func(t *testing.T) { apitest.Run(t, apitest.Target{Engine: enginetest.Shared(t)}) })
	t.Run(wire.DataPathFUSE, func(t *testing.T) {
		apitest.Run(t, apitest.Target{Engine: enginetest.NewWith(t, enginetest.Config{DataPath: wire.DataPathFUSE})})
	})
}

// TestContractFleet runs the suite against the real engine on a shared
// Store (PostgreSQL and S3) as one host of two: its misdirected answers
// name the other host, which serves the workspace.
func TestContractFleet(t *testing.T) {
	url := testenv.StoreURL(t)
	a := enginetest.NewWith(t, enginetest.Config{StoreURL: url})
	b := enginetest.NewWith(t, enginetest.Config{StoreURL: url})
	apitest.Run(t, apitest.Target{Engine: b, Misdirect: func(t *testing.T) (string, wire.Node) {
		const addr = "tcp://192.0.2.10:7070" // as a's daemon would advertise it
		ctx := t.Context()
		require.NoError(t, a.Store.Heartbeat(ctx, addr))
		_, err := a.CreateProject(ctx, wire.CreateProject{Name: "served-by-a"})
		require.NoError(t, err)
		ws, err := a.CreateWorkspace(ctx, wire.WorkspaceSpec{Project: "served-by-a", Branch: "main"})
		require.NoError(t, err)
		return ws.ID, wire.Node{Name: a.Store.Node(), Address: addr, Live: true}
	}})
}

// TestContractElsewhere runs it against apitest.Elsewhere over the real
// engine, the double the SDK's fleet test uses: it passes every call but
// those on the workspaces it is told another host serves to the engine,
// and answers those as misdirected.
func TestContractElsewhere(t *testing.T) {
	e := apitest.NewElsewhere(enginetest.Shared(t))
	apitest.Run(t, apitest.Target{Engine: e, Misdirect: func(t *testing.T) (string, wire.Node) {
		host := wire.Node{Name: "host-b", Address: "tcp://192.0.2.7:7070", Live: true}
		e.Serve("ws-e15e3e4e7e00", host)
		return "ws-e15e3e4e7e00", host
	}})
}

// testImageRoutes walks the image routes: import from a host directory,
// list, inspect (by name and pinned), a project's default, push to a
// registry, commit of a workspace without an image (refused), remove.
func testImageRoutes(t *testing.T, h *harness, ws, hostDir string) {
	var res wire.ImageResult
	h.json("POST", "/v1/images", wire.ImageImport{Name: "team/env:1", Kind: wire.ImageFromDir, Source: hostDir}, 201, &res)
	if res.Image.Name != "team/env:1" || len(res.Image.Layers) != 1 || res.Stats.LayersRead != 1 {
		t.Fatalf("import = %+v", res)
	}
	var imgs []wire.Image
	h.json("GET", "/v1/images", nil, 200, &imgs)
	var img wire.Image
	h.json("GET", "/v1/images/team/env:1@"+res.Image.Digest, nil, 200, &img)
	if len(imgs) != 1 || img.Digest != res.Image.Digest {
		t.Errorf("images = %+v, image = %+v", imgs, img)
	}
	h.json("GET", "/v1/images/team/none:1", nil, 404, nil)
	h.json("GET", "/v1/images/Bad", nil, 400, nil)
	h.json("POST", "/v1/images", wire.ImageImport{Name: "x", Kind: "floppy", Source: hostDir}, 400, nil)
	var p wire.Project
	h.json("PUT", "/v1/projects/p/image", wire.ProjectImage{Image: "team/env:1"}, 200, &p)
	if p.Image != "team/env:1" {
		t.Errorf("project = %+v", p)
	}
	h.json("PUT", "/v1/projects/p/image", wire.ProjectImage{}, 200, &p)
	srv := httptest.NewServer(registry.New(registry.Logger(log.New(io.Discard, "", 0))))
	defer srv.Close()
	h.json("POST", "/v1/images/push", wire.ImagePush{Name: "team/env:1", Ref: strings.TrimPrefix(srv.URL, "http://") + "/team/env:1"}, 200, &res)
	if !strings.Contains(res.Pushed, "@sha256:") {
		t.Errorf("push = %+v", res)
	}
	h.json("POST", ws+"/image", wire.ImageCommit{Name: "team/env:2"}, 400, nil)
	if r := h.do("DELETE", "/v1/images/team/env:1", nil); r.status != 204 {
		t.Errorf("remove image: %d %s", r.status, r.body)
	}
	h.json("DELETE", "/v1/images/team/env:1", nil, 404, nil)
}
