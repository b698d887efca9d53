package egress

import (
	"fmt"
	"net"
	"net/netip"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"

	"layerfs.dev/layerfs/wire"
)

// Link is one sandbox's interface to the egress: a veth pair whose end
// in the sandbox's network namespace is eth0 with an address of its own
// and the default route through the gateway. The pair goes away with the
// namespace; Close removes the Link's elements from the table.
type Link struct {
	net  *Net
	name string // the host's end
	addr netip.Addr
	idx  int // the host end's ifindex

	connsAllowed, connsDenied, namesAllowed, namesDenied, bytesOut, bytesIn atomic.Int64
	// open counts the link's proxied connections whose bytes are not all
	// counted yet: the proxy counts a copy's bytes when it returns.
	open      atomic.Int64
	closeOnce sync.Once
}

// Addr is the sandbox's address.
func (l *Link) Addr() netip.Addr { return l.addr }

// Name is the host's end of the link.
func (l *Link) Name() string { return l.name }

func (l *Link) count(dnsEv, allowed bool) {
	switch {
	case dnsEv && allowed:
		l.namesAllowed.Add(1)
	case dnsEv:
		l.namesDenied.Add(1)
	case allowed:
		l.connsAllowed.Add(1)
	default:
		l.connsDenied.Add(1)
	}
}

// Usage is what the link's sandbox did so far (Mode egress).
func (l *Link) Usage() wire.NetUsage {
	return wire.NetUsage{Mode: wire.NetworkEgress,
		ConnectionsAllowed: l.connsAllowed.Load(), ConnectionsDenied: l.connsDenied.Load(),
		NamesAllowed: l.namesAllowed.Load(), NamesDenied: l.namesDenied.Load(),
		BytesOut: l.bytesOut.Load(), BytesIn: l.bytesIn.Load()}
}

// Settled is Usage once the link's proxied connections have ended, or
// after wait if some stay open (a service's): when an exec's command ends,
// its connections' last bytes are counted a moment after.
func (l *Link) Settled(wait time.Duration) wire.NetUsage {
	for deadline := time.Now().Add(wait); l.open.Load() > 0 && time.Now().Before(deadline); {
		time.Sleep(time.Millisecond)
	}
	return l.Usage()
}

// Attach gives the network namespace of process pid (a sandbox's init,
// in a namespace of its own with only lo) a link to n. On error the
// namespace has no link: it keeps no network.
func (n *Net) Attach(pid int) (*Link, error) {
	m := n.m
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		return nil, fmt.Errorf("%w: the manager is closed", ErrUnavailable)
	}
	if m.lost != nil {
		err := m.lost
		m.mu.Unlock()
		return nil, err
	}
	m.nextLink++
	name := fmt.Sprintf("%s%x", m.prefix, m.nextLink)
	m.mu.Unlock()
	if len(name) > 15 {
		return nil, fmt.Errorf("%w: link name %q too long", ErrUnavailable, name)
	}
	l, err := n.attach(pid, name)
	if err != nil {
		if hl, lerr := netlink.LinkByName(name); lerr == nil {
			_ = netlink.LinkDel(hl) // its peer goes with it
		}
		return nil, fmt.Errorf("%w: sandbox link: %w", ErrUnavailable, err)
	}
	return l, nil
}

