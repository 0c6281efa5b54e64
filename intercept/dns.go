package intercept

import "mcpintercept/origin"

func init() {
	register(Factory{
		Name:        origin.DNS,
		New:         newDNS,
		Transparent: func(Options) bool { return true },
		Recovery: func(Options) string {
			return "the appliance's DNS server answers the configured names with virtual IPs (VIPs) from its pools; nftables tproxy steers the pools to a transparent listener, whose accepted socket's local address is the VIP and port; the VIP table gives the name behind it (the engine's Origin.Host), a TLS client must send that name as its SNI, and the name is resolved through the upstream resolvers when the appliance dials (its addresses checked against upstream_deny) on the port the client used"
		},
		// The same table and routing as nftables-tproxy; the VIP journal is state, not steering.
		Sweeps: []Sweep{sweepNftables, sweepRouting},
	})
}
