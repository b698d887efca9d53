package client_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"layerfs.dev/layerfs/client"
	"layerfs.dev/layerfs/internal/api"
	"layerfs.dev/layerfs/wire"
	"layerfs.dev/layerfs/wire/errclass"
)

// serveInWorkspace runs testdata/portserver.py on port in the workspace,
// as an exec that lasts until the test ends or the returned stop is
// called, and waits until it answers.
func serveInWorkspace(t *testing.T, ws *client.Workspace, port int) (stop func()) {
	t.Helper()
	src, err := os.ReadFile("testdata/portserver.py")
	require.NoError(t, err)
	require.NoError(t, ws.WriteFile(t.Context(), "portserver.py", src, 0o644))
	ctx, cancel := context.WithCancel(context.Background())
	ended := make(chan struct{})
	go func() {
		defer close(ended)
		_, _ = ws.Exec(ctx, "exec python3 portserver.py "+strconv.Itoa(port), client.ExecOptions{Timeout: 5 * time.Minute})
	}()
	stop = func() { cancel(); <-ended }
	t.Cleanup(stop)
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(20 * time.Millisecond) {
		c, err := ws.DialPort(t.Context(), port)
		if err == nil {
			c.Close()
			return stop
		}
		if !errors.Is(err, errclass.Unreachable) || time.Now().After(deadline) {
			t.Fatalf("the server in the workspace never answered: %v", err)
		}
	}
}

// daemonHTTP is an HTTP client of the test daemon's unix socket.
func daemonHTTP() *http.Client {
	sock := strings.TrimPrefix(daemonAddr, "unix://")
	return &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "unix", sock)
	}}}
}

func get(t *testing.T, hc *http.Client, u string, hdr ...string) (int, string) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, u, nil)
	require.NoError(t, err)
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := hc.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp.StatusCode, string(b)
}

// TestPortForward: DialPort and ForwardPort reach a server in the
// workspace's sandbox, which the host's own loopback does not; a port
// nobody listens on is unreachable and named; a bad one invalid.
func TestPortForward(t *testing.T) {
	ws := attachWorkspace(t)
	serveInWorkspace(t, ws, 8000)

	c, err := ws.DialPort(t.Context(), 8000)
	require.NoError(t, err)
	_, err = io.WriteString(c, "GET /hello HTTP/1.0\r\n\r\n")
	require.NoError(t, err)
	require.NoError(t, c.(interface{ CloseWrite() error }).CloseWrite(), "a half-close")
	b, err := io.ReadAll(c)
	require.NoError(t, err)
	c.Close()
	assert.Contains(t, string(b), "200 OK")
	assert.Contains(t, string(b), "path=/hello ")

	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- ws.ForwardPort(ctx, l, 8000, nil) }()
	code, body := get(t, http.DefaultClient, "http://"+l.Addr().String()+"/bytes/3000000")
	assert.Equal(t, 200, code)
	assert.Len(t, body, 3000000)
	cancel()
	require.NoError(t, <-done)

	_, err = ws.DialPort(t.Context(), 8001)
	assert.ErrorIs(t, err, errclass.Unreachable)
	assert.Contains(t, err.Error(), "port 8001")
	for _, p := range []int{0, 70000} {
		_, err = ws.DialPort(t.Context(), p)
		assert.ErrorIs(t, err, errclass.Invalid, "port %d", p)
	}
}

// TestPortPreview: the API proxies a request below the port's path to it
// (prefix stripped and told, the caller's token not passed on), streams
// an answer as it comes, passes a WebSocket's upgrade through, and
// answers a port nobody listens on with 502 naming it.
func TestPortPreview(t *testing.T) {
	ws := attachWorkspace(t)
	serveInWorkspace(t, ws, 8000)
	hc := daemonHTTP()
	prefix := "/v1/workspaces/" + ws.ID() + "/ports/8000"

	code, body := get(t, hc, "http://layerfsd"+prefix+"/a/b?x=1", "Authorization", "Bearer secret")
	assert.Equal(t, 200, code)
	assert.Equal(t, "path=/a/b?x=1 prefix="+prefix+" auth=None host=layerfsd\n", body)

	// Streamed: the first line comes before the server is let to finish.
	req, _ := http.NewRequestWithContext(t.Context(), http.MethodGet, "http://layerfsd"+prefix+"/stream", nil)
	resp, err := hc.Do(req)
	require.NoError(t, err)
	br := bufio.NewReader(resp.Body)
	line, err := br.ReadString('\n')
	require.NoError(t, err)
	assert.Equal(t, "first\n", line)
	require.NoError(t, ws.WriteFile(t.Context(), "go", nil, 0o644))
	rest, err := io.ReadAll(br)
	require.NoError(t, err)
	assert.Equal(t, "second\n", string(rest))
	resp.Body.Close()

	// A WebSocket: the upgrade, then bytes both ways.
	conn, err := net.Dial("unix", strings.TrimPrefix(daemonAddr, "unix://"))
	require.NoError(t, err)
	defer conn.Close()
	fmt.Fprintf(conn, "GET %s/ws HTTP/1.1\r\nHost: layerfsd\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n", prefix)
	cr := bufio.NewReader(conn)
	wsResp, err := http.ReadResponse(cr, nil)
	require.NoError(t, err)
	require.Equal(t, http.StatusSwitchingProtocols, wsResp.StatusCode)
	_, err = conn.Write([]byte("ping"))
	require.NoError(t, err)
	buf := make([]byte, 4)
	_, err = io.ReadFull(cr, buf)
	require.NoError(t, err)
	assert.Equal(t, "ping", string(buf))

	code, body = get(t, hc, "http://layerfsd/v1/workspaces/"+ws.ID()+"/ports/8001/")
	assert.Equal(t, http.StatusBadGateway, code)
	assert.Contains(t, body, `"code":"port_unreachable"`)
	assert.Contains(t, body, "port 8001")
	code, _ = get(t, hc, "http://layerfsd/v1/workspaces/"+ws.ID()+"/ports/0/")
	assert.Equal(t, http.StatusBadRequest, code)
	code, _ = get(t, hc, "http://layerfsd/v1/workspaces/"+ws.ID()+"/ports/http/")
	assert.Equal(t, http.StatusBadRequest, code)
}

