package mcpserver_test

import (
	"context"
	"encoding/json"
	"github.com/google/go-containerregistry/pkg/registry"
	"io"
	"layerfs.dev/layerfs/internal/enginetest"
	"layerfs.dev/layerfs/wire"
	"log"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"layerfs.dev/layerfs/client"
	"layerfs.dev/layerfs/internal/daemontest"
	"layerfs.dev/layerfs/internal/mcpserver"
)

// allTools is every tool the server offers, in the order docs/mcp.md lists them.
var allTools = []string{"project_create", "project_list", "workspace_create", "workspace_list", "checkout",
	"exec", "read_file", "write_file", "list_dir", "stat", "diff", "commit", "update", "resolve", "merge",
	"fork", "fork_workspace", "log", "workspace_end", "image_list", "image_pull", "image_commit", "workspace_network", "watch",
	"service_start", "service_list", "service_logs", "service_stop", "service_wait"}

func newServer(t *testing.T, d *daemontest.Daemon) *mcpserver.Server {
	t.Helper()
	srv, err := mcpserver.New(mcpserver.Config{
		Dial:      func(ctx context.Context) (*client.Client, error) { return client.Dial(ctx, d.Addr()) },
		Version:   "test",
		MaxOutput: 1024,
	})
	require.NoError(t, err)
	return srv
}

// connect runs a session of the Go SDK's client against srv in process.
func connect(t *testing.T, srv *mcpserver.Server) *mcp.ClientSession {
	t.Helper()
	return connectWith(t, srv, nil)
}

func connectWith(t *testing.T, srv *mcpserver.Server, opts *mcp.ClientOptions) *mcp.ClientSession {
	t.Helper()
	ctx := t.Context()
	st, ct := mcp.NewInMemoryTransports()
	ss, err := srv.MCP().Connect(ctx, st, nil)
	require.NoError(t, err)
	t.Cleanup(func() { ss.Close() })
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "go-test", Version: "v0"}, opts).Connect(ctx, ct, nil)
	require.NoError(t, err)
	t.Cleanup(func() { cs.Close() })
	return cs
}

// session calls tools and decodes their structured results.
type session struct {
	t  *testing.T
	cs *mcp.ClientSession
}

// call calls a tool and returns its result, failing the test on a
// protocol error (a tool error is a result).
func (s session) call(name string, args map[string]any) *mcp.CallToolResult {
	s.t.Helper()
	ctx, cancel := context.WithTimeout(s.t.Context(), 2*time.Minute)
	defer cancel()
	res, err := s.cs.CallTool(ctx, &mcp.CallToolParams{Name: name, Arguments: args})
	require.NoError(s.t, err, "%s: protocol", name)
	return res
}

// ok calls a tool that must succeed and decodes its output into out.
func (s session) ok(out any, name string, args map[string]any) {
	s.t.Helper()
	res := s.call(name, args)
	if res.IsError {
		s.t.Fatalf("%s(%v): tool error %s", name, args, text(res))
	}
	b, err := json.Marshal(res.StructuredContent)
	require.NoError(s.t, err)
	require.NoError(s.t, json.Unmarshal(b, out), "%s: decode %s", name, b)
}

// refused calls a tool that must fail with a message containing want.
func (s session) refused(want, name string, args map[string]any) {
	s.t.Helper()
	res := s.call(name, args)
	if !res.IsError || !strings.Contains(text(res), want) {
		s.t.Errorf("%s(%v) = error %v %q, want a tool error containing %q", name, args, res.IsError, text(res), want)
	}
}

func text(res *mcp.CallToolResult) string {
	var parts []string
	for _, c := range res.Content {
		if tc, ok := c.(*mcp.TextContent); ok {
			parts = append(parts, tc.Text)
		}
	}
	return strings.Join(parts, "\n")
}

