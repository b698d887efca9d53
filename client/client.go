package client

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"syscall"
	"time"

	"layerfs.dev/layerfs/wire"
	"layerfs.dev/layerfs/wire/errclass"
)

// Client talks to one daemon. It is safe for concurrent use.
//
// On a fleet (daemons on many hosts sharing one Store), a workspace lives
// on one host, and a daemon asked for another host's workspace answers
// misdirected, naming that host and its address: a Workspace handle then
// sends the request there once, with the same options (the token too),
// and goes there directly from then on.
type Client struct {
	addr    string // as dialled
	base    string // scheme://host, no trailing slash
	hc      *http.Client
	token   string
	version wire.Version
	gzip    bool     // WithCompressedDownloads
	opts    []Option // as dialled, for the fleet's other hosts
	// dialRaw opens a connection of its own to the daemon, for a port
	// forward, which takes it over whole (ports.go).
	dialRaw func(ctx context.Context) (net.Conn, error)

	mu    sync.Mutex
	peers map[string]*Client // other hosts' daemons, by advertised address
}

// Option configures Dial.
type Option func(*Client)

// WithToken sends "Authorization: Bearer token" with every request (needed
// on a daemon's TCP listener).
func WithToken(token string) Option { return func(c *Client) { c.token = token } }

// WithCompressedDownloads asks the daemon to gzip what Download fetches:
// worth it over a slow link (a VM's forwarded socket, where bytes cost
// more than the daemon's CPU), not over a local socket, where the CPU
// costs more than the bytes.
func WithCompressedDownloads() Option { return func(c *Client) { c.gzip = true } }

// WithHTTPClient replaces the HTTP client for http:// addresses (its
// transport is kept; unix:// addresses always dial the socket).
func WithHTTPClient(hc *http.Client) Option { return func(c *Client) { c.hc = hc } }

// Dial connects to the daemon at addr ("unix:///path/to/socket", a bare
// socket path, or "http://host:port", which "tcp://host:port" also names)
// and checks that it speaks this API.
func Dial(ctx context.Context, addr string, opts ...Option) (*Client, error) {
	c := &Client{addr: addr, opts: opts}
	for _, o := range opts {
		o(c)
	}
	if hostPort, ok := strings.CutPrefix(addr, "tcp://"); ok {
		addr = "http://" + hostPort
	}
	switch {
	case strings.HasPrefix(addr, "unix://") || strings.HasPrefix(addr, "/"):
		sock := strings.TrimPrefix(addr, "unix://")
		if sock == "" {
			return nil, fmt.Errorf("dial %q: no socket path", addr)
		}
		tr := &http.Transport{
			DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
				var d net.Dialer
				return d.DialContext(ctx, "unix", sock)
			},
			MaxIdleConnsPerHost: 64,
			// Compression only when asked for (WithCompressedDownloads).
			DisableCompression: true,
		}
		c.hc = &http.Client{Transport: tr}
		c.base = "http://layerfsd"
		c.dialRaw = func(ctx context.Context) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", sock)
		}
	case strings.HasPrefix(addr, "http://") || strings.HasPrefix(addr, "https://"):
		u, err := url.Parse(addr)
		if err != nil {
			return nil, fmt.Errorf("dial %q: %w", addr, err)
		}
		if u.Path != "" && u.Path != "/" {
			return nil, fmt.Errorf("dial %q: the address must not have a path", addr)
		}
		if c.hc == nil {
			c.hc = &http.Client{Transport: &http.Transport{Proxy: nil, MaxIdleConnsPerHost: 64, DisableCompression: true}}
		}
		c.base = u.Scheme + "://" + u.Host
		c.dialRaw = rawDialer(u)
	default:
		return nil, fmt.Errorf("dial %q: want unix:///path/to/socket, tcp://host:port or http://host:port", addr)
	}
	if err := c.get(ctx, "/v1/version", nil, &c.version); err != nil {
		c.Close()
		return nil, fmt.Errorf("dial %s: %w", addr, err)
	}
	if c.version.API != wire.APIVersion {
		c.Close()
		return nil, fmt.Errorf("dial %s: the daemon speaks API %q, this client %q", addr, c.version.API, wire.APIVersion)
	}
	return c, nil
}

