package intercept

import (
	"net/netip"
	"time"

	"mcpintercept/origin"
)

// Options configure the steering. Every mechanism reads the fields that concern it; the
// appliance maps its configuration onto them.
type Options struct {
	// Mechanism selects the Factory.
	Mechanism origin.Mechanism
	// Listen are the listeners' addresses and port: where steered flows are delivered. The
	// first address of each family is that family's steering target.
	Listen []netip.Addr
	Port   uint16
	// Destinations and Ports are what is steered (for ebpf and dns, empty means everything).
	Destinations []netip.Prefix
	Ports        []PortRange
	// Local steers the host's own processes too (an output chain).
	Local bool
	// Loopback (ebpf) steers connects to loopback destinations too: `exec`'s development servers
	// on localhost. Off, they are left alone (and counted: EBPF.Skipped).
	Loopback bool
	// Heartbeat, when positive, makes nftables-tproxy's output steering fail open: it marks
	// flows only while an element of the table's set "alive" lives, which Install adds and Beat
	// refreshes with this timeout. A process that dies without removing its steering (SIGKILL)
	// so stops steering once the timeout has passed, instead of leaving flows steered to a
	// listener that is gone (the node agent's failure: open).
	Heartbeat time.Duration
	// Mark tags steered packets for policy routing (RouteTable, RulePriority); BypassMark is on
	// every upstream dial of the appliance and is never steered.
	Mark, BypassMark         uint32
	RouteTable, RulePriority int
	// NATed says the external integration delivers flows NAT-style (SO_ORIGINAL_DST) rather than
	// TPROXY-style (the accepted socket's local address).
	NATed bool
	// Cgroup is the cgroup v2 directory the ebpf mechanism steers.
	Cgroup string
	// DNS configures the dns mechanism.
	DNS DNSOptions
}

// DNSOptions configure the dns mechanism: its server, VIP table and upstream resolvers.
type DNSOptions struct {
	Listen   []netip.AddrPort
	Names    []string
	V4, V6   netip.Prefix // the VIP pools
	Upstream []netip.AddrPort
	Clients  []netip.Prefix
	TTL      time.Duration
	// Hold keeps a name's VIP after its last use; Quarantine keeps a freed VIP from another name.
	Hold, Quarantine          time.Duration
	StateDir                  string
	MaxNames                  int
	ClientQuota, PatternQuota int
	CacheSize                 int
	ClientRate                float64
	ClientBurst               int
	Timeout                   time.Duration // one upstream exchange
	// PeekTimeout and MaxClientHello bound the SNI check of a TLS flow to a VIP.
	PeekTimeout    time.Duration
	MaxClientHello int
	// VIPAssignment is dns.vip_assignment: dns.AssignSequential ("" too) or dns.AssignHash.
	VIPAssignment string
}

// listenTargets picks the steering target per family: the first listen address of that family
// (an invalid Addr when there is none, which leaves that family unsteered).
func (o Options) listenTargets() (v4, v6 netip.Addr) {
	for _, a := range o.Listen {
		switch {
		case a.Is4() || a.Is4In6():
			if !v4.IsValid() {
				v4 = a.Unmap()
			}
		default:
			if !v6.IsValid() {
				v6 = a
			}
		}
	}
	return v4, v6
}
