package api

import (
	"bufio"
	"context"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"time"

	"layerfs.dev/layerfs/internal/portfwd"
	"layerfs.dev/layerfs/wire"
)

// portParams reads a route's workspace id and port.
func portParams(r *http.Request) (string, int, error) {
	id, err := idParam(r)
	if err != nil {
		return "", 0, err
	}
	port, err := portNumber(r.PathValue("port"))
	return id, port, err
}

// portNumber parses a port of the path; 1-65535.
func portNumber(s string) (int, error) {
	n, err := strconv.Atoi(s)
	if err != nil || n < 1 || n > 65535 {
		return 0, invalid("port %q: a TCP port is 1 to 65535", s)
	}
	return n, nil
}

// upgradeTo reports whether r asks to switch to protocol.
func upgradeTo(r *http.Request, protocol string) bool {
	conn := false
	for _, v := range r.Header.Values("Connection") {
		for _, t := range strings.Split(v, ",") {
			conn = conn || strings.EqualFold(strings.TrimSpace(t), "upgrade")
		}
	}
	return conn && strings.EqualFold(r.Header.Get("Upgrade"), protocol)
}

// connectPort forwards one connection to a port inside the workspace's
// sandbox (wire.PortProtocol): the port is dialled first, so a port
// nobody listens on is an ordinary JSON error, then the connection is
// upgraded and carries the bytes both ways. A POST to a preview path that
// happens to be "connect" without that upgrade is a preview.
func (s *Server) connectPort(w http.ResponseWriter, r *http.Request) error {
	if !upgradeTo(r, wire.PortProtocol) {
		return s.previewPort(w, r)
	}
	id, port, err := portParams(r)
	if err != nil {
		return err
	}
	if r.ContentLength != 0 {
		// Its bytes would reach the port ahead of the client's own.
		return invalid("a port forward's request has no body")
	}
	up, err := s.ports.DialPort(ctxOf(r), id, port)
	if err != nil {
		return err
	}
	if rec, ok := w.(*recorder); ok {
		rec.status = http.StatusSwitchingProtocols
	}
	conn, brw, err := http.NewResponseController(w).Hijack()
	if err != nil {
		up.Close()
		return err
	}
	_ = conn.SetDeadline(time.Time{})
	_, err = brw.WriteString("HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: " + wire.PortProtocol + "\r\n\r\n")
	if err == nil {
		err = brw.Flush()
	}
	if err != nil {
		conn.Close()
		up.Close()
		s.log.Debug("port forward: upgrade failed", "workspace", id, "port", port, "err", err)
		return nil
	}
	// The connection itself when nothing waits in the server's reader, so
	// that the copies can splice in the kernel.
	client := conn
	if brw.Reader.Buffered() > 0 {
		client = &bufferedConn{Conn: conn, r: brw.Reader}
	}
	// A daemon that drains or aborts ends its forwards.
	stop := context.AfterFunc(s.drainCtx, func() { client.Close(); up.Close() })
	defer stop()
	if _, _, err := portfwd.Splice(client, up); err != nil {
		s.log.Debug("port forward ended", "workspace", id, "port", port, "err", err)
	}
	return nil
}

// bufferedConn is a hijacked connection whose first bytes may wait in the
// server's reader; it keeps the connection's half-close.
type bufferedConn struct {
	net.Conn
	r *bufio.Reader
}

func (c *bufferedConn) Read(p []byte) (int, error) { return c.r.Read(p) }

func (c *bufferedConn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return c.Conn.Close()
}

// previewPort proxies a request below /v1/workspaces/{id}/ports/{port}/ to
// the port inside the workspace's sandbox, with the daemon's usual
// authority.
func (s *Server) previewPort(w http.ResponseWriter, r *http.Request) error {
	id, port, err := portParams(r)
	if err != nil {
		return err
	}
	s.proxyPort(w, r, id, port, "/v1/workspaces/"+id+"/ports/"+strconv.Itoa(port))
	return nil
}

// tokenRE is what a share's token is made of (base64url, or a public
// share's workspace id and port).
var tokenRE = regexp.MustCompile(`^[A-Za-z0-9_-]{1,128}$`)

