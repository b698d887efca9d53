package mcpserver_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
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

// gatedCommand prints three lines, waits for .cut (the test writes it once
// the connection is dropped), prints three more and touches .during-done,
// waits for .resumed (written once the client has resumed) and prints the
// rest: so some events are sent while the client is away and some after
// it came back.
const gatedCommand = `echo start; for i in 1 2 3; do echo before-$i; done
until [ -e .cut ]; do sleep 0.02; done
for i in 1 2 3; do echo during-$i; done; touch .during-done
until [ -e .resumed ]; do sleep 0.02; done
for i in 1 2 3; do echo after-$i; done; echo end`

const gatedOutput = "start\nbefore-1\nbefore-2\nbefore-3\nduring-1\nduring-2\nduring-3\nafter-1\nafter-2\nafter-3\nend\n"

// resumeRig is a session of the Go SDK's client with the server over real
// HTTP through a TCP proxy that can drop a connection, with a workspace,
// the daemon's own client on it (for the gates), and the client's
// transcript.
type resumeRig struct {
	t        *testing.T
	proxy    *cutProxy
	rec      *recorder
	cs       *mcp.ClientSession
	ws       *client.Workspace
	progress *progressLog
}

func newResumeRig(t *testing.T, cfg func(*mcpserver.Config)) *resumeRig {
	t.Helper()
	d := daemontest.Start(t)
	c := mcpserver.Config{
		Dial:    func(ctx context.Context) (*client.Client, error) { return client.Dial(ctx, d.Addr()) },
		Version: "test",
	}
	if cfg != nil {
		cfg(&c)
	}
	srv, err := mcpserver.New(c)
	require.NoError(t, err)
	h, err := srv.Handler("resume-token")
	require.NoError(t, err)
	hs := httptest.NewServer(h)
	t.Cleanup(hs.Close)
	proxy := newCutProxy(t, hs.Listener.Addr().String(), []byte("before-3"))

	rec := &recorder{next: bearer{"resume-token", &http.Transport{}}}
	progress := &progressLog{arrived: make(chan struct{}, 1)}
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "go-resume-test", Version: "v0"},
		&mcp.ClientOptions{ProgressNotificationHandler: progress.handle}).Connect(t.Context(),
		&mcp.StreamableClientTransport{Endpoint: proxy.URL(), HTTPClient: &http.Client{Transport: rec}}, nil)
	require.NoError(t, err)
	t.Cleanup(func() { cs.Close() })

	s := session{t, cs}
	var proj, ws struct{ ID string }
	s.ok(&proj, "project_create", map[string]any{"name": "resume"})
	s.ok(&ws, "workspace_create", map[string]any{"project": "resume"})
	dc, err := client.Dial(t.Context(), d.Addr())
	require.NoError(t, err)
	t.Cleanup(func() { dc.Close() })
	handle, err := dc.Workspace(t.Context(), ws.ID)
	require.NoError(t, err)
	rec.start() // the transcript starts with the exec
	return &resumeRig{t: t, proxy: proxy, rec: rec, cs: cs, ws: handle, progress: progress}
}

// execAsync calls exec with a progress token; the result arrives on the
// channel.
func (r *resumeRig) execAsync(command string) <-chan callResult {
	done := make(chan callResult, 1)
	go func() {
		ctx, cancel := context.WithTimeout(r.t.Context(), 3*time.Minute)
		defer cancel()
		params := &mcp.CallToolParams{Name: "exec", Arguments: map[string]any{"workspace": r.ws.ID(), "command": command, "timeout_seconds": 150}}
		params.SetProgressToken("exec-resume")
		res, err := r.cs.CallTool(ctx, params)
		done <- callResult{res, err}
	}()
	return done
}

type callResult struct {
	res *mcp.CallToolResult
	err error
}

// gate writes a file the gated command waits for.
func (r *resumeRig) gate(name string) {
	r.t.Helper()
	r.rec.note("test: writes " + name + " into the workspace")
	require.NoError(r.t, r.ws.WriteFile(r.t.Context(), name, nil, 0o644))
}