// TestSession is the session through the Go SDK's client against a
// real layerfsd: every tool, a resource, and bad input that changes nothing.
func TestSession(t *testing.T) {
	d := daemontest.Start(t)
	cs := connect(t, newServer(t, d))
	s := session{t, cs}
	ctx := t.Context()

	tools, err := cs.ListTools(ctx, nil)
	require.NoError(t, err)
	var names []string
	for _, tool := range tools.Tools {
		names = append(names, tool.Name)
		if len(tool.Description) < 40 || tool.InputSchema == nil || tool.OutputSchema == nil {
			t.Errorf("tool %s: description %q, schemas %v %v", tool.Name, tool.Description, tool.InputSchema, tool.OutputSchema)
		}
	}
	slices.Sort(names)
	want := slices.Sorted(slices.Values(allTools))
	if !slices.Equal(names, want) {
		t.Errorf("tools = %q, want %q", names, want)
	}

	var proj struct{ Name string }
	s.ok(&proj, "project_create", map[string]any{"name": "demo"})
	var ws struct{ ID, Branch, Base string }
	s.ok(&ws, "workspace_create", map[string]any{"project": "demo"})
	if ws.ID == "" || ws.Branch != "main" {
		t.Fatalf("workspace_create = %+v", ws)
	}
	var wrote struct{ Size int }
	s.ok(&wrote, "write_file", map[string]any{"workspace": ws.ID, "path": "src/hello.txt", "content": "hello, agent\n"})
	var ex struct {
		ExitCode        int    `json:"exit_code"`
		Stdout          string `json:"stdout"`
		StdoutTruncated bool   `json:"stdout_truncated"`
		Receipt         struct {
			WallMs float64 `json:"wall_ms"`
		} `json:"receipt"`
	}
	s.ok(&ex, "exec", map[string]any{"workspace": ws.ID, "command": "cat src/hello.txt"})
	if ex.ExitCode != 0 || ex.Stdout != "hello, agent\n" || ex.Receipt.WallMs <= 0 {
		t.Errorf("exec cat = %+v", ex)
	}
	s.ok(&ex, "exec", map[string]any{"workspace": ws.ID, "argv": []string{"sh", "-c", "exit 3"}})
	if ex.ExitCode != 3 {
		t.Errorf("exit 3 = %+v", ex)
	}
	// Past MaxOutput the middle is cut: the head and the tail survive.
	s.ok(&ex, "exec", map[string]any{"workspace": ws.ID, "command": "echo first; head -c 100000 /dev/zero | tr '\\0' x; echo; echo last"})
	if !ex.StdoutTruncated || !strings.HasPrefix(ex.Stdout, "first\n") || !strings.HasSuffix(ex.Stdout, "last\n") || len(ex.Stdout) > 1100 {
		t.Errorf("long output: truncated %v, %d bytes, %q...", ex.StdoutTruncated, len(ex.Stdout), ex.Stdout[:min(40, len(ex.Stdout))])
	}
	var read struct {
		Content, Encoding string
		Size              int64
		Truncated         bool
	}
	s.ok(&read, "read_file", map[string]any{"workspace": ws.ID, "path": "src/hello.txt"})
	if read.Content != "hello, agent\n" || read.Encoding != "utf-8" || read.Truncated {
		t.Errorf("read_file = %+v", read)
	}
	s.ok(&read, "read_file", map[string]any{"workspace": ws.ID, "path": "src/hello.txt", "max_bytes": 5})
	if read.Content != "hello" || !read.Truncated || read.Size != 13 {
		t.Errorf("read_file max_bytes 5 = %+v", read)
	}
	s.ok(&wrote, "write_file", map[string]any{"workspace": ws.ID, "path": "bin.dat", "content": "AAEC/w==", "encoding": "base64"})
	s.ok(&read, "read_file", map[string]any{"workspace": ws.ID, "path": "bin.dat"})
	if read.Encoding != "base64" || read.Content != "AAEC/w==" {
		t.Errorf("binary read_file = %+v", read)
	}
	var list struct {
		Entries []struct{ Path, Type string }
	}
	s.ok(&list, "list_dir", map[string]any{"workspace": ws.ID, "recursive": true})
	if len(list.Entries) != 3 || list.Entries[1].Path != "src" || list.Entries[1].Type != "dir" {
		t.Errorf("list_dir = %+v", list)
	}
	var st struct{ Type, Mode string }
	s.ok(&st, "stat", map[string]any{"workspace": ws.ID, "path": "src/hello.txt"})
	if st.Type != "file" || st.Mode != "0644" {
		t.Errorf("stat = %+v", st)
	}
	var diff struct {
		Changes []struct{ Path, Kind string }
	}
	s.ok(&diff, "diff", map[string]any{"workspace": ws.ID})
	if len(diff.Changes) == 0 {
		t.Errorf("workspace diff is empty")
	}

	// The resource of a file, and of a directory.
	rr, err := cs.ReadResource(ctx, &mcp.ReadResourceParams{URI: mcpserver.FileURI(ws.ID, "src/hello.txt")})
	if err != nil || len(rr.Contents) != 1 || rr.Contents[0].Text != "hello, agent\n" {
		t.Errorf("resource: %+v %v", rr, err)
	}
	rr, err = cs.ReadResource(ctx, &mcp.ReadResourceParams{URI: mcpserver.FileURI(ws.ID, "src")})
	if err != nil || len(rr.Contents) != 1 || rr.Contents[0].Text != "hello.txt\n" {
		t.Errorf("directory resource: %+v %v", rr, err)
	}
	_, err = cs.ReadResource(ctx, &mcp.ReadResourceParams{URI: mcpserver.FileURI(ws.ID, "missing")})
	assert.Error(t, err, "a missing file's resource was read")

	var cm struct{ Result, Commit string }
	s.ok(&cm, "commit", map[string]any{"workspace": ws.ID, "message": "hello"})
	if cm.Result != "created" || cm.Commit == "" {
		t.Fatalf("commit = %+v", cm)
	}
	s.ok(&cm, "commit", map[string]any{"workspace": ws.ID, "message": "again"})
	if cm.Result != "up-to-date" {
		t.Errorf("second commit = %+v", cm)
	}
	var br struct{ Name, Head string }
	s.ok(&br, "fork", map[string]any{"project": "demo", "name": "try", "from": "main"})
	if br.Name != "try" || br.Head == "" {
		t.Errorf("fork = %+v", br)
	}
	s.ok(&diff, "diff", map[string]any{"project": "demo", "from": "layer:1", "to": "try"})
	var paths []string
	for _, ch := range diff.Changes {
		paths = append(paths, ch.Kind+" "+ch.Path)
	}
	if !slices.Contains(paths, "added src/hello.txt") {
		t.Errorf("diff layer:1 try = %q", paths)
	}
	var log struct {
		Commits []struct{ ID, Message string }
	}
	s.ok(&log, "log", map[string]any{"project": "demo", "ref": "try"})
	if len(log.Commits) != 2 || log.Commits[0].Message != "hello" {
		t.Errorf("log = %+v", log)
	}
	var co struct{ ID, Branch string }
	s.ok(&co, "checkout", map[string]any{"project": "demo", "ref": "try"})
	if co.Branch != "try" {
		t.Errorf("checkout try = %+v", co)
	}
	var wl struct {
		Workspaces []struct{ ID string }
	}
	s.ok(&wl, "workspace_list", nil)
	if len(wl.Workspaces) != 2 {
		t.Errorf("workspace_list = %+v", wl)
	}

	// Bad input: tool errors a model can act on, and nothing changes.
	before := snapshot(t, s, ws.ID)
	s.refused("..", "write_file", map[string]any{"workspace": ws.ID, "path": "../escape", "content": "x"})
	// A leading "/" is the workspace root (wire.WorkspacePath): this is the
	// workspace's own etc/passwd, which it does not have.
	s.refused("not_found", "read_file", map[string]any{"workspace": ws.ID, "path": "/etc/passwd"})
	s.refused("..", "read_file", map[string]any{"workspace": ws.ID, "path": "/../etc/passwd"})
	s.refused("not_found", "read_file", map[string]any{"workspace": ws.ID, "path": "nope.txt"})
	s.refused("not a file", "read_file", map[string]any{"workspace": ws.ID, "path": "src"})
	s.refused("..", "list_dir", map[string]any{"workspace": ws.ID, "path": "src/../.."})
	s.refused("not_found", "exec", map[string]any{"workspace": "no-such-ws", "command": "true"})
	s.refused("..", "exec", map[string]any{"workspace": "../../etc", "command": "true"})
	s.refused("workspace id", "exec", map[string]any{"workspace": "UPPER", "command": "true"})
	s.refused("exactly one of command", "exec", map[string]any{"workspace": ws.ID})
	s.refused("timeout_seconds", "exec", map[string]any{"workspace": ws.ID, "command": "true", "timeout_seconds": "soon"})
	s.refused("base64", "write_file", map[string]any{"workspace": ws.ID, "path": "x", "content": "%%%", "encoding": "base64"})
	s.refused("mode", "write_file", map[string]any{"workspace": ws.ID, "path": "x", "content": "", "mode": "rwx"})
	s.refused("not a valid name", "fork", map[string]any{"project": "demo", "name": "../evil", "from": "main"})
	s.refused("already_exists", "fork", map[string]any{"project": "demo", "name": "try", "from": "main"})
	s.refused("not_found", "fork", map[string]any{"project": "demo", "name": "other", "from": "nosuchref"})
	s.refused("give workspace", "diff", map[string]any{"project": "demo"})
	s.refused("limit must be from 1 to 200", "log", map[string]any{"project": "demo", "limit": 1000})
	s.refused("max_bytes must be", "read_file", map[string]any{"workspace": ws.ID, "path": "src/hello.txt", "max_bytes": -1})
	s.refused("required", "project_create", map[string]any{})
	s.refused("workspace", "commit", map[string]any{"message": "m"})
	if after := snapshot(t, s, ws.ID); after != before {
		t.Errorf("bad input changed the Store:\nbefore %s\nafter  %s", before, after)
	}

	// End refuses to drop uncommitted work unless asked.
	s.ok(&wrote, "write_file", map[string]any{"workspace": ws.ID, "path": "draft.txt", "content": "unsaved"})
	s.refused("discard", "workspace_end", map[string]any{"workspace": ws.ID})
	var end struct{ Ended string }
	s.ok(&end, "workspace_end", map[string]any{"workspace": ws.ID, "discard": true})
	s.ok(&end, "workspace_end", map[string]any{"workspace": co.ID})
	s.refused("not_found", "workspace_end", map[string]any{"workspace": ws.ID})
}

