package intercept

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
)

// DenyList is the set of prefixes the appliance never dials (config upstream_deny, plus the VIP
// pools under the dns mechanism): whatever steered a flow, an address in it is refused before
// any packet leaves (DNS rebinding to 127.0.0.1, SSRF to the cloud metadata service).
type DenyList struct {
	entries []denyEntry
}

type denyEntry struct {
	p    netip.Prefix
	what string // why it is listed, for the error ("upstream_deny", "VIP pool")
}

// NewDenyList lists prefixes under the label what.
func NewDenyList(what string, ps ...netip.Prefix) *DenyList {
	d := &DenyList{}
	d.Add(what, ps...)
	return d
}

// Add appends prefixes under the label what.
func (d *DenyList) Add(what string, ps ...netip.Prefix) {
	for _, p := range ps {
		if p.IsValid() {
			d.entries = append(d.entries, denyEntry{p.Masked(), what})
		}
	}
}

// DeniedError is a dial the deny list refused. Its message is the one the engine logs.
type DeniedError struct {
	Addr   netip.Addr
	Prefix netip.Prefix
	What   string
	Name   string // the name that resolved to Addr, "" when the address came from the flow
}

func (e *DeniedError) Error() string {
	s := fmt.Sprintf("upstream address %s is in the deny list (%s, %s)", e.Addr, e.Prefix, e.What)
	if e.Name != "" {
		s += fmt.Sprintf(": %s resolved into it (DNS rebinding?)", e.Name)
	}
	return s
}

// RefuseReason names the refusal for a flow record (engine: an error with RefuseReason wins
// over the generic reason).
func (e *DeniedError) RefuseReason() string { return "upstream_denied" }

// Check returns a *DeniedError when a is in the list. IPv4-mapped IPv6 addresses are checked as
// the IPv4 address they carry (::ffff:127.0.0.1 is loopback).
func (d *DenyList) Check(a netip.Addr) error {
	if d == nil {
		return nil
	}
	a = a.Unmap().WithZone("")
	for _, e := range d.entries {
		if e.p.Contains(a) {
			return &DeniedError{Addr: a, Prefix: e.p, What: e.what}
		}
	}
	return nil
}

// Prefixes are the listed prefixes, in order.
func (d *DenyList) Prefixes() []netip.Prefix {
	out := make([]netip.Prefix, len(d.entries))
	for i, e := range d.entries {
		out[i] = e.p
	}
	return out
}

// ContextDialer is what the engine dials upstream with (engine.Dialer).
type ContextDialer interface {
	DialContext(ctx context.Context, network, address string) (net.Conn, error)
}

// NameResolver maps an address the engine was told to dial (a VIP) to the name behind it and
// that name's real addresses, resolved now. ok is false when addr is not a VIP.
type NameResolver interface {
	ResolveVIP(ctx context.Context, addr netip.Addr) (name string, addrs []netip.Addr, ok bool, err error)
}

// DenyMetrics counts refusals (nil: not counted).
type DenyMetrics interface {
	Denied(mechanismDNS bool)
}

// UpstreamDialer is the dialer layer every mechanism's upstream dials go through: a VIP is
// replaced by the addresses its name resolves to now (dial time, TTL-cached upstream), and every
// address about to be dialled is checked against the deny list. It returns what the base dialer
// returns (a *net.TCPConn for TCP).
type UpstreamDialer struct {
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
func (u *UpstreamDialer) DialContext(ctx context.Context, network, address string) (net.Conn, error) {
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
func (u *UpstreamDialer) dialName(ctx context.Context, network, name string, addrs []netip.Addr, port uint16) (net.Conn, error) {
	if len(addrs) == 0 {
		return nil, fmt.Errorf("upstream dial: %s has no address upstream", name)
	}
	for _, a := range addrs {
		if err := u.Deny.Check(a); err != nil {
			var de *DeniedError
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

func (u *UpstreamDialer) denied(dns bool, err error) {
	if u.Metrics != nil {
		u.Metrics.Denied(dns)
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
