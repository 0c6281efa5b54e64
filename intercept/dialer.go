package intercept

import (
	"fmt"
	"log/slog"
	"net/netip"

	"github.com/prometheus/client_golang/prometheus"

	"mcpintercept/intercept/upstream"
)

// dialShaper is a mechanism that takes part in upstream dials (dns: a VIP is dialled as the
// name behind it). It reports whether it set the dialer's refusal counter.
type dialShaper interface {
	shapeDialer(u *upstream.Dialer) bool
}

// NewUpstreamDialer wraps base (upstream.BypassDialer) for mech: deny is checked on every
// address about to be dialled, and the mechanism adds its part (dns: its VIP pools denied, a
// VIP dialled as the name behind it). Refusals are counted on reg
// (mcpintercept_upstream_denied_total) and logged (at most one line a second).
func NewUpstreamDialer(mech Mechanism, deny []netip.Prefix, base upstream.ContextDialer, reg prometheus.Registerer, log *slog.Logger) (*upstream.Dialer, error) {
	u := &upstream.Dialer{Base: base, Deny: upstream.NewDenyList("upstream_deny", deny...), Log: log}
	if s, ok := mech.(dialShaper); ok && s.shapeDialer(u) {
		return u, nil
	}
	if reg != nil {
		c := upstream.NewDenyCounter()
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("upstream dialer metrics: %w", err)
		}
		u.Metrics = c
	}
	return u, nil
}