// waitFile waits until the command made a file.
func (r *resumeRig) waitFile(name string) {
	r.t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		if _, err := r.ws.Stat(r.t.Context(), name); err == nil {
			return
		}
		if time.Now().After(deadline) {
			r.t.Fatalf("the command made no %s in a minute\n%s", name, r.rec.transcript())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func (r *resumeRig) wait(ch <-chan struct{}, what string) {
	r.t.Helper()
	select {
	case <-ch:
	case <-time.After(time.Minute):
		r.t.Fatalf("%s did not happen in a minute\n%s", what, r.rec.transcript())
	}
}

// TestResumeExec: the connection of a long exec drops in the middle; the
// Go SDK's client resumes the stream with GET and Last-Event-ID, gets the
// events sent while it was away (replayed from the event store) and the
// ones after, each exactly once, and the exec's result.
func TestResumeExec(t *testing.T) {
	r := newResumeRig(t, nil)
	done := r.execAsync(gatedCommand)

	r.wait(r.proxy.cut, "the drop of the exec's connection")
	r.wait(r.rec.broke, "the client's sight of the drop")
	r.gate(".cut")
	r.waitFile(".during-done") // during-1..3 are sent while no connection is there
	r.proxy.releaseHeld()
	r.wait(r.rec.resumed, "a GET with Last-Event-ID")
	r.gate(".resumed")

	var got callResult
	select {
	case got = <-done:
	case <-time.After(3 * time.Minute):
		t.Fatalf("no exec result\n%s", r.rec.transcript())
	}
	t.Logf("transcript (the client's view):\n%s", r.rec.transcript())
	require.NoError(t, got.err)
	require.False(t, got.res.IsError, "exec: %s", text(got.res))
	var out struct {
		ExitCode int    `json:"exit_code"`
		Stdout   string `json:"stdout"`
	}
	b, _ := json.Marshal(got.res.StructuredContent)
	require.NoError(t, json.Unmarshal(b, &out))
	assert.Equal(t, 0, out.ExitCode)
	assert.Equal(t, gatedOutput, out.Stdout)

	// Every progress notification exactly once, in order: their messages
	// add up to the output, and their progress (bytes so far) grows.
	msgs, values := r.progress.wait(t, gatedOutput)
	assert.Equal(t, gatedOutput, strings.Join(msgs, ""))
	for i := 1; i < len(values); i++ {
		assert.Greater(t, values[i], values[i-1], "progress %d after %d: a notification came twice", values[i], values[i-1])
	}

	// On the wire: the exec's stream was cut once and resumed once, from
	// the last event the client had, and the events of both responses
	// are the stream's events 0..N, each once.
	ids := r.rec.eventIDs()
	require.NotEmpty(t, ids)
	stream, _, _ := strings.Cut(ids[0], "_")
	for i, id := range ids {
		assert.Equal(t, fmt.Sprintf("%s_%d", stream, i), id, "event %d", i)
	}
	resumes := r.rec.lastEventIDs()
	require.Len(t, resumes, 1)
	assert.Contains(t, ids, resumes[0])
	assert.Equal(t, 1, r.proxy.cuts())
}

// TestResumeExpired: a client that comes back after the events it missed
// are gone gets its call answered with an error that says so, not a
// silent gap, and its session goes on. The server's clock is moved past
// the events' age while the client is away.
func TestResumeExpired(t *testing.T) {
	clock := &fakeClock{now: time.Now()}
	r := newResumeRig(t, func(c *mcpserver.Config) { c.Now = clock.Now })
	done := r.execAsync(gatedCommand)

	r.wait(r.proxy.cut, "the drop of the exec's connection")
	r.wait(r.rec.broke, "the client's sight of the drop")
	r.gate(".cut")
	r.waitFile(".during-done")
	clock.advance(mcpserver.DefaultStreamMaxAge + time.Minute)
	r.proxy.releaseHeld()
	var got callResult
	select {
	case got = <-done:
	case <-time.After(time.Minute):
		t.Fatalf("no answer to the exec\n%s", r.rec.transcript())
	}
	t.Logf("transcript (the client's view):\n%s", r.rec.transcript())
	require.Error(t, got.err, "the exec was answered after its events expired")
	assert.Contains(t, got.err.Error(), "cannot resume from Last-Event-ID")
	assert.Contains(t, got.err.Error(), "events are kept for 10m0s")
	r.gate(".resumed") // let the command end
	var wl struct{ Workspaces []any }
	session{t, r.cs}.ok(&wl, "workspace_list", nil)
	assert.Len(t, wl.Workspaces, 1, "the session goes on")
}

// TestResumeRefused: resumptions by hand over HTTP. After the exec ended,
// a GET with Last-Event-ID replays the rest of its stream; an id the
// session never sent, a malformed one, another session's stream and a
// stream whose oldest events were dropped are refused with 400 and a
// reason; without the token, 401.
func TestResumeRefused(t *testing.T) {
	d := daemontest.Start(t)
	srv, err := mcpserver.New(mcpserver.Config{
		Dial:    func(ctx context.Context) (*client.Client, error) { return client.Dial(ctx, d.Addr()) },
		Streams: mcpserver.StreamLimits{MaxStreamBytes: 4 << 10},
	})
	require.NoError(t, err)
	h, err := srv.Handler("tok")
	require.NoError(t, err)
	hs := httptest.NewServer(h)
	defer hs.Close()
	a := newRawSession(t, hs.URL, "tok")
	b := newRawSession(t, hs.URL, "tok")

	var proj, ws struct{ ID string }
	a.ok(&proj, "project_create", map[string]any{"name": "raw"})
	a.ok(&ws, "workspace_create", map[string]any{"project": "raw"})
	events := a.post(t, map[string]any{"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": map[string]any{
		"name": "exec", "arguments": map[string]any{"workspace": ws.ID, "command": "echo one; echo two"},
		"_meta": map[string]any{"progressToken": "p"}}})
	require.GreaterOrEqual(t, len(events), 2)
	assert.Equal(t, "prime", events[0].name, "the first event is the priming event")
	assert.Empty(t, events[0].data)
	assert.Equal(t, "1000", events[0].retry, "the stream starts with the retry field")
	last := events[len(events)-1]
	assert.Contains(t, last.data, `"id":7`)

	// After the exec ended: the events after the priming one, again.
	status, replay, body := a.get(t, events[0].id)
	require.Equal(t, http.StatusOK, status, body)
	require.Len(t, replay, len(events)-1)
	for i, e := range replay {
		assert.Equal(t, events[i+1].id, e.id)
		assert.Equal(t, events[i+1].data, e.data)
	}
	status, replay, _ = a.get(t, last.id)
	assert.Equal(t, http.StatusOK, status)
	assert.Empty(t, replay, "a resumption from the last event gets nothing more")

	stream, _, _ := strings.Cut(events[0].id, "_")
	for _, tc := range []struct {
		session *rawSession
		id      string
		want    string
	}{
		{a, stream + "_99", "no such event was sent on this stream"},
		{a, "NOSUCHSTREAM_0", "no such stream in this session"},
		{a, "garbage", "not an event id of this server"},
		{b, events[0].id, "no such stream in this session"}, // a's stream, b's session
	} {
		status, replay, body := tc.session.get(t, tc.id)
		assert.Equal(t, http.StatusBadRequest, status, "%s: %s", tc.id, body)
		assert.Empty(t, replay)
		assert.Contains(t, body, tc.want, tc.id)
		assert.Contains(t, body, `"jsonrpc":"2.0"`, "a JSON-RPC error, which clients surface")
	}

	// A stream over MaxStreamBytes loses its oldest events: a resumption
	// from before them gets the call answered with an error that names
	// the bound, in an event without an id.
	events = a.post(t, map[string]any{"jsonrpc": "2.0", "id": 8, "method": "tools/call", "params": map[string]any{
		"name": "exec", "arguments": map[string]any{"workspace": ws.ID, "command": "for i in $(seq 1 40); do head -c 300 /dev/zero | tr '\\0' x; echo; sleep 0.01; done"},
		"_meta": map[string]any{"progressToken": "q"}}})
	status, replay, body = a.get(t, events[0].id)
	require.Equal(t, http.StatusOK, status, body)
	require.Len(t, replay, 1)
	assert.Empty(t, replay[0].id)
	assert.Contains(t, replay[0].data, `"id":8`)
	assert.Contains(t, replay[0].data, `"error"`)
	assert.Contains(t, replay[0].data, "a stream keeps its newest 4096 bytes")

	// The token guards resumptions too.
	req, _ := http.NewRequestWithContext(t.Context(), http.MethodGet, hs.URL, nil)
	req.Header.Set("Mcp-Session-Id", a.id)
	req.Header.Set("Last-Event-ID", events[0].id)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, http.StatusUnauthorized, resp.StatusCode)
}

// rawSession is an MCP session over plain HTTP requests.
type rawSession struct {
	t     *testing.T
	url   string
	token string
	id    string
	next  int
}

const rawProtocol = "2025-11-25"

func newRawSession(t *testing.T, url, token string) *rawSession {
	s := &rawSession{t: t, url: url, token: token, next: 100}
	resp := s.do(t, http.MethodPost, map[string]any{"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": map[string]any{
		"protocolVersion": rawProtocol, "capabilities": map[string]any{}, "clientInfo": map[string]any{"name": "raw", "version": "v0"}}}, "")
	readEvents(t, resp.Body)
	resp.Body.Close()
	s.id = resp.Header.Get("Mcp-Session-Id")
	require.NotEmpty(t, s.id)
	resp = s.do(t, http.MethodPost, map[string]any{"jsonrpc": "2.0", "method": "notifications/initialized"}, "")
	resp.Body.Close()
	require.Equal(t, http.StatusAccepted, resp.StatusCode)
	return s
}

func (s *rawSession) do(t *testing.T, method string, msg any, lastEventID string) *http.Response {
	t.Helper()
	var body io.Reader
	if msg != nil {
		b, err := json.Marshal(msg)
		require.NoError(t, err)
		body = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(t.Context(), method, s.url, body)
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+s.token)
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Mcp-Protocol-Version", rawProtocol)
	if s.id != "" {
		req.Header.Set("Mcp-Session-Id", s.id)
	}
	if lastEventID != "" {
		req.Header.Set("Last-Event-ID", lastEventID)
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	return resp
}

// post sends a call and returns the events of its response stream.
func (s *rawSession) post(t *testing.T, msg any) []sseEvent {
	t.Helper()
	resp := s.do(t, http.MethodPost, msg, "")
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Equal(t, "text/event-stream", resp.Header.Get("Content-Type"))
	return readEvents(t, resp.Body)
}

// ok calls a tool that must succeed.
func (s *rawSession) ok(out any, name string, args map[string]any) {
	s.t.Helper()
	s.next++
	events := s.post(s.t, map[string]any{"jsonrpc": "2.0", "id": s.next, "method": "tools/call", "params": map[string]any{"name": name, "arguments": args}})
	var msg struct {
		Result struct {
			IsError           bool `json:"isError"`
			StructuredContent json.RawMessage
		}
	}
	require.NotEmpty(s.t, events)
	require.NoError(s.t, json.Unmarshal([]byte(events[len(events)-1].data), &msg))
	require.False(s.t, msg.Result.IsError, "%s: %s", name, events[len(events)-1].data)
	require.NoError(s.t, json.Unmarshal(msg.Result.StructuredContent, out))
}

// get resumes after lastEventID: the status, the events, and the body of a
// refusal.
func (s *rawSession) get(t *testing.T, lastEventID string) (int, []sseEvent, string) {
	t.Helper()
	resp := s.do(t, http.MethodGet, nil, lastEventID)
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, nil, string(b)
	}
	return resp.StatusCode, readEvents(t, resp.Body), ""
}

// sseEvent is one event of a stream; retry is the retry field seen in the
// stream before it (or in it).
type sseEvent struct {
	id, name, data, retry string
}

// readEvents reads a stream to its end. A block without data (the retry
// field alone) is no event.
func readEvents(t *testing.T, r io.Reader) []sseEvent {
	t.Helper()
	var events []sseEvent
	var cur sseEvent
	var retry string
	hasData := false
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" {
			if hasData {
				cur.retry = retry
				events = append(events, cur)
			}
			cur, hasData = sseEvent{}, false
			continue
		}
		field, value, _ := strings.Cut(line, ":")
		value = strings.TrimPrefix(value, " ")
		switch field {
		case "id":
			cur.id = value
		case "event":
			cur.name = value
		case "data":
			cur.data, hasData = value, true
		case "retry":
			retry = value
		}
	}
	require.NoError(t, sc.Err())
	return events
}

