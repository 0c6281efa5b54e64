package intercept

import (
	"mcpintercept/intercept/dns"
	"mcpintercept/origin"
)

func init() {
	register(Factory{
		Name:        origin.DNS,
		New:         newDNS,
		Transparent: func(Options) bool { return true },
		Recovery: func(o Options) string {
			return dnsRecovery + dnsAssignment(o)
		},
		// The same table and routing as nftables-tproxy; the VIP journal is state, not steering.
		Sweeps: []Sweep{sweepNftables, sweepRouting},
	})
}

// dnsAssignment is what declare adds for dns.vip_assignment: hash (nothing for sequential).
func dnsAssignment(o Options) string {
	if o.DNS.VIPAssignment != dns.AssignHash {
		return ""
	}
	return "; a new name's VIP is a function of the name and the pool (dns.vip_assignment: hash), so replicas with the same pools answer it the same unless it collided with another name there"
}

const dnsRecovery = "the appliance's DNS server answers the configured names with virtual IPs (VIPs) from its pools; nftables tproxy steers the pools to a transparent listener, whose accepted socket's local address is the VIP and port; the VIP table gives the name behind it (the engine's Origin.Host), a TLS client must send that name as its SNI, and the name is resolved through the upstream resolvers when the appliance dials (its addresses checked against upstream_deny) on the port the client used"