// sharedPort proxies a request below /share/{token}/ to the port the
// token was made for: the token is its authority, in place of the
// daemon's (the TCP listener's bearer token is not asked for).
func (s *Server) sharedPort(w http.ResponseWriter, r *http.Request) error {
	token := r.PathValue("token")
	if !tokenRE.MatchString(token) {
		return invalid("share token: want 1-128 of [A-Za-z0-9_-]")
	}
	id, port, err := s.ports.SharedPort(ctxOf(r), token)
	if err != nil {
		return err
	}
	s.proxyPort(w, r, id, port, strings.TrimSuffix(wire.SharePrefix, "/")+"/"+token)
	return nil
}

// proxyPort passes r on to the port, its path without prefix: streamed
// answers as they come, a WebSocket's upgrade and its bytes both ways.
// The daemon's own bearer token never reaches the port; X-Forwarded-Prefix
// tells the server where it is mounted.
func (s *Server) proxyPort(w http.ResponseWriter, r *http.Request, id string, port int, prefix string) {
	rest := strings.TrimPrefix(r.URL.EscapedPath(), prefix)
	if rest == "" {
		if r.Method == http.MethodGet || r.Method == http.MethodHead {
			u := *r.URL
			u.Path, u.RawPath = prefix+"/", ""
			http.Redirect(w, r, u.RequestURI(), http.StatusMovedPermanently)
			return
		}
		rest = "/"
	}
	ctx, cancel := context.WithCancel(ctxOf(r))
	defer cancel()
	defer context.AfterFunc(s.drainCtx, cancel)()
	rp := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.Out.URL.Scheme = "http"
			pr.Out.URL.Host = net.JoinHostPort(id, strconv.Itoa(port))
			pr.Out.URL.RawPath = rest
			pr.Out.URL.Path, _ = url.PathUnescape(rest)
			pr.Out.Host = pr.In.Host
			pr.Out.Header.Del("Authorization")
			pr.SetXForwarded()
			pr.Out.Header.Set("X-Forwarded-Prefix", prefix)
		},
		Transport: s.portTransport,
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			s.fail(w, r, err)
		},
		ErrorLog: nil,
	}
	rp.ServeHTTP(w, r.WithContext(ctx))
}

// newPortTransport is the transport of previews: its "host" is a
// workspace id and its "port" the port inside the sandbox, dialled there.
func (s *Server) newPortTransport() *http.Transport {
	return &http.Transport{
		Proxy: nil,
		DialContext: func(ctx context.Context, _, addr string) (net.Conn, error) {
			id, p, err := net.SplitHostPort(addr)
			if err != nil {
				return nil, err
			}
			port, err := portNumber(p)
			if err != nil {
				return nil, err
			}
			return s.ports.DialPort(ctx, id, port)
		},
		MaxIdleConnsPerHost: 16,
		IdleConnTimeout:     30 * time.Second,
		DisableCompression:  true,
	}
}

func (s *Server) sharePort(w http.ResponseWriter, r *http.Request) error {
	id, err := idParam(r)
	if err != nil {
		return err
	}
	var req wire.ShareRequest
	if err := decode(w, r, &req); err != nil {
		return err
	}
	if _, err := portNumber(strconv.Itoa(req.Port)); err != nil {
		return err
	}
	sh, err := s.ports.SharePort(ctxOf(r), id, req)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, s.shareURL(sh))
	return nil
}

func (s *Server) listShares(w http.ResponseWriter, r *http.Request) error {
	id, err := idParam(r)
	if err != nil {
		return err
	}
	list, err := s.ports.PortShares(ctxOf(r), id)
	if err != nil {
		return err
	}
	for i := range list {
		list[i] = s.shareURL(list[i])
	}
	writeJSON(w, http.StatusOK, list)
	return nil
}

func (s *Server) unsharePort(w http.ResponseWriter, r *http.Request) error {
	id, port, err := portParams(r)
	if err != nil {
		return err
	}
	if err := s.ports.UnsharePort(ctxOf(r), id, port); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// shareURL fills in a share's URL on the daemon's TCP address: the one
// it advertises, else its --tcp address (an unspecified host as
// localhost); none without a TCP listener.
func (s *Server) shareURL(sh wire.PortShare) wire.PortShare {
	d := s.opts.Daemon
	addr := strings.TrimPrefix(strings.TrimPrefix(d.Advertise, "tcp://"), "http://")
	if addr == "" {
		addr = d.TCP
	}
	host, port, err := net.SplitHostPort(addr)
	if addr == "" || err != nil || port == "0" {
		return sh
	}
	if ip := net.ParseIP(host); host == "" || ip != nil && ip.IsUnspecified() {
		host = "localhost"
	}
	sh.URL = "http://" + net.JoinHostPort(host, port) + sh.Path
	return sh
}