// cutProxy is a TCP proxy that drops, once, the connection whose response
// bytes carry marker, and holds the connections opened after that drop
// until releaseHeld.
type cutProxy struct {
	ln      net.Listener
	backend string
	marker  []byte
	cut     chan struct{} // closed at the drop
	release chan struct{}

	mu       sync.Mutex
	dropped  int
	conns    []net.Conn
	cutOnce  sync.Once
	freeOnce sync.Once
	wg       sync.WaitGroup
}

func newCutProxy(t *testing.T, backend string, marker []byte) *cutProxy {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	p := &cutProxy{ln: ln, backend: backend, marker: marker, cut: make(chan struct{}), release: make(chan struct{})}
	p.wg.Add(1)
	go p.serve()
	t.Cleanup(p.close)
	return p
}

func (p *cutProxy) URL() string { return "http://" + p.ln.Addr().String() + "/" }

func (p *cutProxy) serve() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.track(c)
		p.wg.Add(1)
		go p.pipe(c)
	}
}

func (p *cutProxy) track(c net.Conn) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.conns = append(p.conns, c)
}

func (p *cutProxy) pipe(c net.Conn) {
	defer p.wg.Done()
	defer c.Close()
	select {
	case <-p.cut:
		<-p.release // a connection opened after the drop waits
	default:
	}
	s, err := net.Dial("tcp", p.backend)
	if err != nil {
		return
	}
	p.track(s)
	defer s.Close()
	go func() {
		_, _ = io.Copy(s, c)
		_ = s.(*net.TCPConn).CloseWrite()
	}()
	var window []byte // the end of what was forwarded, to find a marker split across reads
	buf := make([]byte, 32<<10)
	for {
		n, err := s.Read(buf)
		if n > 0 {
			if _, werr := c.Write(buf[:n]); werr != nil {
				return
			}
			window = append(window, buf[:n]...)
			if bytes.Contains(window, p.marker) && p.drop() {
				return // both ends close: the client sees its stream end mid-call
			}
			window = window[max(0, len(window)-len(p.marker)):]
		}
		if err != nil {
			return
		}
	}
}