// TestExecProgress: a call with a progress token gets the output as
// progress notifications before the result.
func TestExecProgress(t *testing.T) {
	d := daemontest.Start(t)
	var mu sync.Mutex
	var streamed strings.Builder
	arrived := make(chan struct{}, 1)
	cs := connectWith(t, newServer(t, d), &mcp.ClientOptions{
		ProgressNotificationHandler: func(_ context.Context, req *mcp.ProgressNotificationClientRequest) {
			mu.Lock()
			defer mu.Unlock()
			streamed.WriteString(req.Params.Message)
			select {
			case arrived <- struct{}{}:
			default: // a wake-up is already pending
			}
		},
	})
	s := session{t, cs}
	var proj, ws struct{ ID string }
	s.ok(&proj, "project_create", map[string]any{"name": "p"})
	s.ok(&ws, "workspace_create", map[string]any{"project": "p"})
	params := &mcp.CallToolParams{Name: "exec", Arguments: map[string]any{"workspace": ws.ID, "command": "echo one; echo two >&2; echo three"}}
	params.SetProgressToken("exec-1")
	res, err := cs.CallTool(t.Context(), params)
	if err != nil || res.IsError {
		t.Fatalf("exec: %v %s", err, text(res))
	}
	// Notifications may be handled after the result: wait for them (bounded).
	complete := func() (string, bool) {
		mu.Lock()
		defer mu.Unlock()
		got := streamed.String()
		return got, strings.Contains(got, "one\n") && strings.Contains(got, "two\n") && strings.Contains(got, "three\n")
	}
	deadline := time.After(time.Minute)
	for {
		got, ok := complete()
		if ok {
			return
		}
		select {
		case <-arrived:
		case <-deadline:
			t.Fatalf("progress messages %q lack some of one, two, three", got)
		}
	}
}

