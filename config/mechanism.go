package config

import (
	"fmt"
	"net/netip"
	"strings"
)

// Mechanism names how flows are steered into the appliance. The names are a
// user-facing contract: they appear in config files, flags, logs and `declare`.
type Mechanism string

const (
	NftablesTProxy   Mechanism = "nftables-tproxy"
	IptablesRedirect Mechanism = "iptables-redirect"
	// EBPF steers the connects of one cgroup's processes (EBPFConfig.Cgroup),
	// which is what `mcpintercept exec` uses on a developer's host.
	EBPF Mechanism = "ebpf"
	// DNS answers the names of DNSConfig.Names with virtual IPs from its
	// pools and steers the pools into the transparent listener (nftables
	// TPROXY, as nftables-tproxy does); the name behind a VIP is resolved
	// upstream when the appliance dials.
	DNS      Mechanism = "dns"
	External Mechanism = "external"
)

// Mechanisms lists every known mechanism name (used in error messages and `declare`).
var Mechanisms = []Mechanism{NftablesTProxy, IptablesRedirect, EBPF, DNS, External}

// Known reports whether m is one of Mechanisms, available or not.
func (m Mechanism) Known() bool {
	// A switch rather than a scan of Mechanisms, which callers could modify.
	switch m {
	case NftablesTProxy, IptablesRedirect, EBPF, DNS, External:
		return true
	}
	return false
}

// Available reports whether this build can steer with m.
func (m Mechanism) Available() bool {
	return m.Known()
}

// DefaultAddresses returns the listen addresses used when the file gives
// none, or nil when m has no default (external, unknown).
func DefaultAddresses(m Mechanism) []netip.Addr {
	switch m {
	case NftablesTProxy, EBPF, DNS:
		// The eBPF program rewrites connects to a loopback listener; dns
		// steers its VIP pools with TPROXY.
		return []netip.Addr{netip.AddrFrom4([4]byte{127, 0, 0, 1}), netip.IPv6Loopback()}
	case IptablesRedirect:
		return []netip.Addr{netip.IPv4Unspecified(), netip.IPv6Unspecified()}
	}
	return nil
}

func mechanismNames() string {
	s := make([]string, len(Mechanisms))
	for i, m := range Mechanisms {
		s[i] = string(m)
	}
	return strings.Join(s, ", ")
}

// checkMechanism is the one place validation learns which mechanism names
// exist, so a registry of mechanisms can take the list over here alone.
func checkMechanism(m Mechanism) string {
	switch {
	case m == "":
		return "must not be empty (valid: " + mechanismNames() + ")"
	case !m.Known():
		return fmt.Sprintf("unknown mechanism %s (valid: %s)", quote(string(m)), mechanismNames())
	case !m.Available():
		return fmt.Sprintf("mechanism %q is not available in this build yet", m)
	}
	return ""
}