// drop reports whether this is the one drop.
func (p *cutProxy) drop() bool {
	first := false
	p.cutOnce.Do(func() {
		first = true
		p.mu.Lock()
		p.dropped++
		p.mu.Unlock()
		close(p.cut)
	})
	return first
}

func (p *cutProxy) cuts() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.dropped
}

func (p *cutProxy) releaseHeld() { p.freeOnce.Do(func() { close(p.release) }) }

func (p *cutProxy) close() {
	p.ln.Close()
	p.releaseHeld()
	p.mu.Lock()
	for _, c := range p.conns {
		c.Close()
	}
	p.mu.Unlock()
	p.wg.Wait()
}

// recorder is the client's HTTP transport, writing down the requests and
// the events the client reads (once start was called).
type recorder struct {
	next http.RoundTripper

	mu          sync.Mutex
	on          bool
	lines       []string
	ids         []string // event ids read, in order
	resumes     []string // Last-Event-ID of each GET
	resumed     chan struct{}
	resumedOnce sync.Once
	broke       chan struct{} // closed when a stream's connection broke
	brokeOnce   sync.Once
}

func (r *recorder) start() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.on = true
	r.resumed = make(chan struct{})
	r.broke = make(chan struct{})
}

func (r *recorder) note(line string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.on {
		r.lines = append(r.lines, line)
	}
}

