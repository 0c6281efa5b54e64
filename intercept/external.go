package intercept

import (
	"context"
	"net"
	"net/netip"

	"mcpintercept/config"
)

// external installs nothing: the operator's infrastructure (a router's policy routing, a load
// balancer, a CNI) delivers the flows, either TPROXY-style or NAT-style as the configuration says.
type external struct{ cfg *config.Config }

func (e *external) Name() config.Mechanism            { return config.External }
func (e *external) Install(ctx context.Context) error { return nil }
func (e *external) Remove(ctx context.Context) error  { return nil }

func (e *external) OriginalDst(c *net.TCPConn) (netip.AddrPort, error) {
	if e.cfg.External.OriginalDst == "so-original-dst" {
		return soOriginalDst(c)
	}
	return localAddress(c)
}