// TestWatchTool: a watch opened by one call reports, on the next, the
// changes a command made meanwhile, and ends with the workspace.
func TestWatchTool(t *testing.T) {
	d := daemontest.Start(t)
	s := session{t, connect(t, newServer(t, d))}
	var proj, ws struct{ ID string }
	s.ok(&proj, "project_create", map[string]any{"name": "w"})
	s.ok(&ws, "workspace_create", map[string]any{"project": "w"})
	type watchResult struct {
		WatchID string `json:"watch_id"`
		Events  []struct{ Kind, Path, Type string }
		Dropped int64
		Ended   bool
	}
	var w watchResult
	s.ok(&w, "watch", map[string]any{"workspace": ws.ID})
	if w.WatchID == "" || len(w.Events) != 0 {
		t.Fatalf("open = %+v", w)
	}
	var ex struct {
		ExitCode int `json:"exit_code"`
	}
	s.ok(&ex, "exec", map[string]any{"workspace": ws.ID, "command": "mkdir out && echo done > out/result.txt"})
	seen := map[string]string{}
	for !strings.Contains(seen["out/result.txt"], "file") {
		s.ok(&w, "watch", map[string]any{"watch_id": w.WatchID, "timeout_seconds": 60})
		if w.Ended || (len(w.Events) == 0 && w.Dropped == 0) {
			t.Fatalf("poll = %+v, seen %v", w, seen)
		}
		for _, ev := range w.Events {
			seen[ev.Path] = ev.Kind + " " + ev.Type
		}
	}
	if seen["out"] != "created dir" {
		t.Errorf("seen = %v", seen)
	}
	s.refused("not_found", "watch", map[string]any{"watch_id": "w999"})
	s.refused("not_found", "watch", map[string]any{"workspace": ws.ID, "prefix": "missing"})
	var end struct{ Ended string }
	s.ok(&end, "workspace_end", map[string]any{"workspace": ws.ID, "discard": true})
	for !w.Ended {
		s.ok(&w, "watch", map[string]any{"watch_id": w.WatchID, "timeout_seconds": 60})
		if !w.Ended && len(w.Events) == 0 {
			t.Fatalf("the watch did not end with the workspace: %+v", w)
		}
	}
	s.refused("not_found", "watch", map[string]any{"watch_id": w.WatchID})
}

