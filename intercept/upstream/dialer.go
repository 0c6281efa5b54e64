package upstream

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// ContextDialer is what the engine dials upstream with (engine.Dialer).
type ContextDialer interface {
	DialContext(ctx context.Context, network, address string) (net.Conn, error)
}

// NameResolver maps an address the engine was told to dial (a VIP) to the name behind it and
// that name's real addresses, resolved now. ok is false when addr is not a VIP.
type NameResolver interface {
	ResolveVIP(ctx context.Context, addr netip.Addr) (name string, addrs []netip.Addr, ok bool, err error)
}

// DenyMetrics counts refusals (nil: not counted); viaName is true when the refused address is
// what a name behind a VIP resolved to.
type DenyMetrics interface {
	Denied(viaName bool)
}

// DenyCounter is mcpintercept_upstream_denied_total by source: dns (a name behind a VIP
// resolved into the deny list: rebinding) or address (the flow's destination).
type DenyCounter struct{ *prometheus.CounterVec }

// NewDenyCounter builds the counter; register it on the appliance's registry.
func NewDenyCounter() DenyCounter {
	return DenyCounter{prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "mcpintercept_upstream_denied_total",
		Help: "Upstream dials refused by upstream_deny: source dns (a name behind a VIP resolved into it: rebinding) or address (the flow's destination)."},
		[]string{"source"})}
}

// Denied implements DenyMetrics.
func (c DenyCounter) Denied(viaName bool) {
	src := "address"
	if viaName {
		src = "dns"
	}
	c.WithLabelValues(src).Inc()
}

// Dialer is the dialer layer every mechanism's upstream dials go through: a VIP is
// replaced by the addresses its name resolves to now (dial time, TTL-cached upstream), and every
// address about to be dialled is checked against the deny list. It returns what the base dialer
// returns (a *net.TCPConn for TCP).
type Dialer struct {
	Base    ContextDialer
	Deny    *DenyList
	VIPs    NameResolver // nil without the dns mechanism
	Metrics DenyMetrics
	Log     *slog.Logger // refusals, at most one line a second (nil: not logged)

	logMu   sync.Mutex
	logLast time.Time
	logSkip int
}

// DialContext dials address (IP:port), or, for a VIP, the name behind it on the same port.
func (u *Dialer) DialContext(ctx context.Context, network, address string) (net.Conn, error) {
	ap, err := netip.ParseAddrPort(address)
	if err != nil {
		return nil, fmt.Errorf("upstream dial: %q is not IP:port: %w", address, err)
	}
	if u.VIPs != nil {
		name, addrs, ok, err := u.VIPs.ResolveVIP(ctx, ap.Addr())
		if ok {
			if err != nil {
				return nil, err
			}
			return u.dialName(ctx, network, name, addrs, ap.Port())
		}
	}
	if err := u.Deny.Check(ap.Addr()); err != nil {
		u.denied(false, err)
		return nil, err
	}
	return u.Base.DialContext(ctx, network, address)
}

// dialName refuses the whole name when any of its addresses is denied (an answer mixing a
// public address with 127.0.0.1 is a rebinding attempt, not a choice), then tries the addresses
// in order until one connects.
func (u *Dialer) dialName(ctx context.Context, network, name string, addrs []netip.Addr, port uint16) (net.Conn, error) {
	if len(addrs) == 0 {
		return nil, fmt.Errorf("upstream dial: %s has no address upstream", name)
	}
	for _, a := range addrs {
		if err := u.Deny.Check(a); err != nil {
			var de *Denial
			if errors.As(err, &de) {
				de.Name = name
			}
			u.denied(true, err)
			return nil, err
		}
	}
	var errs []string
	for _, a := range addrs {
		c, err := u.Base.DialContext(ctx, network, netip.AddrPortFrom(a, port).String())
		if err == nil {
			return c, nil
		}
		errs = append(errs, err.Error())
		if ctx.Err() != nil {
			break
		}
	}
	return nil, fmt.Errorf("upstream dial %s: %s", name, strings.Join(errs, "; "))
}

func (u *Dialer) denied(viaName bool, err error) {
	if u.Metrics != nil {
		u.Metrics.Denied(viaName)
	}
	if u.Log == nil {
		return
	}
	u.logMu.Lock()
	now := time.Now()
	if now.Sub(u.logLast) < time.Second {
		u.logSkip++
		u.logMu.Unlock()
		return
	}
	skipped := u.logSkip
	u.logLast, u.logSkip = now, 0
	u.logMu.Unlock()
	u.Log.Warn("upstream dial refused", "err", err, "suppressed", skipped)
}
