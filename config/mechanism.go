package config

import (
	"fmt"
	"net/netip"
	"strings"

	"mcpintercept/origin"
)

// Mechanism names how flows are steered into the appliance. The names are a user-facing
// contract (config files, flags, logs, `declare`), defined once in the origin leaf package, which
// intercept implements.
type Mechanism = origin.Mechanism

// The mechanism names (see origin).
const (
	NftablesTProxy   = origin.NftablesTProxy
	IptablesRedirect = origin.IptablesRedirect
	EBPF             = origin.EBPF
	DNS              = origin.DNS
	External         = origin.External
)

// Mechanisms lists every known mechanism name (used in error messages and `declare`).
var Mechanisms = origin.Mechanisms()

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
	}
	return ""
}
