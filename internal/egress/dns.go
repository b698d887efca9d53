package egress

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"strings"
	"time"

	"github.com/miekg/dns"

	"layerfs.dev/layerfs/internal/netpolicy"
	"layerfs.dev/layerfs/wire"
)

// upstreamTimeout bounds one question to the upstream resolver.
const upstreamTimeout = 3 * time.Second

// listenDNS listens on UDP and TCP at one port of gw and serves both.
func (m *Manager) listenDNS(gw string) (udp, tcp *dns.Server, port int, err error) {
	lc := net.ListenConfig{Control: freebind}
	for range 8 {
		pc, err := lc.ListenPacket(context.Background(), "udp4", gw+":0")
		if err != nil {
			return nil, nil, 0, err
		}
		port = pc.LocalAddr().(*net.UDPAddr).Port
		ln, err := listenFreebind(context.Background(), "tcp4", fmt.Sprintf("%s:%d", gw, port))
		if err != nil {
			pc.Close()
			continue
		}
		h := dns.HandlerFunc(m.serveDNS)
		udp, tcp = &dns.Server{PacketConn: pc, Handler: h}, &dns.Server{Listener: ln, Handler: h}
		m.background.Add(2)
		go func() { defer m.background.Done(); _ = udp.ActivateAndServe() }()
		go func() { defer m.background.Done(); _ = tcp.ActivateAndServe() }()
		return udp, tcp, port, nil
	}
	return nil, nil, 0, fmt.Errorf("no port free on both UDP and TCP")
}

// serveDNS answers one question of a sandbox: an allowed name from the
// upstream resolver, its IPv4 addresses admitted; any other NXDOMAIN.
func (m *Manager) serveDNS(w dns.ResponseWriter, r *dns.Msg) {
	reply := func(code int) {
		msg := new(dns.Msg)
		msg.SetRcode(r, code)
		_ = w.WriteMsg(msg)
	}
	src, err := netip.ParseAddrPort(w.RemoteAddr().String())
	if err != nil {
		reply(dns.RcodeRefused)
		return
	}
	l, n := m.linkByAddr(src.Addr())
	if n == nil {
		reply(dns.RcodeRefused)
		return
	}
	if len(r.Question) != 1 {
		reply(dns.RcodeFormatError)
		return
	}
	q := r.Question[0]
	name := strings.TrimSuffix(strings.ToLower(q.Name), ".")
	pol := policyOf(n)
	if !pol.AllowsName(name) {
		m.event(n, l, wire.NetEvent{Proto: "dns", Name: name, Verdict: wire.VerdictDenied, Reason: "no rule"})
		reply(dns.RcodeNameError)
		return
	}
	if q.Qtype == dns.TypeAAAA {
		// IPv6 is not routed: no address rather than one that fails.
		msg := new(dns.Msg)
		msg.SetReply(r)
		_ = w.WriteMsg(msg)
		return
	}
	resp, err := m.ask(r)
	if err != nil {
		m.log.Debug("egress: upstream", "name", name, "err", err)
		reply(dns.RcodeServerFailure)
		return
	}
	addrs, ttl := m.keepAddrs(n, l, name, pol, resp)
	if len(addrs) > 0 {
		if err := n.admit(name, addrs, ttl); err != nil {
			m.log.Error("egress: admit", "name", name, "err", err)
			reply(dns.RcodeServerFailure)
			return
		}
		strs := make([]string, len(addrs))
		for i, a := range addrs {
			strs[i] = a.String()
		}
		m.event(n, l, wire.NetEvent{Proto: "dns", Name: name, Address: strings.Join(strs, ","), Verdict: wire.VerdictAllowed})
	} else if q.Qtype == dns.TypeA {
		m.event(n, l, wire.NetEvent{Proto: "dns", Name: name, Verdict: wire.VerdictAllowed, Reason: "no address"})
	}
	resp.Id = r.Id
	_ = w.WriteMsg(resp)
}

// ask forwards r to the upstream resolver, over TCP when the UDP answer
// was truncated.
func (m *Manager) ask(r *dns.Msg) (*dns.Msg, error) {
	c := &dns.Client{Net: "udp", Timeout: upstreamTimeout}
	resp, _, err := c.Exchange(r, m.cfg.Upstream)
	if err == nil && resp.Truncated {
		c.Net = "tcp"
		resp, _, err = c.Exchange(r, m.cfg.Upstream)
	}
	return resp, err
}

// keepAddrs filters resp in place: no AAAA anywhere, no A outside the
// answer, and in the answer only the addresses a name may admit (not a
// never-reached range unless a CIDR rule lists it). It returns those
// addresses and the shortest TTL among them.
func (m *Manager) keepAddrs(n *Net, l *Link, name string, pol *netpolicy.Policy, resp *dns.Msg) ([]netip.Addr, time.Duration) {
	var addrs []netip.Addr
	ttl := time.Duration(-1)
	kept := resp.Answer[:0]
	for _, rr := range resp.Answer {
		switch rr := rr.(type) {
		case *dns.AAAA:
			continue
		case *dns.A:
			a, ok := netip.AddrFromSlice(rr.A.To4())
			if !ok {
				continue
			}
			if why := netpolicy.Never(a, m.own); why != "" && !listed(pol, a) {
				m.event(n, l, wire.NetEvent{Proto: "dns", Name: name, Address: a.String(), Verdict: wire.VerdictDenied, Reason: "never (" + why + ")"})
				continue
			}
			addrs = append(addrs, a)
			if t := time.Duration(rr.Hdr.Ttl) * time.Second; ttl < 0 || t < ttl {
				ttl = t
			}
		}
		kept = append(kept, rr)
	}
	resp.Answer = kept
	extra := resp.Extra[:0]
	for _, rr := range resp.Extra {
		if t := rr.Header().Rrtype; t != dns.TypeA && t != dns.TypeAAAA {
			extra = append(extra, rr)
		}
	}
	resp.Extra = extra
	return addrs, ttl
}

// listed reports whether a CIDR rule holds a (on any port).
func listed(pol *netpolicy.Policy, a netip.Addr) bool {
	for _, r := range pol.Nets() {
		if r.Prefix.Contains(a) {
			return true
		}
	}
	return false
}
