package intercept

import (
	"context"
	"net"
	"net/netip"
	"time"

	"mcpintercept/origin"
)

// NftInboundTableName is Sidecar mode's nftables table (family inet), apart from NftTableName so
// that inbound and egress steering are installed and removed independently.
const NftInboundTableName = "mcpintercept_inbound"

// InboundOptions configure Sidecar mode's steering: connections that arrive from other hosts
// for the co-located server's Ports (on Addresses, or any local address) are tproxied to the
// inbound listener (Listen, ListenPort), and the server's replies to the appliance's transparent
// connections are routed back to it.
type InboundOptions struct {
	Ports     []PortRange
	Addresses []netip.Addr // empty: any local address
	// Listen are the inbound listener's addresses (the first of each family is the target) and
	// ListenPort its port.
	Listen     []netip.Addr
	ListenPort uint16
	// Mark, BypassMark, RouteTable and RulePriority are the steering section's: Mark makes a
	// packet local through the policy routing rule; BypassMark is on the appliance's dials.
	Mark, BypassMark         uint32
	RouteTable, RulePriority int
	// Heartbeat, when positive, makes the steering fail open as nftables-tproxy's does
	// (Options.Heartbeat): connections are steered only while the set "alive" holds an element,
	// which Install adds and Beat refreshes with this timeout (the node agent's failure: open).
	Heartbeat time.Duration
}

// Inbound is Sidecar mode's steering. Its Origin is TPROXY's: the accepted socket's local address
// is the server's address and port the client connected to.
type Inbound struct {
	o InboundOptions
}

// NewInbound builds the steering; nothing is installed before Install.
func NewInbound(o InboundOptions) *Inbound {
	return &Inbound{o: o}
}

// Name is the contract name flows steered inbound carry in records.
func (in *Inbound) Name() origin.Mechanism { return origin.Inbound }

// Origin implements engine.OriginSource.
func (in *Inbound) Origin(c *net.TCPConn) (origin.Origin, error) {
	dst, err := localAddress(c)
	return originOf(origin.Inbound, dst, err)
}

// targets are the tproxy targets per family (the first listen address of each).
func (in *Inbound) targets() (v4, v6 netip.Addr) {
	return Options{Listen: in.o.Listen}.listenTargets()
}

// CleanupInbound removes what Sidecar mode installs (its table and the policy routing), without
// its configuration: after a crash of an appliance whose egress mechanism would not sweep it.
func CleanupInbound(ctx context.Context) ([]string, error) {
	return runSweeps(ctx, []Sweep{sweepInbound, sweepRouting})
}

var sweepInbound = Sweep{Name: "nftables inbound", Run: func(context.Context) ([]string, error) {
	return deleteNftTablesNamed(NftInboundTableName)
}}
