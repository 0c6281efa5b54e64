package engine

import (
	"net/netip"
	"strings"

	"mcpintercept/origin"
	"mcpintercept/stage"
)

// Disposition is how a flow's TLS is treated (draft, "TLS Considerations").
type Disposition string

// The three dispositions of the draft.
const (
	Passthrough Disposition = "passthrough"
	Terminate   Disposition = "terminate"
	Plaintext   Disposition = "plaintext"
	// Auto is the zero-config `exec` disposition: a TLS ClientHello is terminated, a plaintext
	// HTTP request line is read at the route's level, anything else is forwarded opaque.
	Auto Disposition = "auto"
)

// Values of Route.OnMismatch and Route.OnRuleError, spelled as in the configuration file.
const (
	OnMismatchPassthrough = "passthrough" // forward the bytes opaque
	OnMismatchClose       = "close"       // reset the flow
	OnRuleErrorOpen       = "open"        // skip a rule whose evaluation fails
)

// DefaultRouteName is the name the flows of Routing.Default are logged under.
const DefaultRouteName = "default"

// PortRange is an inclusive range of ports (steering and routing share origin's).
type PortRange = origin.PortRange

// Route is one ordered rule of the routing table: the first route whose conditions all hold decides
// the disposition and level of a flow. An empty condition list matches everything.
type Route struct {
	Name         string
	Destinations []netip.Prefix
	Ports        []PortRange
	SNI          []string // exact names or "*.suffix" wildcards (one label or more), case-insensitive
	Clients      []netip.Prefix

	TLS   Disposition
	Level int // 0 opaque, 1 headers, 2 JSON-RPC bodies

	// OnMismatch is what happens when a terminate/passthrough route sees non-TLS bytes, or a
	// plaintext route with Level ≥ 1 sees a TLS ClientHello: OnMismatchPassthrough (forward
	// opaque) or OnMismatchClose; unset, see closesOnMismatch. Logged either way.
	OnMismatch string
	// Development suppresses the once-per-route warning about plaintext traffic.
	Development bool
	// PlaintextUpstreamTrustedNetwork allows terminate to forward plaintext upstream (a TLS
	// downgrade), which the draft forbids "unless explicitly configured within a trusted network
	// boundary".
	PlaintextUpstreamTrustedNetwork bool
	// RuleSet names the policy rule set applied on this route ("" = none: allow).
	RuleSet string
	// OnRuleError is "open" to skip a deny or rate_limit rule whose evaluation fails; anything
	// else ("closed", the default) makes it deny.
	OnRuleError string
	// Stages holds the route's options of each stage of the chain, by stage name (token,
	// classify, level2, trace, audit, …): each stage reads its own type.
	Stages stage.Options
}

// needsSNI reports whether matching this route depends on the ClientHello.
func (r *Route) needsSNI() bool { return len(r.SNI) > 0 }

// matchesConn checks every condition except SNI.
func (r *Route) matchesConn(client, dst netip.AddrPort) bool {
	if len(r.Destinations) > 0 && !origin.InPrefixes(r.Destinations, dst.Addr()) {
		return false
	}
	if len(r.Clients) > 0 && !origin.InPrefixes(r.Clients, client.Addr()) {
		return false
	}
	if len(r.Ports) > 0 {
		ok := false
		for _, p := range r.Ports {
			if p.Contains(dst.Port()) {
				ok = true
				break
			}
		}
		if !ok {
			return false
		}
	}
	return true
}

func (r *Route) matchesSNI(sni string) bool {
	if len(r.SNI) == 0 {
		return true
	}
	return MatchSNI(r.SNI, sni)
}

// MatchSNI matches a server name against exact names and "*.suffix" wildcards. A wildcard matches
// one or more labels in front of the suffix, never the bare suffix itself.
func MatchSNI(patterns []string, sni string) bool {
	sni = strings.TrimSuffix(strings.ToLower(sni), ".")
	if sni == "" {
		return false
	}
	for _, p := range patterns {
		p = strings.TrimSuffix(strings.ToLower(p), ".")
		if rest, ok := strings.CutPrefix(p, "*."); ok {
			if strings.HasSuffix(sni, "."+rest) {
				return true
			}
			continue
		}
		if p == sni {
			return true
		}
	}
	return false
}

// DefaultRoute is what a flow gets when no route matches: the transparent core's behaviour, bytes
// forwarded untouched at level 0.
var DefaultRoute = &Route{Name: DefaultRouteName, TLS: Passthrough, Level: 0, OnMismatch: OnMismatchPassthrough}

// selectRoute returns the first route that matches. sni is called at most once, and only when a
// candidate route depends on the server name; it returns "" when the flow has none.
func selectRoute(routes []*Route, client, dst netip.AddrPort, sni func() string) *Route {
	var name string
	asked := false
	for _, r := range routes {
		if !r.matchesConn(client, dst) {
			continue
		}
		if r.needsSNI() {
			if !asked {
				name, asked = sni(), true
			}
			if !r.matchesSNI(name) {
				continue
			}
		}
		return r
	}
	return DefaultRoute
}

// Select is the route a flow from client to dst takes, as dispatch chooses it: the first route
// whose conditions hold (sni is asked at most once, only when a candidate route names servers),
// else the table's default route; nil when `default_route: close` refuses the flow. `policy test`
// replays recorded flows through it.
func (rt *Routing) Select(client, dst netip.AddrPort, sni func() string) *Route {
	if r := selectRoute(rt.Routes, client, dst, sni); r != DefaultRoute {
		return r
	}
	switch {
	case rt.DefaultClose:
		return nil
	case rt.Default != nil:
		return rt.Default
	}
	return DefaultRoute
}
