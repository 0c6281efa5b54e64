package engine

import (
	"net"

	"mcpintercept/origin"
)

// Origin is what the steering mechanism knows about an accepted connection: its original
// destination, the name the client resolved (DNS) and the process that opened it (eBPF). The type
// lives in the leaf package origin so that intercept can produce it without importing the engine.
type Origin = origin.Origin

// Identity is the process behind a connection, when the mechanism knows it (eBPF).
type Identity = origin.Identity

// OriginSource is what the engine needs from a steering mechanism: the Origin of each connection
// it accepted (every intercept.Mechanism implements it). An error refuses the flow.
type OriginSource interface {
	Origin(c *net.TCPConn) (Origin, error)
}
