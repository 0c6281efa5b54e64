package origin

// PortRange is an inclusive range of destination ports; a single port has From == To. Steering
// (which ports are steered) and routing (which ports a route matches) share it.
type PortRange struct{ From, To uint16 }

// Contains reports whether port is in the range.
func (p PortRange) Contains(port uint16) bool { return p.From <= port && port <= p.To }