// TestPortShare: a share's URL reaches the port on a TCP listener without
// the listener's bearer token, which the port's preview still needs;
// revoked, the token reaches nothing; a workspace that ended has no port.
func TestPortShare(t *testing.T) {
	ws := attachWorkspace(t)
	stop := serveInWorkspace(t, ws, 8000)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	srv := &http.Server{Handler: api.NewServer(localEngine, api.Options{Daemon: wire.DaemonStatus{TCP: l.Addr().String()}}).
		Handler(api.ListenerOptions{Token: "tcp-secret"})}
	go srv.Serve(l)
	defer srv.Close()
	tc, err := client.Dial(t.Context(), "tcp://"+l.Addr().String(), client.WithToken("tcp-secret"))
	require.NoError(t, err)
	defer tc.Close()
	tws, err := tc.Workspace(t.Context(), ws.ID())
	require.NoError(t, err)

	sh, err := tws.SharePort(t.Context(), 8000, false)
	require.NoError(t, err)
	assert.Equal(t, "http://"+l.Addr().String()+"/share/"+sh.Token+"/", sh.URL)
	assert.GreaterOrEqual(t, len(sh.Token), 40)
	again, err := tws.SharePort(t.Context(), 8000, false)
	require.NoError(t, err)
	assert.Equal(t, sh.Token, again.Token, "one share per port")
	_, err = tws.SharePort(t.Context(), 8000, true)
	assert.ErrorIs(t, err, errclass.Exists)

	code, body := get(t, http.DefaultClient, sh.URL+"page?q=2")
	assert.Equal(t, 200, code)
	assert.Equal(t, "path=/page?q=2 prefix=/share/"+sh.Token+" auth=None host="+l.Addr().String()+"\n", body)
	code, _ = get(t, http.DefaultClient, "http://"+l.Addr().String()+"/v1/workspaces/"+ws.ID()+"/ports/8000/")
	assert.Equal(t, http.StatusUnauthorized, code, "the preview needs the daemon's authority")
	code, _ = get(t, http.DefaultClient, "http://"+l.Addr().String()+"/share/not-a-token/")
	assert.Equal(t, http.StatusNotFound, code)

	list, err := tws.PortShares(t.Context())
	require.NoError(t, err)
	require.Len(t, list, 1)
	assert.Equal(t, sh.URL, list[0].URL)

	require.NoError(t, tws.UnsharePort(t.Context(), 8000))
	code, _ = get(t, http.DefaultClient, sh.URL)
	assert.Equal(t, http.StatusNotFound, code, "a revoked token")
	assert.ErrorIs(t, tws.UnsharePort(t.Context(), 8000), errclass.NotFound)

	pub, err := tws.SharePort(t.Context(), 8000, true)
	require.NoError(t, err)
	assert.Equal(t, ws.ID()+"-8000", pub.Token)
	code, _ = get(t, http.DefaultClient, pub.URL)
	assert.Equal(t, 200, code)

	stop() // the daemon kills the server once it sees the exec's client gone
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(50 * time.Millisecond) {
		if code, body = get(t, http.DefaultClient, pub.URL); code != 200 || time.Now().After(deadline) {
			break
		}
	}
	assert.Equal(t, http.StatusBadGateway, code, "a share of a port nobody listens on any more: %s", body)
	require.NoError(t, ws.End(t.Context(), client.EndOptions{Discard: true}))
	_, err = ws.DialPort(t.Context(), 8000)
	assert.ErrorIs(t, err, errclass.NotFound, "a port of an ended workspace")
	code, _ = get(t, http.DefaultClient, pub.URL)
	assert.Equal(t, http.StatusNotFound, code, "an ended workspace's share")
}

// TestPortOfAService: a service's port is reachable through a forward and a
// preview while no exec runs, and unreachable once the service stops.
func TestPortOfAService(t *testing.T) {
	ws := attachWorkspace(t)
	src, err := os.ReadFile("testdata/portserver.py")
	require.NoError(t, err)
	require.NoError(t, ws.WriteFile(t.Context(), "portserver.py", src, 0o644))
	_, err = ws.StartService(t.Context(), []string{"python3", "portserver.py", "8000"}, client.ServiceOptions{Name: "web"})
	require.NoError(t, err)
	var c net.Conn
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(20 * time.Millisecond) {
		if c, err = ws.DialPort(t.Context(), 8000); err == nil || !errors.Is(err, errclass.Unreachable) || time.Now().After(deadline) {
			break
		}
	}
	require.NoError(t, err, "the service's port never answered")
	_, err = io.WriteString(c, "GET /svc HTTP/1.0\r\n\r\n")
	require.NoError(t, err)
	b, err := io.ReadAll(c)
	require.NoError(t, err)
	c.Close()
	assert.Contains(t, string(b), "200 OK")

	code, body := get(t, daemonHTTP(), "http://layerfs/v1/workspaces/"+ws.ID()+"/ports/8000/preview")
	assert.Equal(t, 200, code, body)

	_, err = ws.StopService(t.Context(), "web", time.Second)
	require.NoError(t, err)
	_, err = ws.DialPort(t.Context(), 8000)
	assert.ErrorIs(t, err, errclass.Unreachable)
}
