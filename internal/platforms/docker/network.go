package docker

import (
	"context"
	"fmt"
	"sync"
	"time"

	"layerfs.dev/layerfs/internal/egress"
	"layerfs.dev/layerfs/internal/netpolicy"
	"layerfs.dev/layerfs/internal/platforms"
	"layerfs.dev/layerfs/wire"
	"layerfs.dev/layerfs/wire/errclass"
)

var _ platforms.NetworkChanger = (*Sandbox)(nil)

// startEgress starts the platform's egress, or records why it cannot.
// p.mu is held.
func (p *Platform) startEgress(ctx context.Context) {
	cfg := p.opts.Egress
	if cfg.Logger == nil {
		cfg.Logger = p.log
	}
	m, err := egress.New(cfg)
	if err == nil {
		err = m.Start(ctx)
	}
	if err != nil {
		p.egress, p.egressErr = nil, fmt.Errorf("docker: %w", err)
		p.log.Warn("egress unavailable: workspaces with network egress are refused", "err", err)
		return
	}
	p.egress, p.egressErr = m, nil
}

// egressManager is the platform's egress, or why there is none.
func (p *Platform) egressManager() (*egress.Manager, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.egress == nil {
		if p.egressErr == nil {
			return nil, fmt.Errorf("docker: egress: %w", platforms.ErrNotUp)
		}
		return nil, p.egressErr
	}
	return p.egress, nil
}

// egressDescription is Isolation.Egress.
func (p *Platform) egressDescription() string {
	m, err := p.egressManager()
	if err != nil {
		return "unavailable: " + err.Error()
	}
	return m.Describe() + "; the container's network namespace holds the link"
}

// netState is a workspace container's network: its mode and, once egress
// was asked for, its egress and the container's link to it (one for all
// of the container's execs).
type netState struct {
	p      *Platform
	pid    int // the container's init, whose network namespace is the container's
	events func(wire.NetEvent)

	mu   sync.Mutex
	mode string
	enet *egress.Net
	link *egress.Link
}

// SetNetwork changes the container's network: between none and egress,
// and egress's rules, at once (a container made with none gets its link
// now; one that leaves egress keeps its link with every connection and
// name denied). The host's network is the container's from its creation
// to its end: a change to or from host is refused.
func (s *Sandbox) SetNetwork(_ context.Context, mode string, rules []wire.NetworkRule) error {
	if err := netpolicy.CheckMode(mode, rules); err != nil {
		return err
	}
	if mode == "" {
		mode = wire.NetworkNone
	}
	n := &s.net
	n.mu.Lock()
	defer n.mu.Unlock()
	if (mode == wire.NetworkHost) != s.ws.Network {
		return fmt.Errorf("%w: docker: a container's network is host or not for its whole life: end the workspace and make another", errclass.Unavailable)
	}
	pol := &netpolicy.Policy{}
	if mode == wire.NetworkEgress {
		var err error
		if pol, err = netpolicy.Parse(rules); err != nil {
			return err
		}
	}
	switch {
	case n.enet != nil:
		if err := n.enet.SetPolicy(pol); err != nil {
			n.mode = wire.NetworkNone
			return fmt.Errorf("docker: network of %s: %w", s.ws.ID, err)
		}
	case mode == wire.NetworkEgress:
		m, err := n.p.egressManager()
		if err != nil {
			return err
		}
		if n.enet, err = m.NewNet(pol, n.events); err != nil {
			return fmt.Errorf("docker: network of %s: %w", s.ws.ID, err)
		}
		if n.link, err = n.enet.Attach(n.pid); err != nil {
			_ = n.enet.Close()
			n.enet = nil
			return fmt.Errorf("docker: network of %s: %w", s.ws.ID, err)
		}
	}
	n.mode = mode
	return nil
}

// usage reads the container link's counts now and returns what reads
// them again as an exec's usage: the container's execs share the link,
// so concurrent execs' counts are on each of their receipts.
func (n *netState) usage() func() *wire.NetUsage {
	n.mu.Lock()
	mode, link := n.mode, n.link
	n.mu.Unlock()
	if link == nil || mode != wire.NetworkEgress {
		return func() *wire.NetUsage { return &wire.NetUsage{Mode: mode} }
	}
	u0 := link.Usage()
	return func() *wire.NetUsage {
		u := link.Settled(50 * time.Millisecond) // its connections' last bytes counted
		return &wire.NetUsage{Mode: mode, ConnectionsAllowed: u.ConnectionsAllowed - u0.ConnectionsAllowed,
			ConnectionsDenied: u.ConnectionsDenied - u0.ConnectionsDenied, NamesAllowed: u.NamesAllowed - u0.NamesAllowed,
			NamesDenied: u.NamesDenied - u0.NamesDenied, BytesOut: u.BytesOut - u0.BytesOut, BytesIn: u.BytesIn - u0.BytesIn}
	}
}

// close removes the container's egress.
func (n *netState) close() error {
	n.mu.Lock()
	enet := n.enet
	n.enet, n.link = nil, nil
	n.mu.Unlock()
	if enet == nil {
		return nil
	}
	return enet.Close()
}
