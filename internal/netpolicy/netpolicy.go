package netpolicy

import (
	"errors"
	"fmt"
	"net/netip"
	"strconv"
	"strings"

	"layerfs.dev/layerfs/wire"
	"layerfs.dev/layerfs/wire/errclass"
)

// MaxRules bounds a policy's rules.
const MaxRules = 256

// minPrefixBits is the shortest CIDR a rule may name: a shorter one
// covers so much of the address space that it is the host network by
// another name.
const minPrefixBits = 8

// CheckMode refuses a mode that is not one of wire's, and rules on a mode
// other than egress.
func CheckMode(mode string, rules []wire.NetworkRule) error {
	switch mode {
	case "", wire.NetworkNone, wire.NetworkHost:
		if len(rules) > 0 {
			return fmt.Errorf("%w: egress rules need network %q, not %q", errclass.Invalid, wire.NetworkEgress, mode)
		}
		return nil
	case wire.NetworkEgress:
		return nil
	}
	return fmt.Errorf("%w: network %q: want %q, %q or %q", errclass.Invalid, mode, wire.NetworkNone, wire.NetworkEgress, wire.NetworkHost)
}

// Check is CheckMode and, for egress, Parse: the error of a change that
// must leave the workspace's network as it was.
func Check(mode string, rules []wire.NetworkRule) error {
	if err := CheckMode(mode, rules); err != nil {
		return err
	}
	_, err := Parse(rules)
	return err
}

// portRange is an inclusive range of ports.
type portRange struct{ lo, hi uint16 }

// ports is a rule's ports; empty means all.
type ports []portRange

func (ps ports) has(port int) bool {
	if len(ps) == 0 {
		return true
	}
	for _, r := range ps {
		if port >= int(r.lo) && port <= int(r.hi) {
			return true
		}
	}
	return false
}

// Ranges are the ports as inclusive ranges; one range 1-65535 for all.
func (ps ports) ranges() [][2]uint16 {
	if len(ps) == 0 {
		return [][2]uint16{{1, 65535}}
	}
	out := make([][2]uint16, len(ps))
	for i, r := range ps {
		out[i] = [2]uint16{r.lo, r.hi}
	}
	return out
}

type domainRule struct {
	name     string // lower case, no trailing dot; the suffix for a wildcard
	wildcard bool   // matches names under name, not name itself
	ports    ports
}

type netRule struct {
	prefix netip.Prefix
	ports  ports
}

// Policy is an egress policy, parsed. The zero Policy denies everything.
type Policy struct {
	rules   []wire.NetworkRule // as given, normalized
	domains []domainRule
	nets    []netRule
}

// Rules are the policy's rules, normalized (names in lower case).
func (p *Policy) Rules() []wire.NetworkRule { return p.rules }

// Parse checks rules and returns their policy, or every problem at once,
// each naming its rule, of class errclass.Invalid.
func Parse(rules []wire.NetworkRule) (*Policy, error) {
	if len(rules) > MaxRules {
		return nil, fmt.Errorf("%w: %d egress rules: at most %d", errclass.Invalid, len(rules), MaxRules)
	}
	p := &Policy{}
	var errs []error
	for i, r := range rules {
		ps, err := parsePorts(r.Ports)
		if err != nil {
			errs = append(errs, fmt.Errorf("egress[%d]: %w", i, err))
			continue
		}
		switch {
		case r.Domain != "" && r.CIDR != "":
			errs = append(errs, fmt.Errorf("egress[%d]: both domain and cidr: one rule names one", i))
		case r.Domain != "":
			d, err := parseDomain(r.Domain)
			if err != nil {
				errs = append(errs, fmt.Errorf("egress[%d]: %w", i, err))
				continue
			}
			d.ports = ps
			p.domains = append(p.domains, d)
			r.Domain = strings.TrimSuffix(strings.ToLower(r.Domain), ".")
		case r.CIDR != "":
			pfx, err := parseCIDR(r.CIDR)
			if err != nil {
				errs = append(errs, fmt.Errorf("egress[%d]: %w", i, err))
				continue
			}
			p.nets = append(p.nets, netRule{prefix: pfx, ports: ps})
			r.CIDR = pfx.String()
		default:
			errs = append(errs, fmt.Errorf("egress[%d]: neither domain nor cidr", i))
			continue
		}
		p.rules = append(p.rules, r)
	}
	if len(errs) > 0 {
		return nil, fmt.Errorf("%w: %w", errclass.Invalid, errors.Join(errs...))
	}
	return p, nil
}

func parsePorts(in []string) (ports, error) {
	var out ports
	for _, s := range in {
		lo, hi, isRange := strings.Cut(s, "-")
		a, err1 := strconv.Atoi(lo)
		b := a
		var err2 error
		if isRange {
			b, err2 = strconv.Atoi(hi)
		}
		if err1 != nil || err2 != nil || a < 1 || b > 65535 || a > b {
			return nil, fmt.Errorf("port %q: want a port 1-65535 or a range LOW-HIGH within it", s)
		}
		out = append(out, portRange{uint16(a), uint16(b)})
	}
	return out, nil
}

func parseDomain(s string) (domainRule, error) {
	name := strings.TrimSuffix(strings.ToLower(s), ".")
	d := domainRule{name: name}
	if rest, ok := strings.CutPrefix(name, "*."); ok {
		d.name, d.wildcard = rest, true
		if !strings.Contains(rest, ".") {
			return d, fmt.Errorf("domain %q: a wildcard needs at least two labels after \"*.\" (it would cover a whole top-level domain)", s)
		}
	}
	if len(d.name) == 0 || len(d.name) > 253 {
		return d, fmt.Errorf("domain %q: want a DNS name of 1 to 253 characters, or \"*.\" and one", s)
	}
	for _, label := range strings.Split(d.name, ".") {
		if !validLabel(label) {
			return d, fmt.Errorf("domain %q: label %q: want 1 to 63 of a-z, 0-9 and -, not starting or ending with - (a wildcard only as a leading \"*.\")", s, label)
		}
	}
	if _, err := netip.ParseAddr(d.name); err == nil {
		return d, fmt.Errorf("domain %q is an address: name it as a cidr (%s/32)", s, d.name)
	}
	return d, nil
}

