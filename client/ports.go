package client

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"sync"
	"time"

	"layerfs.dev/layerfs/wire"
)

// PortShare is a share of a workspace's port: its URL reaches the port
// with the share's token, without the daemon's authority.
type PortShare = wire.PortShare

// rawDialer dials the daemon of an http:// or https:// address.
func rawDialer(u *url.URL) func(ctx context.Context) (net.Conn, error) {
	host := u.Host
	if u.Port() == "" {
		host = net.JoinHostPort(u.Hostname(), map[bool]string{true: "443", false: "80"}[u.Scheme == "https"])
	}
	if u.Scheme == "https" {
		return func(ctx context.Context) (net.Conn, error) {
			d := tls.Dialer{Config: &tls.Config{ServerName: u.Hostname()}}
			return d.DialContext(ctx, "tcp", host)
		}
	}
	return func(ctx context.Context) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "tcp", host)
	}
}

// DialPort connects to port inside the workspace's sandbox, through its
// daemon (which enters the sandbox's network namespace: the sandbox's
// network stays its own). The connection carries the bytes of one TCP
// connection to the port both ways; CloseWrite passes a half-close on. A
// port nobody listens on fails with an error of class
// errclass.Unreachable that names it.
func (ws *Workspace) DialPort(ctx context.Context, port int) (net.Conn, error) {
	c := ws.at.Load()
	conn, err := c.connectPort(ctx, ws.ID(), port)
	n, elsewhere := ServedBy(err)
	if !elsewhere || n.Address == "" || !n.Live {
		return conn, err
	}
	peer, perr := ws.c.peer(ctx, n.Address)
	if perr != nil {
		return nil, fmt.Errorf("%w; following it: %w", err, perr)
	}
	ws.at.Store(peer)
	return peer.connectPort(ctx, ws.ID(), port)
}

// connectPort asks the daemon, on a connection of its own, to forward it
// to the port (wire.PortProtocol).
func (c *Client) connectPort(ctx context.Context, id string, port int) (net.Conn, error) {
	if c.dialRaw == nil {
		return nil, errors.New("dial port: the client has no address to dial")
	}
	conn, err := c.dialRaw(ctx)
	if err != nil {
		return nil, fmt.Errorf("dial port %d: %w", port, lostOr(ctx, err))
	}
	if d, ok := ctx.Deadline(); ok {
		_ = conn.SetDeadline(d)
	}
	stop := context.AfterFunc(ctx, func() { _ = conn.SetDeadline(time.Unix(1, 0)) })
	pc, err := c.upgradePort(conn, id, port)
	stopped := stop()
	if err == nil && !stopped {
		err = ctx.Err()
	}
	if err != nil {
		conn.Close()
		if ctx.Err() != nil {
			return nil, fmt.Errorf("dial port %d: %w", port, ctx.Err())
		}
		return nil, err
	}
	_ = conn.SetDeadline(time.Time{})
	return pc, nil
}

// upgradePort sends the forward's request on conn and reads the answer.
func (c *Client) upgradePort(conn net.Conn, id string, port int) (net.Conn, error) {
	req, err := http.NewRequest(http.MethodPost, c.base+"/v1/workspaces/"+seg(id)+"/ports/"+strconv.Itoa(port)+"/connect", nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Connection", "Upgrade")
	req.Header.Set("Upgrade", wire.PortProtocol)
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	if err := req.Write(conn); err != nil {
		return nil, fmt.Errorf("dial port %d: %w", port, err)
	}
	br := bufio.NewReader(conn)
	resp, err := http.ReadResponse(br, req)
	if err != nil {
		return nil, fmt.Errorf("dial port %d: %w", port, err)
	}
	if resp.StatusCode != http.StatusSwitchingProtocols {
		defer resp.Body.Close()
		if resp.StatusCode < 300 {
			return nil, fmt.Errorf("dial port %d: the daemon answered %s, not 101 Switching Protocols", port, resp.Status)
		}
		return nil, responseError(resp)
	}
	if br.Buffered() == 0 {
		// The connection itself, so that copies to and from it can splice
		// in the kernel.
		return conn, nil
	}
	return &portConn{Conn: conn, r: br}, nil
}

// portConn is a forward's connection, its first bytes perhaps already in
// the reader that read the daemon's answer.
type portConn struct {
	net.Conn
	r *bufio.Reader
}

func (c *portConn) Read(p []byte) (int, error) { return c.r.Read(p) }

// CloseWrite ends what is sent to the port; what it answers can still be
// read.
func (c *portConn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return c.Conn.Close()
}

// ForwardPort accepts connections on l (a local TCP port or unix socket)
// and forwards each to port inside the workspace's sandbox, until ctx ends
// or l is closed; it closes l. A connection whose forward fails is closed
// and the error handed to onError (nil: dropped).
func (ws *Workspace) ForwardPort(ctx context.Context, l net.Listener, port int, onError func(error)) error {
	stop := context.AfterFunc(ctx, func() { l.Close() })
	defer stop()
	defer l.Close()
	var wg sync.WaitGroup
	defer wg.Wait()
	for {
		in, err := l.Accept()
		if err != nil {
			if ctx.Err() != nil || errors.Is(err, net.ErrClosed) {
				return nil
			}
			return fmt.Errorf("forward port %d: %w", port, err)
		}
		wg.Go(func() {
			up, err := ws.DialPort(ctx, port)
			if err != nil {
				in.Close()
				if onError != nil {
					onError(err)
				}
				return
			}
			done := context.AfterFunc(ctx, func() { in.Close(); up.Close() })
			defer done()
			splice(in, up)
		})
	}
}

// splice copies a to b and b to a until both directions end, each end
// passed on as a half-close where the other side has one.
func splice(a, b net.Conn) {
	var wg sync.WaitGroup
	half := func(dst, src net.Conn) {
		_, err := io.CopyBuffer(dst, src, make([]byte, 256<<10))
		if cw, ok := dst.(interface{ CloseWrite() error }); ok && err == nil && cw.CloseWrite() == nil {
			return
		}
		dst.Close()
		src.Close()
	}
	wg.Go(func() { half(b, a) })
	wg.Go(func() { half(a, b) })
	wg.Wait()
	a.Close()
	b.Close()
}

// SharePort makes a share of the workspace's port (a URL on the daemon's
// TCP listener that reaches it with a token of its own), or returns the
// one it has. public makes the token the workspace's id and the port,
// which anyone may guess: only when asked for.
func (ws *Workspace) SharePort(ctx context.Context, port int, public bool) (PortShare, error) {
	var out PortShare
	return out, doJSON(ctx, ws, http.MethodPost, ws.path("/shares"), nil, wire.ShareRequest{Port: port, Public: public}, &out)
}

// PortShares lists the workspace's shares by port.
func (ws *Workspace) PortShares(ctx context.Context) ([]PortShare, error) {
	var out []PortShare
	return out, ws.get(ctx, ws.path("/shares"), nil, &out)
}

// UnsharePort revokes the share of the workspace's port: its URL reaches
// nothing from then on.
func (ws *Workspace) UnsharePort(ctx context.Context, port int) error {
	return doJSON(ctx, ws, http.MethodDelete, ws.path("/shares/"+strconv.Itoa(port)), nil, nil, nil)
}
