// Package intercept installs and removes the steering that brings flows to the appliance (nftables
// TPROXY, iptables REDIRECT, and later eBPF and DNS), opens the transparent listeners, recovers the
// original destination of each accepted connection, and dials upstream with the bypass mark so the
// appliance never intercepts itself. It never parses HTTP.
package intercept

import (
	"context"
	"fmt"
	"net"
	"net/netip"

	"mcpintercept/config"
	"mcpintercept/origin"
)

// Mechanism is one way of steering flows into the appliance. The eBPF cgroup-connect and DNS
// mechanisms of later issues implement it too, so the engine never knows which one is in use.
type Mechanism interface {
	// Name is the mechanism's contract name (nftables-tproxy, iptables-redirect, ebpf, dns, external).
	Name() config.Mechanism
	// Install puts the steering in place. It is called after the listeners are bound, so a flow
	// steered to the appliance always finds a socket. On error, whatever was installed is removed.
	Install(ctx context.Context) error
	// Remove takes the steering away again; it is idempotent.
	Remove(ctx context.Context) error
	// Origin is what the mechanism knows about an accepted connection: where it was going
	// before it was steered (always), the process that made it (eBPF), the name the client
	// resolved (DNS). It implements engine.OriginSource.
	Origin(c *net.TCPConn) (origin.Origin, error)
}

// Identity is who made a steered connect (origin.Identity).
type Identity = origin.Identity

// originOf is the Origin of a mechanism that knows only the destination.
func originOf(m config.Mechanism, dst netip.AddrPort, err error) (origin.Origin, error) {
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

// New returns the mechanism the configuration selects.
func New(cfg *config.Config) (Mechanism, error) {
	switch cfg.Mechanism {
	case config.NftablesTProxy:
		return newNftables(cfg), nil
	case config.IptablesRedirect:
		return newIptables(cfg), nil
	case config.External:
		return &external{cfg: cfg}, nil
	case config.EBPF:
		return newEBPFFromConfig(cfg)
	case config.DNS:
		return newDNSFromConfig(cfg)
	default:
		return nil, fmt.Errorf("mechanism %q is not available in this build", cfg.Mechanism)
	}
}

// Transparent reports whether the listeners must set IP_TRANSPARENT: with TPROXY-style delivery
// the accepted socket's local address is a foreign address (the original destination).
func Transparent(cfg *config.Config) bool {
	switch cfg.Mechanism {
	case config.NftablesTProxy, config.DNS:
		return true
	case config.External:
		return cfg.External.OriginalDst == "local-address"
	}
	return false
}

// Recovery says, for `declare` and the README, how a mechanism delivers the original destination
// to the engine (the draft requires this statement for integration-provided selection).
func Recovery(cfg *config.Config) string {
	switch cfg.Mechanism {
	case config.NftablesTProxy:
		return "nftables tproxy in prerouting (and an output-chain mark plus policy routing for local processes) delivers the unmodified packet to a transparent listener; the accepted socket's local address is the original destination"
	case config.IptablesRedirect:
		return "iptables nat REDIRECT rewrites the destination to the listener; the original destination is read from conntrack with getsockopt SO_ORIGINAL_DST (IPv4) / IP6T_SO_ORIGINAL_DST (IPv6)"
	case config.External:
		if cfg.External.OriginalDst == "so-original-dst" {
			return "integration-provided: the operator's infrastructure NATs flows to the listener (REDIRECT/DNAT style); the original destination is read with getsockopt SO_ORIGINAL_DST / IP6T_SO_ORIGINAL_DST"
		}
		return "integration-provided: the operator's infrastructure delivers flows TPROXY-style to the listener (IP_TRANSPARENT); the accepted socket's local address is the original destination"
	case config.EBPF:
		return "eBPF cgroup/connect4 and cgroup/connect6 on the steered cgroup record the original destination and the process (pid, uid, gid, comm, cgroup id) in socket storage and rewrite the destination to the loopback listener; a sockops program moves the record onto the accepted socket, where the engine reads it by file descriptor"
	case config.DNS:
		return "the appliance's DNS server answers the configured names with virtual IPs (VIPs) from its pools; nftables tproxy steers the pools to a transparent listener, whose accepted socket's local address is the VIP and port; the VIP table gives the name behind it (the engine's Origin.Host), a TLS client must send that name as its SNI, and the name is resolved through the upstream resolvers when the appliance dials (its addresses checked against upstream_deny) on the port the client used"
	}
	return "unknown"
}

// AddrPortOf converts a net.Addr of a TCP connection, unmapping IPv4-mapped IPv6 addresses so that
// logs and loop checks compare like with like.
func AddrPortOf(a net.Addr) (netip.AddrPort, error) { return origin.AddrPortOf(a) }

// localAddress is the TPROXY-style recovery shared by nftables-tproxy and external.
func localAddress(c *net.TCPConn) (netip.AddrPort, error) {
	return AddrPortOf(c.LocalAddr())
}
