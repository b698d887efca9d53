package main

import (
	"fmt"
	"io"
	"net/netip"
	"strings"

	"github.com/spf13/cobra"

	"layerfs.dev/layerfs/client"
	"layerfs.dev/layerfs/wire"
)

func wsNetworkCmd(a *app) *cobra.Command {
	var allow []string
	cmd := &cobra.Command{
		Use:   "network WS none|egress|host",
		Short: "Change a live workspace's network, at once (egress: what --allow allows)",
		Long: `Change a live workspace's network, at once.

none: a network namespace with only lo. egress: a link to the daemon's egress,
which answers only the names and reaches only the addresses --allow allows
(DOMAIN, *.DOMAIN or CIDR, each with :PORTS or every port); every decision is
an event of 'layerfs ws watch'. host: the host's network namespace, all of it.
Running egress execs get the new rules before the command returns: their
connections the rules deny are cut.`,
		Example: `  layerfs ws network WS egress --allow pypi.org:443 --allow '*.pythonhosted.org:443'
  layerfs ws network WS egress --allow 203.0.113.0/24:8000-8100
  layerfs ws network WS none`,
		Args: args(cobra.ExactArgs(2)),
		RunE: func(cmd *cobra.Command, argv []string) error {
			rules, err := parseRules(allow)
			if err != nil {
				return err
			}
			change := wire.NetworkChange{Mode: argv[1], Egress: rules}
			return a.withWorkspace(cmd, argv[0], func(ws *client.Workspace) error {
				info, err := ws.SetNetwork(cmd.Context(), change)
				if err != nil {
					return err
				}
				return a.emit(info, func(w io.Writer) {
					fmt.Fprintf(w, "network\t%s\n", info.Network)
					for _, r := range info.Egress {
						fmt.Fprintf(w, "allow\t%s\n", ruleString(r))
					}
				})
			})
		},
	}
	cmd.Flags().StringArrayVar(&allow, "allow", nil, "DOMAIN, *.DOMAIN or CIDR, each with :PORTS (443 or 8000-8100, comma-separated) or every port; repeat")
	return cmd
}

// parseRules reads --allow values: NAME[:PORTS] or CIDR[:PORTS]. The
// daemon checks them; this only splits them.
func parseRules(in []string) ([]wire.NetworkRule, error) {
	var out []wire.NetworkRule
	for _, s := range in {
		target, ports, _ := strings.Cut(s, ":")
		if target == "" {
			return nil, usageError{fmt.Errorf("--allow %q: want DOMAIN[:PORTS] or CIDR[:PORTS]", s)}
		}
		r := wire.NetworkRule{Domain: target}
		if _, err := netip.ParsePrefix(target); err == nil {
			r = wire.NetworkRule{CIDR: target}
		} else if _, err := netip.ParseAddr(target); err == nil {
			r = wire.NetworkRule{CIDR: target}
		}
		if ports != "" {
			r.Ports = strings.Split(ports, ",")
		}
		out = append(out, r)
	}
	return out, nil
}

// ruleString is a rule as --allow takes it.
func ruleString(r wire.NetworkRule) string {
	s := r.Domain + r.CIDR
	if len(r.Ports) > 0 {
		s += ":" + strings.Join(r.Ports, ",")
	}
	return s
}