func (n *Net) attach(pid int, name string) (*Link, error) {
	m := n.m
	gw := m.cfg.Gateway
	la := netlink.NewLinkAttrs()
	la.Name = name
	veth := &netlink.Veth{LinkAttrs: la, PeerName: "eth0", PeerNamespace: netlink.NsPid(pid)}
	if err := netlink.LinkAdd(veth); err != nil {
		return nil, fmt.Errorf("veth: %w", err)
	}
	host, err := netlink.LinkByName(name)
	if err != nil {
		return nil, err
	}
	// No IPv6 on the host's end: nothing of the sandbox's arrives as v6.
	if err := os.WriteFile("/proc/sys/net/ipv6/conf/"+name+"/disable_ipv6", []byte("1"), 0); err != nil && !os.IsNotExist(err) {
		return nil, fmt.Errorf("disable ipv6: %w", err)
	}
	// Nothing that arrives on it is forwarded, whatever the host's
	// ip_forward (Docker turns it on): without the table a sandbox's
	// packets still go nowhere but the host.
	if err := os.WriteFile("/proc/sys/net/ipv4/conf/"+name+"/forwarding", []byte("0"), 0); err != nil {
		return nil, fmt.Errorf("no forwarding: %w", err)
	}
	if err := netlink.AddrAdd(host, &netlink.Addr{IPNet: hostNet(gw)}); err != nil {
		return nil, fmt.Errorf("gateway address: %w", err)
	}
	if err := netlink.LinkSetUp(host); err != nil {
		return nil, err
	}
	addr, err := m.routeTo(host)
	if err != nil {
		return nil, err
	}
	l := &Link{net: n, name: name, addr: addr, idx: host.Attrs().Index}
	ns, err := netns.GetFromPid(pid)
	if err != nil {
		return nil, fmt.Errorf("sandbox namespace: %w", err)
	}
	defer ns.Close()
	h, err := netlink.NewHandleAt(ns)
	if err != nil {
		return nil, fmt.Errorf("sandbox namespace: %w", err)
	}
	defer h.Close()
	peer, err := h.LinkByName("eth0")
	if err != nil {
		return nil, fmt.Errorf("sandbox end: %w", err)
	}
	if err := h.AddrAdd(peer, &netlink.Addr{IPNet: hostNet(addr)}); err != nil {
		return nil, fmt.Errorf("sandbox address: %w", err)
	}
	if err := h.LinkSetUp(peer); err != nil {
		return nil, err
	}
	if err := h.RouteAdd(&netlink.Route{LinkIndex: peer.Attrs().Index, Dst: hostNet(gw), Scope: netlink.SCOPE_LINK}); err != nil {
		return nil, fmt.Errorf("sandbox route to the gateway: %w", err)
	}
	if err := h.RouteAdd(&netlink.Route{LinkIndex: peer.Attrs().Index, Gw: net.IP(gw.AsSlice())}); err != nil {
		return nil, fmt.Errorf("sandbox default route: %w", err)
	}
	n.mu.Lock()
	if n.closed {
		n.mu.Unlock()
		return nil, fmt.Errorf("the workspace's egress is closed")
	}
	n.links[l] = struct{}{}
	n.mu.Unlock()
	m.mu.Lock()
	m.links[addr], m.byIndex[l.idx] = l, l
	m.mu.Unlock()
	err = m.run(fmt.Sprintf("add element inet %[1]s links { %[2]q : jump %[3]s }\nadd element inet %[1]s addrs { %[2]q . %[4]s }\n",
		m.table, name, n.chain, addr))
	if err != nil {
		l.forget()
		return nil, err
	}
	return l, nil
}

// routeTo picks a free sandbox address and routes it to the host end.
func (m *Manager) routeTo(host netlink.Link) (netip.Addr, error) {
	base := m.cfg.Subnet.Addr().As4()
	size := uint32(1) << (32 - m.cfg.Subnet.Bits())
	for range 64 {
		m.mu.Lock()
		m.nextAddr++
		off := m.nextAddr % size
		m.mu.Unlock()
		if off == 0 || off == size-1 {
			continue
		}
		v := uint32(base[0])<<24 | uint32(base[1])<<16 | uint32(base[2])<<8 | uint32(base[3]) + off
		a := netip.AddrFrom4([4]byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)})
		m.mu.Lock()
		_, taken := m.links[a]
		m.mu.Unlock()
		if taken {
			continue
		}
		err := netlink.RouteAdd(&netlink.Route{LinkIndex: host.Attrs().Index, Dst: hostNet(a), Scope: netlink.SCOPE_LINK})
		if err == nil {
			return a, nil
		}
		if !os.IsExist(err) {
			return netip.Addr{}, fmt.Errorf("route to the sandbox: %w", err)
		}
	}
	return netip.Addr{}, fmt.Errorf("no free address in %s", m.cfg.Subnet)
}

func hostNet(a netip.Addr) *net.IPNet {
	return &net.IPNet{IP: net.IP(a.AsSlice()), Mask: net.CIDRMask(32, 32)}
}

// forget drops the link from the Net and the Manager.
func (l *Link) forget() {
	n, m := l.net, l.net.m
	n.mu.Lock()
	delete(n.links, l)
	n.mu.Unlock()
	m.mu.Lock()
	if m.links[l.addr] == l {
		delete(m.links, l.addr)
	}
	if m.byIndex[l.idx] == l {
		delete(m.byIndex, l.idx)
	}
	m.mu.Unlock()
}

// Close removes the link: its veth pair (if its namespace still holds it)
// and its elements of the table. It can be called more than once.
func (l *Link) Close() {
	l.closeOnce.Do(func() {
		l.forget()
		if hl, err := netlink.LinkByIndex(l.idx); err == nil && hl.Attrs().Name == l.name {
			_ = netlink.LinkDel(hl)
		}
		m := l.net.m
		m.mu.Lock()
		lost := m.lost != nil
		m.mu.Unlock()
		if lost {
			return
		}
		err := m.run(fmt.Sprintf("delete element inet %[1]s links { %[2]q }\ndelete element inet %[1]s addrs { %[2]q . %[3]s }\n", m.table, l.name, l.addr))
		if err != nil {
			m.log.Warn("egress: link elements", "link", l.name, "err", err)
		}
	})
}
