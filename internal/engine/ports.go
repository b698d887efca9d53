package engine

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"net"
	"strconv"

	"layerfs.dev/layerfs/internal/platforms"
	"layerfs.dev/layerfs/internal/portfwd"
	"layerfs.dev/layerfs/internal/store"
	"layerfs.dev/layerfs/wire"
	"layerfs.dev/layerfs/wire/errclass"
)

// DialPort connects to port inside the workspace's sandbox, in its network
// namespace (platforms.PortDialer): what a forward and a preview of the
// port carry. The connection is the caller's; it ends when the process
// that accepted it ends it, which ending the workspace does.
func (e *Engine) DialPort(ctx context.Context, id string, port int) (net.Conn, error) {
	if err := portfwd.CheckPort(port); err != nil {
		return nil, err
	}
	w, err := e.get(ctx, id)
	if err != nil {
		return nil, err
	}
	// Held only while the connection is made: a long exec (the server
	// itself) holds w.mu shared for as long as it runs.
	w.mu.RLock()
	sb, plat := w.sb, w.opts.Platform
	w.mu.RUnlock()
	if sb == nil {
		return nil, fmt.Errorf("%w: port %d: workspace %s ended", errclass.NotFound, port, id)
	}
	pd, ok := sb.(platforms.PortDialer)
	if !ok {
		return nil, fmt.Errorf("%w: port %d of %s: platform %s", platforms.ErrNoPorts, port, id, plat)
	}
	c, err := pd.DialPort(ctx, port)
	if err != nil {
		return nil, err
	}
	e.metrics.portDials.Add(1)
	return c, nil
}

// shareTokenBytes is how much randomness a share's token carries.
const shareTokenBytes = 32

// SharePort makes a share of a live workspace's port, or returns the one
// it has (a share asked again with another Public is refused as
// errclass.Exists: revoke it first).
func (e *Engine) SharePort(ctx context.Context, id string, req wire.ShareRequest) (wire.PortShare, error) {
	if err := portfwd.CheckPort(req.Port); err != nil {
		return wire.PortShare{}, err
	}
	if _, err := e.get(ctx, id); err != nil {
		return wire.PortShare{}, err
	}
	have, err := e.db.PortShares(ctx, id)
	if err != nil {
		return wire.PortShare{}, err
	}
	for _, s := range have {
		if s.Port != req.Port {
			continue
		}
		if s.Public != req.Public {
			return wire.PortShare{}, fmt.Errorf("%w: port %d of %s is shared already (public: %v): revoke that share first",
				errclass.Exists, req.Port, id, s.Public)
		}
		return wireShare(s), nil
	}
	token := id + "-" + strconv.Itoa(req.Port)
	if !req.Public {
		var b [shareTokenBytes]byte
		_, _ = rand.Read(b[:])
		token = base64.RawURLEncoding.EncodeToString(b[:])
	}
	s, err := e.db.CreatePortShare(ctx, store.PortShare{Token: token, Workspace: id, Port: req.Port, Public: req.Public})
	if err != nil {
		return wire.PortShare{}, classify(err)
	}
	e.log.Info("port shared", "workspace", id, "port", req.Port, "public", req.Public)
	return wireShare(s), nil
}

// PortShares lists the shares of a workspace's ports.
func (e *Engine) PortShares(ctx context.Context, id string) ([]wire.PortShare, error) {
	if _, err := e.get(ctx, id); err != nil {
		return nil, err
	}
	have, err := e.db.PortShares(ctx, id)
	if err != nil {
		return nil, err
	}
	out := make([]wire.PortShare, 0, len(have))
	for _, s := range have {
		out = append(out, wireShare(s))
	}
	return out, nil
}

// UnsharePort revokes the share of a workspace's port: its token reaches
// nothing from then on. errclass.NotFound when the port is not shared.
func (e *Engine) UnsharePort(ctx context.Context, id string, port int) error {
	if err := portfwd.CheckPort(port); err != nil {
		return err
	}
	if _, err := e.db.Workspace(ctx, id); err != nil {
		return e.notHere(ctx, id, classify(err))
	}
	n, err := e.db.DeletePortShares(ctx, id, port)
	if err != nil {
		return err
	}
	if n == 0 {
		return fmt.Errorf("%w: port %d of %s is not shared", errclass.NotFound, port, id)
	}
	e.log.Info("port share revoked", "workspace", id, "port", port)
	return nil
}

// SharedPort is the workspace and port a share's token reaches;
// errclass.NotFound for a token that reaches none (revoked, or never
// made).
func (e *Engine) SharedPort(ctx context.Context, token string) (string, int, error) {
	s, err := e.db.PortShareByToken(ctx, token)
	if errors.Is(err, store.ErrNotFound) {
		return "", 0, fmt.Errorf("%w: no such share (revoked, or never made)", errclass.NotFound)
	}
	if err != nil {
		return "", 0, err
	}
	return s.Workspace, s.Port, nil
}

func wireShare(s store.PortShare) wire.PortShare {
	return wire.PortShare{Workspace: s.Workspace, Port: s.Port, Token: s.Token, Path: wire.SharePrefix + s.Token + "/",
		Public: s.Public, Created: s.Created}
}
