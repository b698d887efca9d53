package wire

import "time"

// NetworkRule is one thing a workspace with NetworkEgress may reach:
// exactly one of Domain and CIDR, on Ports.
//
// A Domain is a name ("pypi.org") or a wildcard of its subdomains
// ("*.pythonhosted.org", which is not pythonhosted.org itself): the
// daemon's resolver answers it for the sandbox, and the addresses of its
// answer may be reached for the answer's lifetime. A CIDR ("203.0.113.0/24",
// "198.51.100.7/32") admits its addresses as they are, including those
// never admitted through a name (loopback, link-local, the private ranges,
// the host's own): to reach one, list it by address.
type NetworkRule struct {
	Domain string `json:"domain,omitempty"`
	CIDR   string `json:"cidr,omitempty"`
	// Ports are "443" or "8000-8100"; none means every port.
	Ports []string `json:"ports,omitempty"`
}

// NetworkChange is PUT /v1/workspaces/{id}/network: the workspace's new
// mode and, for NetworkEgress, its rules. It applies at once, to the
// connections of running execs too: one the new network denies is cut.
type NetworkChange struct {
	Mode   string        `json:"mode"`
	Egress []NetworkRule `json:"egress,omitempty"`
}

// Verdicts of a NetEvent.
const (
	VerdictAllowed = "allowed"
	VerdictDenied  = "denied"
)

// EventNet is the kind of a FileEvent that carries a NetEvent: a decision
// of the workspace's egress, on its event stream whatever the prefix.
const EventNet = "net"

// NetEvent is one decision of a workspace's egress: a name its sandbox
// asked the resolver for (Proto "dns"), or a connection (Proto "tcp",
// "udp", ...) to Address and Port.
type NetEvent struct {
	Proto   string `json:"proto"`
	Name    string `json:"name,omitempty"`    // the name asked, or the one that admitted Address
	Address string `json:"address,omitempty"` // "" for a name denied
	Port    int    `json:"port,omitempty"`
	Verdict string `json:"verdict"` // VerdictAllowed or VerdictDenied
	// Reason says why a denial: "no rule", "never (link-local)", ...
	Reason string    `json:"reason,omitempty"`
	Time   time.Time `json:"time"`
}

// NetUsage is an exec's network on its receipt: the mode, and with egress
// the connections and names allowed and denied while it ran and the bytes
// its connections sent (out) and received (in).
type NetUsage struct {
	Mode               string `json:"mode"`
	ConnectionsAllowed int64  `json:"connections_allowed"`
	ConnectionsDenied  int64  `json:"connections_denied"`
	NamesAllowed       int64  `json:"names_allowed"`
	NamesDenied        int64  `json:"names_denied"`
	BytesOut           int64  `json:"bytes_out"`
	BytesIn            int64  `json:"bytes_in"`
}
