package netpolicy

import (
	"errors"
	"net/netip"
	"strings"
	"testing"

	"layerfs.dev/layerfs/wire"
	"layerfs.dev/layerfs/wire/errclass"
)

func TestParseRefuses(t *testing.T) {
	for _, tc := range []struct {
		rule wire.NetworkRule
		want string
	}{
		{wire.NetworkRule{Domain: "exa mple.com"}, "label"},
		{wire.NetworkRule{Domain: "*.com"}, "two labels"},
		{wire.NetworkRule{Domain: "a.*.example.com"}, "label"},
		{wire.NetworkRule{Domain: "*"}, "label"},
		{wire.NetworkRule{Domain: "1.2.3.4"}, "is an address"},
		{wire.NetworkRule{CIDR: "0.0.0.0/0"}, "covers too much"},
		{wire.NetworkRule{CIDR: "128.0.0.0/1"}, "covers too much"},
		{wire.NetworkRule{CIDR: "2001:db8::/32"}, "only IPv4"},
		{wire.NetworkRule{CIDR: "nonsense"}, "IPv4 prefix"},
		{wire.NetworkRule{CIDR: "203.0.113.0/24", Ports: []string{"0"}}, "port \"0\""},
		{wire.NetworkRule{CIDR: "203.0.113.0/24", Ports: []string{"65536"}}, "port"},
		{wire.NetworkRule{CIDR: "203.0.113.0/24", Ports: []string{"90-80"}}, "port"},
		{wire.NetworkRule{Domain: "a.example", CIDR: "203.0.113.0/24"}, "both"},
		{wire.NetworkRule{}, "neither"},
	} {
		_, err := Parse([]wire.NetworkRule{tc.rule})
		if err == nil || !errors.Is(err, errclass.Invalid) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Parse(%+v) = %v, want an invalid error saying %q", tc.rule, err, tc.want)
		}
	}
	if err := CheckMode("bridge", nil); !errors.Is(err, errclass.Invalid) {
		t.Errorf("CheckMode(bridge) = %v, want invalid", err)
	}
	if err := CheckMode(wire.NetworkHost, []wire.NetworkRule{{Domain: "a.example"}}); !errors.Is(err, errclass.Invalid) {
		t.Errorf("CheckMode(host, rules) = %v, want invalid", err)
	}
}

func TestDecide(t *testing.T) {
	p, err := Parse([]wire.NetworkRule{
		{Domain: "PyPI.org."},
		{Domain: "*.pythonhosted.org", Ports: []string{"443"}},
		{CIDR: "10.1.2.0/24", Ports: []string{"8000-8100"}},
		{CIDR: "198.18.0.9"},
	})
	if err != nil {
		t.Fatal(err)
	}
	own := func(a netip.Addr) bool { return a == netip.MustParseAddr("198.51.100.1") }
	for _, tc := range []struct {
		addr  string
		port  int
		names []string
		want  bool
	}{
		{"203.0.113.5", 443, []string{"pypi.org"}, true},
		{"203.0.113.5", 22, []string{"pypi.org"}, true},
		{"203.0.113.5", 443, []string{"files.pythonhosted.org"}, true},
		{"203.0.113.5", 80, []string{"files.pythonhosted.org"}, false},
		{"203.0.113.5", 443, []string{"pythonhosted.org"}, false},
		{"203.0.113.5", 443, nil, false},
		{"10.1.2.3", 8050, nil, true},
		{"10.1.2.3", 80, nil, false},
		{"10.1.3.3", 8050, []string{"pypi.org"}, false}, // a name does not admit a private address
		{"127.0.0.1", 443, []string{"pypi.org"}, false},
		{"169.254.169.254", 80, []string{"pypi.org"}, false},
		{"198.51.100.1", 443, []string{"pypi.org"}, false},
		{"198.18.0.9", 1, nil, true},
	} {
		got, why := p.Decide(netip.MustParseAddr(tc.addr), tc.port, tc.names, own)
		if got != tc.want {
			t.Errorf("Decide(%s:%d, %v) = %v (%s), want %v", tc.addr, tc.port, tc.names, got, why, tc.want)
		}
	}
	if !p.AllowsName("a.b.pythonhosted.org") || p.AllowsName("evilpypi.org") || !p.AllowsName("pypi.org") {
		t.Error("AllowsName: wrong answer for a wildcard, a neighbour or a name")
	}
}
