// Package netpolicy is a workspace's network as rules: the modes of
// package wire (none, egress, host) checked, and an egress policy parsed
// from its wire.NetworkRule list into what decides a name and a
// connection.
//
// A decision, in order:
//
//  1. a CIDR rule that holds the address, on the port, allows it;
//  2. an address in a range that is never reached through a name
//     (Never: loopback, link-local, the private and shared ranges,
//     multicast and reserved, the host's own addresses) is denied;
//  3. an address that the resolver admitted for a name a Domain rule
//     allows, on the port, is allowed;
//  4. anything else is denied.
//
// Only IPv4 is routed; an IPv6 rule is refused rather than left
// unenforced.
package netpolicy
