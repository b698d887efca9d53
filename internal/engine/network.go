package engine

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"layerfs.dev/layerfs/internal/netpolicy"
	"layerfs.dev/layerfs/internal/platforms"
	"layerfs.dev/layerfs/wire"
	"layerfs.dev/layerfs/wire/errclass"
)

// netState is a live workspace's network: what its sandboxes get now,
// which a change makes at once, and the watchers of its egress decisions.
// It has a lock of its own: a change must not wait for the execs that
// hold the workspace's.
type netState struct {
	mu    sync.Mutex
	mode  string
	rules []wire.NetworkRule
	// saved: the record holds mode and rules (a change is recorded once
	// no exec holds the workspace).
	saved bool

	subMu sync.Mutex
	subs  map[chan wire.NetEvent]struct{}
}

// now is the network's mode and rules.
func (n *netState) now() (string, []wire.NetworkRule) {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.mode, slices.Clone(n.rules)
}

// netEventBuffer is how many decisions a slow watcher may lag behind by
// before it loses some.
const netEventBuffer = 256

// subscribe returns a channel of the workspace's decisions and its end.
func (n *netState) subscribe() (<-chan wire.NetEvent, func()) {
	c := make(chan wire.NetEvent, netEventBuffer)
	n.subMu.Lock()
	if n.subs == nil {
		n.subs = map[chan wire.NetEvent]struct{}{}
	}
	n.subs[c] = struct{}{}
	n.subMu.Unlock()
	return c, func() {
		n.subMu.Lock()
		delete(n.subs, c)
		n.subMu.Unlock()
	}
}

// publish hands ev to every watcher that has room for it.
func (n *netState) publish(ev wire.NetEvent) {
	n.subMu.Lock()
	defer n.subMu.Unlock()
	for c := range n.subs {
		select {
		case c <- ev:
		default:
		}
	}
}

// netMetrics count the egress decisions of every workspace.
type netMetrics struct {
	namesAllowed, namesDenied, connsAllowed, connsDenied atomic.Int64
	bytesOut, bytesIn                                    atomic.Int64
}

func (m *netMetrics) observe(ev wire.NetEvent) {
	allowed := ev.Verdict == wire.VerdictAllowed
	switch {
	case ev.Proto == "dns" && allowed:
		m.namesAllowed.Add(1)
	case ev.Proto == "dns":
		m.namesDenied.Add(1)
	case allowed:
		m.connsAllowed.Add(1)
	default:
		m.connsDenied.Add(1)
	}
}

// netEvents is the function a workspace's platform calls with each
// decision of its egress.
func (e *Engine) netEvents(w *workspace) func(wire.NetEvent) {
	return func(ev wire.NetEvent) {
		e.metrics.net.observe(ev)
		w.net.publish(ev)
	}
}

// checkNetwork refuses a mode the workspace's platform cannot give.
func (e *Engine) checkNetwork(platform, mode string, rules []wire.NetworkRule) error {
	if err := netpolicy.Check(mode, rules); err != nil {
		return err
	}
	if mode == wire.NetworkEgress && !e.plats[platform].Features().Egress {
		why := "it has no egress"
		if iso, ok := e.plats[platform].(platforms.Isolator); ok {
			if i, err := iso.Isolation(context.Background()); err == nil && i.Egress != "" {
				why = i.Egress
			}
		}
		return fmt.Errorf("%w: network egress on platform %s: %s", errclass.Unavailable, platform, why)
	}
	return nil
}

// SetNetwork changes a live workspace's network: its next execs get
// change's mode and rules, and its running egress sandboxes the new
// policy at once, their connections that it denies cut. A bad change
// (class invalid), or one the platform cannot make (unavailable), leaves
// the network as it was.
func (e *Engine) SetNetwork(ctx context.Context, id string, change wire.NetworkChange) (wire.Workspace, error) {
	w, err := e.get(ctx, id)
	if err != nil {
		return wire.Workspace{}, err
	}
	mode := change.Mode
	if mode == "" {
		return wire.Workspace{}, fmt.Errorf("%w: network: a mode is required (%q, %q or %q)", errclass.Invalid, wire.NetworkNone, wire.NetworkEgress, wire.NetworkHost)
	}
	if err := e.checkNetwork(w.opts.Platform, mode, change.Egress); err != nil {
		return wire.Workspace{}, err
	}
	pol, _ := netpolicy.Parse(change.Egress)
	rules := pol.Rules()
	if mode != wire.NetworkEgress {
		rules = nil
	}
	w.net.mu.Lock()
	w.mu.RLock()
	sb := w.sb
	w.mu.RUnlock()
	nc, ok := sb.(platforms.NetworkChanger)
	if sb == nil || !ok {
		w.net.mu.Unlock()
		return wire.Workspace{}, fmt.Errorf("%w: platform %s cannot change a live workspace's network", errclass.Unavailable, w.opts.Platform)
	}
	if err := nc.SetNetwork(ctx, mode, rules); err != nil {
		w.net.mu.Unlock()
		return wire.Workspace{}, fmt.Errorf("network of %s: %w", id, err)
	}
	w.net.mode, w.net.rules, w.net.saved = mode, rules, false
	w.net.mu.Unlock()
	e.log.Info("workspace network", "id", id, "mode", mode, "rules", len(rules))
	go e.saveNetwork(w)
	w.mu.RLock()
	info := w.info()
	w.mu.RUnlock()
	return info, nil
}

// saveNetwork records the workspace's network once no exec holds it, so
// that a remount gives the same; a workspace that ends first needs none.
func (e *Engine) saveNetwork(w *workspace) {
	for {
		if w.mu.TryLock() {
			break
		}
		time.Sleep(50 * time.Millisecond)
		e.mu.Lock()
		live := e.live[w.rec.ID] == w
		e.mu.Unlock()
		if !live {
			return
		}
	}
	defer w.mu.Unlock()
	if w.sb == nil {
		return
	}
	if err := e.save(context.Background(), w); err != nil {
		e.log.Warn("workspace network not recorded", "id", w.rec.ID, "err", err)
	}
}

// syncNetwork copies the live network into w.opts before the record is
// written; w.mu is held.
func (w *workspace) syncNetwork() {
	w.net.mu.Lock()
	defer w.net.mu.Unlock()
	if w.net.mode == "" {
		return
	}
	w.opts.Network, w.opts.Egress, w.net.saved = w.net.mode, w.net.rules, true
}