// TestNetworkTool: a workspace opened with egress rules, its network
// changed by workspace_network, a bad change refused with the network kept.
func TestNetworkTool(t *testing.T) {
	d := daemontest.Start(t)
	s := session{t, connect(t, newServer(t, d))}
	var proj, ws struct{ ID string }
	s.ok(&proj, "project_create", map[string]any{"name": "n"})
	s.ok(&ws, "workspace_create", map[string]any{"project": "n", "network": "egress", "allow": []string{"pypi.org:443", "*.pythonhosted.org:443"}})
	var net struct {
		Network string
		Allow   []string
	}
	s.refused("invalid", "workspace_network", map[string]any{"workspace": ws.ID, "mode": "egress", "allow": []string{"0.0.0.0/0"}})
	s.ok(&net, "workspace_network", map[string]any{"workspace": ws.ID, "mode": "egress", "allow": []string{"203.0.113.0/24:8000-8100"}})
	if net.Network != "egress" || len(net.Allow) != 1 || net.Allow[0] != "203.0.113.0/24:8000-8100" {
		t.Errorf("network = %+v", net)
	}
	net.Allow = nil
	s.ok(&net, "workspace_network", map[string]any{"workspace": ws.ID, "mode": "none"})
	if net.Network != "none" || len(net.Allow) != 0 {
		t.Errorf("network = %+v", net)
	}
}

// snapshot is what bad input must not change: branches' heads, logs,
// workspaces and the files of one.
func snapshot(t *testing.T, s session, id string) string {
	t.Helper()
	var out []string
	for _, ref := range []string{"main", "try"} {
		var log struct{ Commits []struct{ ID string } }
		s.ok(&log, "log", map[string]any{"project": "demo", "ref": ref})
		b, _ := json.Marshal(log)
		out = append(out, string(b))
	}
	var wl, list, projects any
	s.ok(&wl, "workspace_list", nil)
	s.ok(&list, "list_dir", map[string]any{"workspace": id, "recursive": true})
	s.ok(&projects, "project_list", nil)
	for _, v := range []any{wl, list, projects} {
		b, _ := json.Marshal(v)
		out = append(out, string(b))
	}
	return strings.Join(out, " ")
}

