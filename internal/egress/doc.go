// Package egress gives the sandboxes of a workspace with network "egress"
// a routed interface to this host that lets through only what the
// workspace's policy (package netpolicy) allows, and shows every decision.
//
// # Shape
//
// A Manager is one daemon's egress. It owns an nftables table of its own
// (inet family; the nft command of Debian's nftables applies it), a DNS
// server and a TCP proxy, both listening on the gateway address that the
// host's end of every sandbox link carries. A Net is one workspace's
// egress: its policy and the addresses its names admitted. A Link is one
// sandbox's veth pair: its end in the sandbox's network namespace (eth0,
// an address of its own, the default route through the gateway) and the
// host's end (the gateway address, a route to the sandbox's address).
//
// The host forwards nothing: IP forwarding stays as it is. In the table's
// prerouting chains, a packet from a sandbox link
//
//   - from another address than its link's is dropped (no spoofing);
//   - of an established connection passes;
//   - to port 53 (UDP or TCP), whatever the address, goes to the Manager's
//     DNS server (DNAT): a sandbox resolves only through it;
//   - of a new TCP connection to an address and port its workspace's sets
//     admit (the CIDR rules, and the addresses the resolver admitted with
//     the answer's lifetime as timeout) goes to the proxy (DNAT); any other
//     is refused at once (a TCP reset; an ICMP error for other protocols)
//     and logged to the Manager's netlink log group, where the Manager
//     reads it as a denied connection;
//   - of IPv6 is dropped.
//
// The proxy takes the connection, reads its original destination
// (SO_ORIGINAL_DST), decides it again with the workspace's policy (the set
// filters only by address and port ranges: the policy is the authority),
// connects from the host's network and copies both ways (splice), counting
// bytes. A change of policy rewrites the workspace's sets in one nftables
// transaction and closes, with a reset, every proxied connection that the
// new policy denies.
//
// The DNS server answers a name a Domain rule allows from the upstream
// resolver (the host's), keeping only IPv4 addresses that are not in a
// never-reached range (netpolicy.Never), and admits them; any other name
// answers NXDOMAIN.
//
// # Fails closed
//
// A sandbox of an egress workspace starts in a network namespace of its
// own with only lo; the Link is added to it before the exec is sent, and a
// Link that cannot be made fails the exec: its network is then none. A
// Manager that cannot have nft, its table, its listeners or its log group
// fails Start, and the platform refuses the mode. The host's end of every
// link forwards nothing, whatever the host's ip_forward. A Manager checks
// every few seconds that its table is there; when it is gone, every link
// is removed and no new one made.
package egress