// Version is what the daemon reported when dialed.
func (c *Client) Version() wire.Version { return c.version }

// Close releases idle connections, those to other hosts too.
func (c *Client) Close() error {
	c.hc.CloseIdleConnections()
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, p := range c.peers {
		p.Close()
	}
	return nil
}

// peerDialTimeout bounds dialling another host of a fleet.
const peerDialTimeout = 15 * time.Second

// peer is a client of the fleet's daemon at addr (an advertised address),
// dialled once with c's options.
func (c *Client) peer(ctx context.Context, addr string) (*Client, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if p := c.peers[addr]; p != nil {
		return p, nil
	}
	ctx, cancel := context.WithTimeout(ctx, peerDialTimeout)
	defer cancel()
	p, err := Dial(ctx, addr, c.opts...)
	if err != nil {
		return nil, err
	}
	if c.peers == nil {
		c.peers = map[string]*Client{}
	}
	c.peers[addr] = p
	return p, nil
}

// call describes one request.
type call struct {
	method string
	path   string // already escaped
	query  url.Values
	// The body: data, which can be sent again (to the host a misdirected
	// answer names), or a stream read once.
	data   []byte
	body   io.Reader
	size   int64 // Content-Length of body when known, else -1
	ctype  string
	accept string
	gzip   bool // ask for a gzip body (Accept-Encoding), which the caller decodes
	// upgrade asks to switch the connection to this protocol: a 101
	// answer is then a success, its Body the connection.
	upgrade string
}

// send performs a request and returns the response when its status is
// 2xx; otherwise the typed error from its body.
func (c *Client) send(ctx context.Context, k call) (*http.Response, error) {
	u := c.base + k.path
	if len(k.query) > 0 {
		u += "?" + k.query.Encode()
	}
	body, size := k.body, k.size
	if k.data != nil {
		// A new reader per attempt: the transport may still read the
		// last one after it answered.
		body, size = bytes.NewReader(k.data), int64(len(k.data))
	}
	req, err := http.NewRequestWithContext(ctx, k.method, u, body)
	if err != nil {
		return nil, err
	}
	if body != nil && size >= 0 {
		req.ContentLength = size
	}
	if k.ctype != "" {
		req.Header.Set("Content-Type", k.ctype)
	}
	if k.accept != "" {
		req.Header.Set("Accept", k.accept)
	}
	if k.gzip {
		req.Header.Set("Accept-Encoding", "gzip")
	}
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	if k.upgrade != "" {
		req.Header.Set("Connection", "Upgrade")
		req.Header.Set("Upgrade", k.upgrade)
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return nil, lostOr(ctx, err)
	}
	if resp.StatusCode >= 200 && resp.StatusCode < 300 || k.upgrade != "" && resp.StatusCode == http.StatusSwitchingProtocols {
		return resp, nil
	}
	defer resp.Body.Close()
	return nil, responseError(resp)
}

// responseError reads a failed response's typed error.
func responseError(resp *http.Response) error {
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	var eb wire.ErrorBody
	if err := json.Unmarshal(b, &eb); err == nil && eb.Error.Code != "" {
		return &eb.Error
	}
	msg := strings.TrimSpace(string(b))
	if msg == "" {
		msg = resp.Status
	}
	return &wire.Error{Code: errclass.FromStatus(resp.StatusCode).Code(), Message: fmt.Sprintf("HTTP %d: %s", resp.StatusCode, msg)}
}

// sender sends a call: a Client to its daemon, a Workspace to the daemon
// that serves it.
type sender interface {
	send(ctx context.Context, k call) (*http.Response, error)
}

// doJSON sends in (when not nil) as JSON and decodes the answer into out
// (when not nil).
func (c *Client) doJSON(ctx context.Context, method, path string, q url.Values, in, out any) error {
	return doJSON(ctx, c, method, path, q, in, out)
}

func doJSON(ctx context.Context, s sender, method, path string, q url.Values, in, out any) error {
	k := call{method: method, path: path, query: q, size: -1}
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return err
		}
		k.data, k.ctype = b, "application/json"
	}
	resp, err := s.send(ctx, k)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if out == nil {
		_, err := io.Copy(io.Discard, resp.Body)
		return err
	}
	if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
		return fmt.Errorf("decode %s %s answer: %w", method, path, err)
	}
	return nil
}

