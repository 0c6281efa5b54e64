package origin

// Mechanism is the contract name of a steering mechanism: it appears in configuration files,
// flags, logs, flow records and `declare`. The names live in this leaf package so that config
// (which validates them and must not touch the network) and intercept (which implements them)
// read one list.
type Mechanism string

// The mechanism names.
const (
	NftablesTProxy   Mechanism = "nftables-tproxy"
	IptablesRedirect Mechanism = "iptables-redirect"
	// EBPF steers the connects of one cgroup's processes, which is what `mcpintercept exec`
	// uses on a developer's host.
	EBPF Mechanism = "ebpf"
	// DNS answers configured names with virtual IPs and steers the VIP pools into the
	// transparent listener; the name behind a VIP is resolved when the appliance dials.
	DNS      Mechanism = "dns"
	External Mechanism = "external"
)

// Mechanisms lists every mechanism name in the order documentation and `declare` show them. It
// returns a fresh slice, so no caller can change the list for another.
func Mechanisms() []Mechanism {
	return []Mechanism{NftablesTProxy, IptablesRedirect, EBPF, DNS, External}
}

// Known reports whether m is one of Mechanisms.
func (m Mechanism) Known() bool {
	switch m {
	case NftablesTProxy, IptablesRedirect, EBPF, DNS, External:
		return true
	}
	return false
}

// Inbound is the contract name of Sidecar mode's steering (the inbound: section): nftables
// tproxy of connections arriving for the co-located server's ports. It is not a `mechanism:`
// value — it runs beside whichever mechanism steers the host's egress — but it names the flows it
// steers in records, as the mechanisms do.
const Inbound Mechanism = "nftables-inbound"
