package local

import (
	"context"
	"fmt"

	"layerfs.dev/layerfs/internal/egress"
	"layerfs.dev/layerfs/internal/netpolicy"
	"layerfs.dev/layerfs/internal/platforms"
	"layerfs.dev/layerfs/internal/platforms/local/sandbox"
	"layerfs.dev/layerfs/wire"
)

var _ platforms.NetworkChanger = (*Sandbox)(nil)

// SetNetwork makes mode and rules the workspace's network: its next
// execs get it, and its running egress sandboxes the new policy at once
// (their connections it denies are cut). Leaving egress denies
// everything to the sandboxes still linked.
func (s *Sandbox) SetNetwork(_ context.Context, mode string, rules []wire.NetworkRule) error {
	if err := netpolicy.CheckMode(mode, rules); err != nil {
		return err
	}
	if mode == "" {
		mode = wire.NetworkNone
	}
	pol := &netpolicy.Policy{}
	if mode == wire.NetworkEgress {
		var err error
		if pol, err = netpolicy.Parse(rules); err != nil {
			return err
		}
	}
	s.netMu.Lock()
	defer s.netMu.Unlock()
	switch {
	case s.enet != nil:
		if err := s.enet.SetPolicy(pol); err != nil {
			// Its sets were emptied: denied rather than open.
			s.mode = wire.NetworkNone
			return fmt.Errorf("local: network of %s: %w", s.w.ID, err)
		}
	case mode == wire.NetworkEgress:
		// The workspace's egress is made by its first exec; the mode is
		// refused now if there is none to be had.
		if _, err := s.p.egressManager(); err != nil {
			return err
		}
	}
	s.mode, s.pol = mode, pol
	return nil
}

// network sets cfg's network to the workspace's now, making its egress
// at the first egress exec, and returns its mode. An egress that cannot
// be made fails the exec.
func (s *Sandbox) network(cfg *sandbox.Config) (string, error) {
	s.netMu.Lock()
	defer s.netMu.Unlock()
	switch s.mode {
	case wire.NetworkHost:
		cfg.Network = true
	case wire.NetworkEgress:
		if s.enet == nil {
			m, err := s.p.egressManager()
			if err != nil {
				return s.mode, err
			}
			if s.enet, err = m.NewNet(s.pol, s.events); err != nil {
				return s.mode, fmt.Errorf("local: network of %s: %w", s.w.ID, err)
			}
		}
		cfg.Egress = attacher{s.enet}
	}
	return s.mode, nil
}

// attacher links sandboxes to a workspace's egress.
type attacher struct{ n *egress.Net }

func (a attacher) Key() string { return fmt.Sprintf("egress %p", a.n) }

func (a attacher) Attach(pid int) (sandbox.NetLink, error) {
	l, err := a.n.Attach(pid)
	if err != nil {
		return nil, err
	}
	return l, nil
}