func (r *recorder) RoundTrip(req *http.Request) (*http.Response, error) {
	summary := req.Method
	if req.Body != nil && req.GetBody != nil {
		if body, err := req.GetBody(); err == nil {
			var msg struct {
				Method string `json:"method"`
				Params struct {
					Name string `json:"name"`
				} `json:"params"`
			}
			b, _ := io.ReadAll(body)
			if json.Unmarshal(b, &msg) == nil && msg.Method != "" {
				summary += " " + msg.Method
				if msg.Params.Name != "" {
					summary += " " + msg.Params.Name
				}
			}
		}
	}
	resuming := false
	if id := req.Header.Get("Last-Event-ID"); id != "" {
		summary += " Last-Event-ID: " + id
		resuming = true
	}
	resp, err := r.next.RoundTrip(req)
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.on {
		return resp, err
	}
	if err != nil {
		r.lines = append(r.lines, fmt.Sprintf("%s -> %v", summary, err))
		return resp, err
	}
	r.lines = append(r.lines, fmt.Sprintf("%s -> %d %s", summary, resp.StatusCode, resp.Header.Get("Content-Type")))
	if resuming {
		r.resumes = append(r.resumes, req.Header.Get("Last-Event-ID"))
		r.resumedOnce.Do(func() { close(r.resumed) })
	}
	if strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") && req.Method != http.MethodGet || resuming {
		resp.Body = &sseTee{rec: r, body: resp.Body}
	}
	return resp, nil
}

// sseTee passes a response body to the client and writes down each
// complete event it read, and how the body ended.
type sseTee struct {
	rec    *recorder
	body   io.ReadCloser
	buf    []byte
	broken bool
}

