package egress

import (
	"fmt"
	"net/netip"
	"sort"
	"strings"
	"sync"
	"time"

	"layerfs.dev/layerfs/internal/netpolicy"
	"layerfs.dev/layerfs/wire"
	"layerfs.dev/layerfs/wire/errclass"
)

// minAdmit is the shortest time an answer's addresses are admitted for:
// an answer with a TTL of 0 must still serve the connection it was asked
// for.
const minAdmit = 5 * time.Second

// Net is one workspace's egress: its policy, the addresses its sandboxes'
// names admitted and the connections its proxy carries. Its sandboxes'
// Links come from Attach. A Net is safe for concurrent use.
type Net struct {
	m      *Manager
	id     int
	chain  string // ws_ID; its sets are ws_ID_nets and ws_ID_dyn
	events func(wire.NetEvent)

	mu       sync.Mutex
	pol      *netpolicy.Policy
	admitted map[netip.Addr]map[string]time.Time // address -> name -> expiry
	conns    map[*proxied]struct{}
	links    map[*Link]struct{}
	closed   bool
}

// NewNet makes a workspace's egress with policy pol (nil denies all);
// events, when not nil, is called with each decision (it must not
// block).
func (m *Manager) NewNet(pol *netpolicy.Policy, events func(wire.NetEvent)) (*Net, error) {
	if pol == nil {
		pol = &netpolicy.Policy{}
	}
	m.mu.Lock()
	if m.closed || m.nft == "" {
		m.mu.Unlock()
		return nil, fmt.Errorf("%w: the manager is not running", ErrUnavailable)
	}
	m.nextNet++
	n := &Net{m: m, id: m.nextNet, events: events, pol: pol,
		admitted: map[netip.Addr]map[string]time.Time{}, conns: map[*proxied]struct{}{}, links: map[*Link]struct{}{}}
	n.chain = fmt.Sprintf("ws_%d", n.id)
	m.nets[n.id] = n
	m.mu.Unlock()
	script := fmt.Sprintf(`table inet %[1]s {
	set %[2]s_nets { type ipv4_addr . inet_service; flags interval; }
	set %[2]s_dyn { type ipv4_addr . inet_service; flags interval,timeout; }
	chain %[2]s {
		ip daddr . tcp dport @%[2]s_nets accept
		ip daddr . tcp dport @%[2]s_dyn accept
	}
}
%[3]s`, m.table, n.chain, n.setsScript(pol, time.Now()))
	if err := m.run(script); err != nil {
		m.mu.Lock()
		delete(m.nets, n.id)
		m.mu.Unlock()
		return nil, fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	return n, nil
}

// setsScript fills n's sets for pol: its CIDR rules, and the addresses
// admitted for names pol still allows, for what is left of their time.
// n.mu must be held, or n not yet shared.
func (n *Net) setsScript(pol *netpolicy.Policy, now time.Time) string {
	var b strings.Builder
	fmt.Fprintf(&b, "flush set inet %s %s_nets\nflush set inet %[1]s %[2]s_dyn\n", n.m.table, n.chain)
	var elems []string
	for _, r := range pol.Nets() {
		for _, p := range r.Ports {
			elems = append(elems, fmt.Sprintf("%s . %s", r.Prefix, portExpr(p)))
		}
	}
	if len(elems) > 0 {
		fmt.Fprintf(&b, "add element inet %s %s_nets { %s }\n", n.m.table, n.chain, strings.Join(elems, ", "))
	}
	elems = elems[:0]
	for a, names := range n.admitted {
		for name, exp := range names {
			left := exp.Sub(now)
			if left < time.Second || !pol.AllowsName(name) {
				continue
			}
			elems = append(elems, admitElems(a, pol.NamePorts(name), left)...)
		}
	}
	if len(elems) > 0 {
		fmt.Fprintf(&b, "add element inet %s %s_dyn { %s }\n", n.m.table, n.chain, strings.Join(elems, ", "))
	}
	return b.String()
}

func portExpr(p [2]uint16) string {
	if p[0] == p[1] {
		return fmt.Sprint(p[0])
	}
	return fmt.Sprintf("%d-%d", p[0], p[1])
}

func admitElems(a netip.Addr, ports [][2]uint16, ttl time.Duration) []string {
	out := make([]string, 0, len(ports))
	for _, p := range ports {
		out = append(out, fmt.Sprintf("%s . %s timeout %ds", a, portExpr(p), int(ttl.Round(time.Second)/time.Second)))
	}
	return out
}

// Policy is n's policy now.
func (n *Net) Policy() *netpolicy.Policy { return policyOf(n) }

// SetPolicy makes pol n's policy at once: the sets are rewritten in one
// transaction, and every connection the proxy carries that pol denies is
// cut (reset both ways) before it returns.
func (n *Net) SetPolicy(pol *netpolicy.Policy) error {
	if pol == nil {
		pol = &netpolicy.Policy{}
	}
	n.mu.Lock()
	if n.closed {
		n.mu.Unlock()
		return fmt.Errorf("%w: the workspace's egress is closed", errclass.Unavailable)
	}
	now := time.Now()
	for a, names := range n.admitted {
		for name, exp := range names {
			if now.After(exp) || !pol.AllowsName(name) {
				delete(names, name)
			}
		}
		if len(names) == 0 {
			delete(n.admitted, a)
		}
	}
	script := n.setsScript(pol, now)
	n.pol = pol
	var cut []*proxied
	for c := range n.conns {
		if ok, _ := pol.Decide(c.dst.Addr(), int(c.dst.Port()), n.namesLocked(c.dst.Addr(), now), n.m.own); !ok {
			cut = append(cut, c)
		}
	}
	n.mu.Unlock()
	// Sets first: a connection cut must not be made again meanwhile.
	err := n.m.run(script)
	for _, c := range cut {
		c.cut()
	}
	if err != nil {
		// The sets may be the old policy's: no new connection at all
		// rather than one the new policy denies.
		n.m.log.Error("egress: policy sets not written, denying all", "chain", n.chain, "err", err)
		_ = n.m.run(fmt.Sprintf("flush set inet %s %s_nets\nflush set inet %[1]s %[2]s_dyn\n", n.m.table, n.chain))
		return fmt.Errorf("%w: egress policy: %w", ErrUnavailable, err)
	}
	return nil
}

// names are the names that admitted a, still live; n.mu held.
func (n *Net) namesLocked(a netip.Addr, now time.Time) []string {
	var out []string
	for name, exp := range n.admitted[a] {
		if now.Before(exp) {
			out = append(out, name)
		}
	}
	sort.Strings(out)
	return out
}

// decide is the policy's verdict on a connection to dst.
func (n *Net) decide(dst netip.AddrPort) (bool, string, string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	names := n.namesLocked(dst.Addr(), time.Now())
	ok, why := n.pol.Decide(dst.Addr(), int(dst.Port()), names, n.m.own)
	name := ""
	if len(names) > 0 {
		name = names[0]
	}
	return ok, why, name
}

// admit records that name resolved to addrs for ttl and adds them to the
// dynamic set with that timeout.
func (n *Net) admit(name string, addrs []netip.Addr, ttl time.Duration) error {
	if ttl < minAdmit {
		ttl = minAdmit
	}
	n.mu.Lock()
	if n.closed {
		n.mu.Unlock()
		return fmt.Errorf("%w: the workspace's egress is closed", errclass.Unavailable)
	}
	now := time.Now()
	exp := now.Add(ttl)
	fresh := true // every address is admitted for name for over half of ttl
	for _, a := range addrs {
		if n.admitted[a][name].Before(now.Add(ttl / 2)) {
			fresh = false
		}
	}
	if fresh {
		n.mu.Unlock()
		return nil
	}
	ports := n.pol.NamePorts(name)
	var timed, bare []string
	for _, a := range addrs {
		if n.admitted[a] == nil {
			n.admitted[a] = map[string]time.Time{}
		}
		if n.admitted[a][name].Before(exp) {
			n.admitted[a][name] = exp
		}
		timed = append(timed, admitElems(a, ports, ttl)...)
		for _, p := range ports {
			bare = append(bare, fmt.Sprintf("%s . %s", a, portExpr(p)))
		}
	}
	n.mu.Unlock()
	if len(timed) == 0 {
		return nil
	}
	// An element already in the set keeps its timeout on add: add (so
	// that it is there), delete, and add again, in one transaction.
	set := fmt.Sprintf("inet %s %s_dyn", n.m.table, n.chain)
	t, b := strings.Join(timed, ", "), strings.Join(bare, ", ")
	return n.m.run(fmt.Sprintf("add element %s { %s }\ndelete element %s { %s }\nadd element %s { %s }\n", set, t, set, b, set, t))
}

// Close cuts n's connections, removes its links' elements and its chain
// and sets. Links still attached are closed. It can be called more than
// once.
func (n *Net) Close() error {
	if err := n.close(); err != nil {
		return fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	return nil
}

func (n *Net) close() error {
	n.mu.Lock()
	if n.closed {
		n.mu.Unlock()
		return nil
	}
	n.closed = true
	links := make([]*Link, 0, len(n.links))
	for l := range n.links {
		links = append(links, l)
	}
	conns := make([]*proxied, 0, len(n.conns))
	for c := range n.conns {
		conns = append(conns, c)
	}
	n.mu.Unlock()
	for _, c := range conns {
		c.cut()
	}
	for _, l := range links {
		l.Close()
	}
	n.m.mu.Lock()
	delete(n.m.nets, n.id)
	lost := n.m.lost
	n.m.mu.Unlock()
	if lost != nil {
		return nil // its chain and sets went with the table
	}
	return n.m.run(fmt.Sprintf("table inet %[1]s\ndelete chain inet %[1]s %[2]s\ndelete set inet %[1]s %[2]s_nets\ndelete set inet %[1]s %[2]s_dyn\n", n.m.table, n.chain))
}
