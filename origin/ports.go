package origin

import "net/netip"

// PortRange is an inclusive range of destination ports; a single port has From == To. Steering
// (which ports are steered) and routing (which ports a route matches) share it.
type PortRange struct{ From, To uint16 }

// Contains reports whether port is in the range.
func (p PortRange) Contains(port uint16) bool { return p.From <= port && port <= p.To }

// InPrefixes reports whether a (an IPv4-mapped address counts as its IPv4 form) is in one of ps:
// routing's destination and client matches and the DNS server's client list read it alike.
func InPrefixes(ps []netip.Prefix, a netip.Addr) bool {
	a = a.Unmap()
	for _, p := range ps {
		if p.Contains(a) {
			return true
		}
	}
	return false
}