func (s *sseTee) Read(p []byte) (int, error) {
	n, err := s.body.Read(p)
	s.buf = append(s.buf, p[:n]...)
	for {
		i := bytes.Index(s.buf, []byte("\n\n"))
		if i < 0 {
			break
		}
		s.rec.event(string(s.buf[:i]))
		s.buf = s.buf[i+2:]
	}
	switch {
	case err == nil || errors.Is(err, io.EOF) || s.broken:
	case errors.Is(err, context.Canceled):
		s.broken = true
		s.rec.note("  [the client closes the response: it has its answer]")
	default:
		s.broken = true
		s.rec.note(fmt.Sprintf("  [the connection broke: %v; %d bytes of an event lost]", err, len(s.buf)))
		s.rec.brokeOnce.Do(func() { close(s.rec.broke) })
	}
	return n, err
}

func (s *sseTee) Close() error { return s.body.Close() }

// event writes down one event, abridged.
func (r *recorder) event(block string) {
	var id, name, retry, data string
	for line := range strings.SplitSeq(block, "\n") {
		field, value, _ := strings.Cut(line, ":")
		value = strings.TrimPrefix(value, " ")
		switch field {
		case "id":
			id = value
		case "event":
			name = value
		case "retry":
			retry = value
		case "data":
			data = value
		}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	var line string
	switch {
	case retry != "" && data == "" && id == "":
		line = "  retry: " + retry
	case id == "":
		line = fmt.Sprintf("  (no id) %s%s", name, abridge(data))
	default:
		line = fmt.Sprintf("  id %s %s%s", id, name, abridge(data))
	}
	r.lines = append(r.lines, line)
	if id != "" {
		r.ids = append(r.ids, id)
	}
}

// abridge summarizes an event's JSON-RPC message.
func abridge(data string) string {
	if data == "" {
		return " (no data)"
	}
	var msg struct {
		ID     any    `json:"id"`
		Method string `json:"method"`
		Params struct {
			Progress float64 `json:"progress"`
			Message  string  `json:"message"`
		} `json:"params"`
		Result *struct {
			StructuredContent struct {
				ExitCode int    `json:"exit_code"`
				Stdout   string `json:"stdout"`
			} `json:"structuredContent"`
		} `json:"result"`
		Error *struct {
			Message string `json:"message"`
		} `json:"error"`
	}
	if json.Unmarshal([]byte(data), &msg) != nil {
		return " " + data
	}
	switch {
	case msg.Method != "":
		return fmt.Sprintf(" %s progress=%v message=%q", msg.Method, msg.Params.Progress, msg.Params.Message)
	case msg.Result != nil:
		return fmt.Sprintf(" result of call %v: exit_code=%d stdout=%q", msg.ID, msg.Result.StructuredContent.ExitCode, msg.Result.StructuredContent.Stdout)
	case msg.Error != nil:
		return fmt.Sprintf(" error of call %v: %q", msg.ID, msg.Error.Message)
	}
	return " " + data
}

func (r *recorder) transcript() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return strings.Join(r.lines, "\n")
}

func (r *recorder) eventIDs() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.ids...)
}

func (r *recorder) lastEventIDs() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.resumes...)
}

// progressLog keeps the progress notifications a client got.
type progressLog struct {
	mu      sync.Mutex
	msgs    []string
	values  []float64
	arrived chan struct{}
}

func (p *progressLog) handle(_ context.Context, req *mcp.ProgressNotificationClientRequest) {
	p.mu.Lock()
	p.msgs = append(p.msgs, req.Params.Message)
	p.values = append(p.values, req.Params.Progress)
	p.mu.Unlock()
	select {
	case p.arrived <- struct{}{}:
	default:
	}
}

// wait returns the notifications once their messages add up to want (they
// may be handled after the result), or what came within a minute.
func (p *progressLog) wait(t *testing.T, want string) ([]string, []float64) {
	deadline := time.After(time.Minute)
	for {
		p.mu.Lock()
		msgs, values := append([]string(nil), p.msgs...), append([]float64(nil), p.values...)
		p.mu.Unlock()
		if len(strings.Join(msgs, "")) >= len(want) {
			return msgs, values
		}
		select {
		case <-p.arrived:
		case <-deadline:
			t.Errorf("progress messages %q do not add up to %q", msgs, want)
			return msgs, values
		}
	}
}

type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}
