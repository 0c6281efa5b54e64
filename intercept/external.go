package intercept

import (
	"context"
	"net"

	"mcpintercept/config"
	"mcpintercept/origin"
)

// external installs nothing: the operator's infrastructure (a router's policy routing, a load
// balancer, a CNI) delivers the flows, either TPROXY-style or NAT-style as the configuration says.
type external struct{ cfg *config.Config }

func (e *external) Name() config.Mechanism            { return config.External }
func (e *external) Install(ctx context.Context) error { return nil }
func (e *external) Remove(ctx context.Context) error  { return nil }

// Origin implements Mechanism: SO_ORIGINAL_DST for NAT-style delivery, the local address for
// TPROXY-style delivery.
func (e *external) Origin(c *net.TCPConn) (origin.Origin, error) {
	if e.cfg.External.OriginalDst == "so-original-dst" {
		dst, err := soOriginalDst(c)
		return originOf(config.External, dst, err)
	}
	dst, err := localAddress(c)
	return originOf(config.External, dst, err)
}
