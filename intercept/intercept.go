// Package intercept installs and removes the steering that brings flows to the appliance
// (nftables TPROXY, iptables REDIRECT, eBPF cgroup connect, DNS answers with virtual IPs, or the
// operator's own infrastructure), opens the transparent listeners and recovers the original
// destination of each accepted connection. Each mechanism registers a Factory (registry.go);
// `declare`, `check` and `cleanup` read the registry. The DNS server lives in intercept/dns, the
// upstream dialer and deny list in intercept/upstream. It never parses HTTP.
package intercept

import (
	"context"
	"net"
	"net/netip"

	"mcpintercept/origin"
)

// Mechanism is one way of steering flows into the appliance, so the engine never knows which
// one is in use.
type Mechanism interface {
	// Name is the mechanism's contract name.
	Name() origin.Mechanism
	// Install puts the steering in place. It is called after the listeners are bound, so a flow
	// steered to the appliance always finds a socket. On error, whatever was installed is removed.
	Install(ctx context.Context) error
	// Remove takes the steering away again; it is idempotent.
	Remove(ctx context.Context) error
	// Origin is what the mechanism knows about an accepted connection: where it was going
	// before it was steered (always), the process that made it (eBPF), the name the client
	// resolved (DNS). It implements engine.OriginSource. A refusal on purpose is an
	// *origin.Refusal.
	Origin(c *net.TCPConn) (origin.Origin, error)
}

// Identity is who made a steered connect (origin.Identity).
type Identity = origin.Identity

// PortRange is an inclusive range of destination ports (origin.PortRange).
type PortRange = origin.PortRange

// originOf is the Origin of a mechanism that knows only the destination.
func originOf(m origin.Mechanism, dst netip.AddrPort, err error) (origin.Origin, error) {
	if err != nil {
		return origin.Origin{}, err
	}
	return origin.Origin{Dst: dst, Mechanism: string(m)}, nil
}

// Table, chain and marker names shared by install and cleanup: cleanup must find everything a
// daemon could have installed without reading its configuration.
const (
	// NftTableName is our nftables table (family inet).
	NftTableName = "mcpintercept"
	// IptChainName is our chain in the nat table of iptables and ip6tables.
	IptChainName = "MCPINTERCEPT"
	// RouteProtocol tags every ip rule and route we add (rtm_protocol), so cleanup can find them
	// whatever mark, table or priority the configuration chose. 0xf5 is unassigned in
	// /etc/iproute2/rt_protos.
	RouteProtocol = 0xf5
)

// AddrPortOf converts a net.Addr of a TCP connection, unmapping IPv4-mapped IPv6 addresses so that
// logs and loop checks compare like with like.
func AddrPortOf(a net.Addr) (netip.AddrPort, error) { return origin.AddrPortOf(a) }

// localAddress is the TPROXY-style recovery shared by nftables-tproxy, dns and external.
func localAddress(c *net.TCPConn) (netip.AddrPort, error) {
	return AddrPortOf(c.LocalAddr())
}