// TestHTTPToken: streamable HTTP serves a session with the bearer token and
// refuses requests without it.
func TestHTTPToken(t *testing.T) {
	d := daemontest.Start(t)
	srv := newServer(t, d)
	_, err := srv.Handler("")
	assert.Error(t, err, "a handler without a token was built")
	h, err := srv.Handler("s3cret-token")
	require.NoError(t, err)
	hs := httptest.NewServer(h)
	defer hs.Close()

	resp, err := http.Post(hs.URL, "application/json", strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"tools/list"}`))
	require.NoError(t, err)
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("no token: status %d", resp.StatusCode)
	}

	ctx := t.Context()
	for _, tc := range []struct {
		token string
		ok    bool
	}{{"wrong", false}, {"s3cret-token", true}} {
		hc := &http.Client{Transport: bearer{tc.token, http.DefaultTransport}}
		cs, err := mcp.NewClient(&mcp.Implementation{Name: "go-http-test", Version: "v0"}, nil).Connect(ctx,
			&mcp.StreamableClientTransport{Endpoint: hs.URL, HTTPClient: hc, MaxRetries: -1}, nil)
		if !tc.ok {
			if err == nil {
				cs.Close()
				t.Error("connected with a wrong token")
			}
			continue
		}
		require.NoError(t, err)
		s := session{t, cs}
		var wl struct{ Workspaces []any }
		s.ok(&wl, "workspace_list", nil)
		if wl.Workspaces == nil || len(wl.Workspaces) != 0 {
			t.Errorf("workspace_list over HTTP = %+v", wl)
		}
		cs.Close()
	}
}

type bearer struct {
	token string
	next  http.RoundTripper
}

func (b bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.token)
	return b.next.RoundTrip(r)
}

// TestImageTools: through the real MCP client, an image pulled from a
// registry (go-containerregistry's, in process) is listed, a workspace
// opened on it runs its commands in its root, and image_commit saves the
// root's changes as a new image.
func TestImageTools(t *testing.T) {
	d := daemontest.Start(t)
	s := session{t, connect(t, newServer(t, d))}
	ctx := t.Context()
	c, err := client.Dial(ctx, d.Addr())
	require.NoError(t, err)
	defer c.Close()
	_, err = c.ImportImage(ctx, wire.ImageImport{Name: "mcp/base:1", Kind: wire.ImageFromDir, Source: enginetest.MinimalRoot(t)})
	require.NoError(t, err)
	srv := httptest.NewServer(registry.New(registry.Logger(log.New(io.Discard, "", 0))))
	defer srv.Close()
	ref := strings.TrimPrefix(srv.URL, "http://") + "/mcp/base:1"
	_, err = c.PushImage(ctx, wire.ImagePush{Name: "mcp/base:1", Ref: ref})
	require.NoError(t, err)

	var pulled struct{ Name, Digest string }
	s.ok(&pulled, "image_pull", map[string]any{"ref": ref, "name": "mcp/pulled:1"})
	require.Equal(t, "mcp/pulled:1", pulled.Name)
	var list struct{ Images []struct{ Name string } }
	s.ok(&list, "image_list", map[string]any{})
	require.Len(t, list.Images, 2)
	var proj struct{ Name string }
	s.ok(&proj, "project_create", map[string]any{"name": "img"})
	var ws struct{ ID, Image string }
	s.ok(&ws, "workspace_create", map[string]any{"project": "img", "image": "mcp/pulled:1"})
	require.Equal(t, "mcp/pulled:1@"+pulled.Digest, ws.Image)
	var ex struct {
		Stdout string `json:"stdout"`
	}
	s.ok(&ex, "exec", map[string]any{"workspace": ws.ID, "command": "cat /etc/os-release; echo x > /etc/added"})
	require.Equal(t, "ID=minimal\n", ex.Stdout)
	var saved struct {
		Name   string
		Layers int
	}
	s.ok(&saved, "image_commit", map[string]any{"workspace": ws.ID, "name": "mcp/saved:1"})
	require.Equal(t, 2, saved.Layers)
	s.refused("required", "image_commit", map[string]any{"workspace": ws.ID})
}
