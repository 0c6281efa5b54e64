package origin

import (
	"context"
	"net/netip"
)

type sourceKey struct{}

// WithSource is ctx carrying the address of the client whose flow an upstream dial serves. The
// engine puts it on every upstream dial; Sidecar mode's dialer (upstream.TransparentDialer)
// dials the co-located server from that address, so the server sees the real client. Other
// dialers ignore it.
func WithSource(ctx context.Context, client netip.AddrPort) context.Context {
	return context.WithValue(ctx, sourceKey{}, client)
}

// SourceOf is the client address WithSource put on ctx.
func SourceOf(ctx context.Context) (netip.AddrPort, bool) {
	a, ok := ctx.Value(sourceKey{}).(netip.AddrPort)
	return a, ok && a.IsValid()
}
