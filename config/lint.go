package config

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"
)

// KnownUpgrades are the allow_upgrade tokens that name a protocol clients actually switch to:
// IANA's HTTP Upgrade Token Registry entries an MCP server could meet, plus UpgradeConnect. Any
// other token is valid syntax that never matches a real Upgrade header (a typo such as
// "websockets"), so it is a warning, not an error.
var KnownUpgrades = []string{"websocket", UpgradeH2C, UpgradeConnect, "tls", "http", "connect-udp", "connect-ip", "connect-tcp"}

// maxShadowRoutes bounds the pairwise shadowing check (quadratic in the routes): past it, only
// the first maxShadowRoutes routes are compared.
const maxShadowRoutes = 2048

// lintWarnings are the settings that are valid but can never take effect: a route shadowed by an
// earlier one, a route on ports the steering does not send here, sni on a plaintext route, an
// allow_upgrade token no client sends, a rule set no route uses.
func (c *Config) lintWarnings() []string {
	var out []string
	shadowing := len(c.Routes) <= maxShadowRoutes
	if !shadowing {
		out = append(out, fmt.Sprintf("routes: %d routes; shadowed routes are looked for among the first %d only", len(c.Routes), maxShadowRoutes))
	}
	for i, r := range c.Routes {
		key := fmt.Sprintf("routes[%d] (%s)", i, r.Name)
		for j := range i {
			if i >= maxShadowRoutes {
				break
			}
			if covers(c.Routes[j].Match, r.Match) {
				out = append(out, fmt.Sprintf("%s: never matches: routes[%d] (%s) comes first and matches every flow this route does (routes are tried in order; move the narrower route up)",
					key, j, c.Routes[j].Name))
				break
			}
		}
		if p := unsteeredPorts(c, r.Match.Ports); p != "" {
			out = append(out, fmt.Sprintf("%s: match.ports %s not in intercept.ports: such flows are never steered to the appliance", key, p))
		}
		if r.TLS == TLSPlaintext && len(r.Match.SNI) > 0 {
			out = append(out, fmt.Sprintf("%s: match.sni on a tls: plaintext route never matches: plaintext flows carry no ClientHello, so no server name", key))
		}
		out = append(out, upgradeWarnings(key, r)...)
	}
	if d := c.DefaultRoute; d != nil && d.Route != nil {
		out = append(out, upgradeWarnings("default_route", *d.Route)...)
	}
	used := map[string]bool{}
	for _, r := range c.Routes {
		used[r.RuleSet] = true
	}
	if d := c.DefaultRoute; d != nil && d.Route != nil {
		used[d.Route.RuleSet] = true
	}
	used[c.Federation.RuleSet] = true
	for _, n := range c.ruleSetNames() {
		if !used[n] {
			out = append(out, fmt.Sprintf("rule_sets.%s: unused: no route (nor default_route) names it in rule_set", n))
		}
	}
	return out
}

func upgradeWarnings(key string, r Route) []string {
	var out []string
	for i, u := range r.AllowUpgrade {
		if slices.Contains(KnownUpgrades, u) {
			continue
		}
		hint := ""
		for _, k := range KnownUpgrades {
			if strings.HasPrefix(u, k) || strings.HasPrefix(k, u) {
				hint = fmt.Sprintf(" (did you mean %s?)", k)
				break
			}
		}
		out = append(out, fmt.Sprintf("%s: allow_upgrade[%d]: %s is not an upgrade protocol clients send%s; known: %s",
			key, i, quote(u), hint, strings.Join(KnownUpgrades, ", ")))
	}
	return out
}

// unsteeredPorts lists the parts of ports outside intercept.ports ("" when every port is steered,
// or when the mechanism steers every port: ebpf and dns with intercept.ports empty).
func unsteeredPorts(c *Config, ports []PortRange) string {
	if len(c.Intercept.Ports) == 0 {
		return ""
	}
	var out []string
	for _, p := range ports {
		for _, g := range subtractRanges(p, c.Intercept.Ports) {
			out = append(out, g.String())
		}
	}
	return strings.Join(out, ", ")
}

// subtractRanges is p minus every range of by, as ranges.
func subtractRanges(p PortRange, by []PortRange) []PortRange {
	rest := []PortRange{p}
	for _, b := range by {
		var next []PortRange
		for _, r := range rest {
			if b.To < r.From || b.From > r.To {
				next = append(next, r)
				continue
			}
			// b.From > r.From and b.To < r.To keep b.From-1 and b.To+1 within uint16.
			if b.From > r.From {
				next = append(next, PortRange{r.From, b.From - 1})
			}
			if b.To < r.To {
				next = append(next, PortRange{b.To + 1, r.To})
			}
		}
		rest = next
	}
	return rest
}

// covers reports whether every flow b matches is matched by a as well: each condition of a is
// absent or contains b's.
func covers(a, b RouteMatch) bool {
	return coversPrefixes(a.Destinations, b.Destinations) && coversPrefixes(a.Clients, b.Clients) &&
		coversPorts(a.Ports, b.Ports) && coversSNI(a.SNI, b.SNI)
}

func coversPrefixes(a, b []netip.Prefix) bool {
	if len(a) == 0 {
		return true
	}
	if len(b) == 0 {
		return false
	}
	for _, q := range b {
		if !slices.ContainsFunc(a, func(p netip.Prefix) bool {
			return p.Addr().Is4() == q.Addr().Is4() && p.Bits() <= q.Bits() && p.Contains(q.Addr())
		}) {
			return false
		}
	}
	return true
}

func coversPorts(a, b []PortRange) bool {
	if len(a) == 0 {
		return true
	}
	if len(b) == 0 {
		return false
	}
	for _, q := range b {
		if len(subtractRanges(q, a)) > 0 {
			return false
		}
	}
	return true
}

// coversSNI follows engine.MatchSNI: "*.s" matches one or more labels in front of s.
func coversSNI(a, b []string) bool {
	if len(a) == 0 {
		return true
	}
	if len(b) == 0 {
		return false
	}
	norm := func(s string) string { return strings.TrimSuffix(strings.ToLower(s), ".") }
	for _, q := range b {
		q = norm(q)
		if !slices.ContainsFunc(a, func(p string) bool {
			p = norm(p)
			if s, ok := strings.CutPrefix(p, "*."); ok {
				return strings.HasSuffix(q, "."+s)
			}
			return p == q
		}) {
			return false
		}
	}
	return true
}
