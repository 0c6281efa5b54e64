package intercept

import (
	"context"
	"net"

	"mcpintercept/origin"
)

func init() {
	register(Factory{
		Name:        origin.External,
		New:         func(o Options) (Mechanism, error) { return &external{nated: o.NATed}, nil },
		Transparent: func(o Options) bool { return !o.NATed },
		Recovery: func(o Options) string {
			if o.NATed {
				return "integration-provided: the operator's infrastructure NATs flows to the listener (REDIRECT/DNAT style); the original destination is read with getsockopt SO_ORIGINAL_DST / IP6T_SO_ORIGINAL_DST"
			}
			return "integration-provided: the operator's infrastructure delivers flows TPROXY-style to the listener (IP_TRANSPARENT); the accepted socket's local address is the original destination"
		},
		Variants: []Options{{}, {NATed: true}},
		// Nothing is installed, so nothing is swept.
	})
}

// external installs nothing: the operator's infrastructure (a router's policy routing, a load
// balancer, a CNI) delivers the flows, either TPROXY-style or NAT-style as the options say.
type external struct{ nated bool }

func (e *external) Name() origin.Mechanism            { return origin.External }
func (e *external) Install(ctx context.Context) error { return nil }
func (e *external) Remove(ctx context.Context) error  { return nil }

// Origin implements Mechanism: SO_ORIGINAL_DST for NAT-style delivery, the local address for
// TPROXY-style delivery.
func (e *external) Origin(c *net.TCPConn) (origin.Origin, error) {
	if e.nated {
		dst, err := soOriginalDst(c)
		return originOf(origin.External, dst, err)
	}
	dst, err := localAddress(c)
	return originOf(origin.External, dst, err)
}