func validLabel(l string) bool {
	if len(l) == 0 || len(l) > 63 || l[0] == '-' || l[len(l)-1] == '-' {
		return false
	}
	for _, c := range l {
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
			return false
		}
	}
	return true
}

func parseCIDR(s string) (netip.Prefix, error) {
	pfx, err := netip.ParsePrefix(s)
	if err != nil {
		a, aerr := netip.ParseAddr(s)
		if aerr != nil {
			return pfx, fmt.Errorf("cidr %q: want an IPv4 prefix such as 203.0.113.0/24", s)
		}
		pfx = netip.PrefixFrom(a, a.BitLen())
	}
	if !pfx.Addr().Is4() {
		return pfx, fmt.Errorf("cidr %q: only IPv4 is routed to sandboxes (IPv6 is denied)", s)
	}
	if pfx.Bits() < minPrefixBits {
		return pfx, fmt.Errorf("cidr %q covers too much (shorter than /%d): that is the host network, ask for network %q by name", s, minPrefixBits, wire.NetworkHost)
	}
	return pfx.Masked(), nil
}

// AllowsName reports whether a Domain rule allows name (case and a
// trailing dot ignored).
func (p *Policy) AllowsName(name string) bool {
	_, ok := p.domainFor(name)
	return ok
}

func (p *Policy) domainFor(name string) (domainRule, bool) {
	name = strings.TrimSuffix(strings.ToLower(name), ".")
	for _, d := range p.domains {
		if d.wildcard && strings.HasSuffix(name, "."+d.name) || !d.wildcard && name == d.name {
			return d, true
		}
	}
	return domainRule{}, false
}

// Decide says whether a connection to addr:port is allowed, given the
// names the resolver admitted addr for (in this sandbox, still live),
// and why not. own reports the host's own addresses (may be nil).
func (p *Policy) Decide(addr netip.Addr, port int, names []string, own func(netip.Addr) bool) (allowed bool, reason string) {
	addr = addr.Unmap()
	for _, n := range p.nets {
		if n.prefix.Contains(addr) && n.ports.has(port) {
			return true, "cidr " + n.prefix.String()
		}
	}
	if why := Never(addr, own); why != "" {
		return false, "never (" + why + ")"
	}
	for _, name := range names {
		if d, ok := p.domainFor(name); ok && d.ports.has(port) {
			return true, "domain " + name
		}
	}
	if len(names) > 0 {
		return false, "port not allowed for " + names[0]
	}
	return false, "no rule"
}

// NetRange is a CIDR rule's addresses and ports, for a packet filter.
type NetRange struct {
	Prefix netip.Prefix
	Ports  [][2]uint16 // inclusive ranges
}

// Nets are the CIDR rules as address and port ranges.
func (p *Policy) Nets() []NetRange {
	out := make([]NetRange, len(p.nets))
	for i, n := range p.nets {
		out[i] = NetRange{Prefix: n.prefix, Ports: n.ports.ranges()}
	}
	return out
}

// NamePorts are the ports a Domain rule allows name on, as inclusive
// ranges (the union of the rules that match it), or nil when none does.
func (p *Policy) NamePorts(name string) [][2]uint16 {
	name = strings.TrimSuffix(strings.ToLower(name), ".")
	var out [][2]uint16
	for _, d := range p.domains {
		if d.wildcard && strings.HasSuffix(name, "."+d.name) || !d.wildcard && name == d.name {
			out = append(out, d.ports.ranges()...)
		}
	}
	return out
}

// never are the ranges no name admits.
var never = []struct {
	pfx  netip.Prefix
	name string
}{
	{netip.MustParsePrefix("0.0.0.0/8"), "this network"},
	{netip.MustParsePrefix("127.0.0.0/8"), "loopback"},
	{netip.MustParsePrefix("169.254.0.0/16"), "link-local"},
	{netip.MustParsePrefix("10.0.0.0/8"), "private"},
	{netip.MustParsePrefix("172.16.0.0/12"), "private"},
	{netip.MustParsePrefix("192.168.0.0/16"), "private"},
	{netip.MustParsePrefix("100.64.0.0/10"), "shared address space"},
	{netip.MustParsePrefix("192.0.0.0/24"), "protocol assignments"},
	{netip.MustParsePrefix("224.0.0.0/4"), "multicast"},
	{netip.MustParsePrefix("240.0.0.0/4"), "reserved"},
}

// NeverPrefixes are the ranges that no name admits, whatever the host.
func NeverPrefixes() []netip.Prefix {
	out := make([]netip.Prefix, len(never))
	for i, n := range never {
		out[i] = n.pfx
	}
	return out
}

// Never says why addr is never reached through a name ("" when it may
// be): it is in one of the special ranges, is not IPv4, or is one of the
// host's own addresses (own, when not nil).
func Never(addr netip.Addr, own func(netip.Addr) bool) string {
	addr = addr.Unmap()
	if !addr.Is4() {
		return "not IPv4"
	}
	for _, n := range never {
		if n.pfx.Contains(addr) {
			return n.name
		}
	}
	if own != nil && own(addr) {
		return "the host's own address"
	}
	return ""
}