func (c *Client) get(ctx context.Context, path string, q url.Values, out any) error {
	return c.doJSON(ctx, http.MethodGet, path, q, nil, out)
}

// seg escapes one path segment.
func seg(s string) string { return url.PathEscape(s) }

// Code returns the API error code of err ("" when err is not an API error).
func Code(err error) string {
	var e *wire.Error
	if errors.As(err, &e) {
		return e.Code
	}
	return ""
}

// The IsX helpers tell an error's class (package errclass): an API error
// unwraps to the class of its code, so errors.Is(err, errclass.NotFound)
// is the same test as IsNotFound(err).

// IsNotFound reports whether err is a not_found error.
func IsNotFound(err error) bool { return errors.Is(err, errclass.NotFound) }

// IsExists reports whether err is an already_exists error.
func IsExists(err error) bool { return errors.Is(err, errclass.Exists) }

// IsHeadMoved reports whether err is a head_moved error.
func IsHeadMoved(err error) bool { return errors.Is(err, errclass.HeadMoved) }

// IsUncommitted reports whether err is an uncommitted_changes error.
func IsUncommitted(err error) bool { return errors.Is(err, errclass.Uncommitted) }

// IsBusy reports whether err is a busy error.
func IsBusy(err error) bool { return errors.Is(err, errclass.Busy) }

// IsInvalid reports whether err is an invalid_argument error.
func IsInvalid(err error) bool { return errors.Is(err, errclass.Invalid) }

// IsUnauthorized reports whether err is an unauthorized error.
func IsUnauthorized(err error) bool { return errors.Is(err, errclass.Unauthorized) }

// IsTooLarge reports whether err is a too_large error.
func IsTooLarge(err error) bool { return errors.Is(err, errclass.TooLarge) }

// IsUnavailable reports whether err is an unavailable error.
func IsUnavailable(err error) bool { return errors.Is(err, errclass.Unavailable) }

// IsNoSpace reports whether err is a no_space error: a file system of the
// Store or of a workspace is full.
func IsNoSpace(err error) bool { return errors.Is(err, errclass.NoSpace) }

// IsCorrupt reports whether err is a corrupt error: stored data failed its
// check (run fsck).
func IsCorrupt(err error) bool { return errors.Is(err, errclass.Corrupt) }

// IsMisdirected reports whether err is a misdirected error: the workspace
// lives on another host of the fleet, which the SDK could not reach or
// would have reached in a second hop (ServedBy names it).
func IsMisdirected(err error) bool { return errors.Is(err, errclass.Misdirected) }

// IsConflict reports whether err is a conflict error: a merge (of
// branches, a commit with merge, an update) found paths it cannot decide
// and published nothing (Conflicts lists them).
func IsConflict(err error) bool { return errors.Is(err, errclass.Conflict) }

// Conflicts are the paths a conflict error lists: each with its kind and
// the three sides' paths and object ids.
func Conflicts(err error) []wire.Conflict {
	var e *wire.Error
	if errors.As(err, &e) && e.Code == wire.CodeConflict {
		return e.Conflicts
	}
	return nil
}

// ServedBy is the host a misdirected error names as the one that serves
// the workspace.
func ServedBy(err error) (wire.Node, bool) {
	var e *wire.Error
	if errors.As(err, &e) && e.Code == wire.CodeMisdirected && e.Node != nil {
		return *e.Node, true
	}
	return wire.Node{}, false
}

// IsDaemonLost reports whether the connection to the daemon broke during
// the call (wire.CodeDaemonLost): its outcome is unknown.
func IsDaemonLost(err error) bool { return errors.Is(err, errclass.DaemonLost) }

// lostOr turns err into a daemon_lost error when it says that an open
// connection to the daemon broke (and ctx did not end it); a daemon that
// never answered (no socket, connection refused) stays as err.
func lostOr(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return err
	}
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE) {
		return fmt.Errorf("%w (%w)", &wire.Error{Code: wire.CodeDaemonLost,
			Message: "the connection to the daemon broke before its answer was whole: it crashed or was killed; the outcome is unknown, and a restarted daemon recovers the workspace"}, err)
	}
	return err
}
