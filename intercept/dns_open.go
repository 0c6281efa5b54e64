package intercept

import (
	"context"
	"fmt"
	"log/slog"
	"net/netip"

	"github.com/prometheus/client_golang/prometheus"

	"mcpintercept/config"
)

// Opener is a mechanism with resources to open before its steering is installed (the dns
// mechanism's VIP table and DNS sockets) and to close once it is removed. The appliance calls
// Open in New and Close when it releases everything else.
type Opener interface {
	Open(ctx context.Context, reg prometheus.Registerer, log *slog.Logger) error
	Close() error
}

// UnboundVIPError is a flow or dial to a VIP of the pool that no name holds (never answered, or
// forgotten after its quarantine).
type UnboundVIPError struct{ VIP netip.Addr }

func (e *UnboundVIPError) Error() string {
	return fmt.Sprintf("VIP %s is bound to no name (never answered, or freed and forgotten)", e.VIP)
}

// RefuseReason names the refusal for a flow record.
func (e *UnboundVIPError) RefuseReason() string { return "unbound_vip" }

// NewUpstreamDialer wraps base (BypassDialer) for every mechanism: upstream_deny is checked on
// every address about to be dialled; with the dns mechanism its VIP pools are denied too and a
// VIP is dialled as the name behind it, resolved now. Refusals are counted on reg
// (mcpintercept_upstream_denied_total) and logged (at most one line a second per source).
func NewUpstreamDialer(cfg *config.Config, mech Mechanism, base ContextDialer, reg prometheus.Registerer, log *slog.Logger) (*UpstreamDialer, error) {
	deny := NewDenyList("upstream_deny", cfg.UpstreamDeny...)
	u := &UpstreamDialer{Base: base, Deny: deny, Log: log}
	if r, ok := mech.(NameResolver); ok {
		u.VIPs = r
	}
	if cfg.Mechanism == config.DNS {
		deny.Add("VIP pool", cfg.DNS.Pools.V4, cfg.DNS.Pools.V6)
	}
	if m, ok := mech.(interface{ dnsMetrics() *DNSMetrics }); ok && m.dnsMetrics() != nil {
		u.Metrics = m.dnsMetrics()
		return u, nil
	}
	if reg != nil {
		c := prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "mcpintercept_upstream_denied_total",
			Help: "Upstream dials refused by upstream_deny: source dns (a name behind a VIP resolved into it: rebinding) or address (the flow's destination)."},
			[]string{"source"})
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("upstream dialer metrics: %w", err)
		}
		u.Metrics = &DNSMetrics{UpstreamDeny: c}
	}
	return u, nil
}
