package config

import (
	"fmt"
	"net/netip"

	"go.yaml.in/yaml/v3"
)

// Route decides how matching flows are treated.
type Route struct {
	Name  string     `yaml:"name"`
	Match RouteMatch `yaml:"match"`
	TLS   string     `yaml:"tls"` // TLSPassthrough, TLSTerminate or TLSPlaintext
	// Level is a pointer so that a route built in code can leave it to
	// LevelOrDefault; Parse always fills it.
	Level *int `yaml:"level"`
	// OnMismatch is what happens when a TLS route sees non-TLS bytes, or a
	// plaintext level 1 route sees a TLS ClientHello: OnMismatchPassthrough
	// or OnMismatchClose. Parse fills close on level 1 routes, since
	// passing the bytes on would skip the inspection the route asks for,
	// and passthrough on level 0 routes.
	OnMismatch string `yaml:"on_mismatch"`
	// OnRuleError is what a deny or rate_limit rule of RuleSet does when its
	// expression fails to evaluate (a missing header, a type error):
	// OnRuleErrorClosed (the default) decides deny, OnRuleErrorOpen skips
	// the rule. Allow rules that fail are always skipped.
	OnRuleError string `yaml:"on_rule_error"`
	// Development silences the plaintext warning; tls: plaintext only.
	Development bool `yaml:"development"`
	// PlaintextUpstreamTrustedNetwork lets a tls: terminate route forward
	// plaintext upstream. That is a TLS downgrade, which the draft forbids
	// "unless explicitly configured within a trusted network boundary"; this
	// key is that explicit configuration.
	PlaintextUpstreamTrustedNetwork bool `yaml:"plaintext_upstream_trusted_network"`
	// StrictMCPHeaders refuses MCP requests without Mcp-Method (clients older
	// than 2026-07-28) instead of letting method and tool rules not match
	// them. Needs level 1.
	StrictMCPHeaders bool `yaml:"strict_mcp_headers"`
	// AllowUpgrade lists the protocols a Level 1 route lets a request switch
	// to (the Upgrade header), lower-cased, e.g. "websocket"; UpgradeConnect
	// allows the CONNECT method. Anything else asking to switch is refused,
	// because after the switch Level 1 no longer sees requests. UpgradeH2C
	// is never allowed. Needs level 1.
	AllowUpgrade []string `yaml:"allow_upgrade"`
	// HTTPMethods, when set, are the request methods the route lets through (e.g. POST, GET,
	// DELETE: what MCP's Streamable HTTP uses); any other is refused with 403 before it reaches
	// the server. Empty lets every method through. Needs level 1.
	HTTPMethods []string `yaml:"http_methods,omitempty"`
	// MaxBody bounds, at level 2, a request body, a response body and one SSE event (bytes;
	// default DefaultMaxBody). A request over it is refused with 413 and a JSON-RPC error.
	MaxBody int64 `yaml:"max_body,omitempty"`
	// OnOversizedResponse is what level 2 does with a response body (or event) over MaxBody:
	// OnOversizedClose (the default) closes the connection, OnOversizedForward forwards it
	// uninspected; the record says which.
	OnOversizedResponse string `yaml:"on_oversized_response,omitempty"`
	// ValidateArguments, at level 2, checks tools/call arguments against the input schema the
	// server listed for the tool (learnt from tools/list, per server and session); arguments
	// that do not match get JSON-RPC error -32602 and the server never sees the call.
	ValidateArguments bool `yaml:"validate_arguments,omitempty"`
	// RuleSet names an entry of Config.RuleSets; "" applies no rules (allow).
	// A passthrough route can take one at level 0 (connection-level rules);
	// other routes need level 1.
	RuleSet string `yaml:"rule_set"`
	// Audit writes a durable authorization record for every judged request of the route before
	// it goes upstream, and an outcome record when it ends (the audit section says where and what
	// happens when it cannot). Needs level 1.
	Audit bool `yaml:"audit,omitempty"`
	// AuditArguments puts a tools/call's arguments, after redaction, in its audit record; without
	// it the record holds only their hash. Needs audit and level 2.
	AuditArguments bool `yaml:"audit_arguments,omitempty"`
	// TokenAudience is On or Off: whether a bearer token's audience must name the server's
	// canonical URI (or one of Audiences) before the request is forwarded. Parse fills On on
	// routes that read HTTP; it cannot be set on the others.
	TokenAudience string `yaml:"token_audience,omitempty"`
	// Audiences are accepted token audiences besides the canonical URI.
	Audiences []string `yaml:"audiences,omitempty"`
	// ToolPins is Off, ToolPinsLearn or ToolPinsEnforce: whether the definitions servers list
	// (tools, prompts, resource templates) are pinned by their canonical hash, a changed one
	// quarantined (hidden from lists, its calls refused), and, under enforce, an unpinned one
	// quarantined until approved. Needs level 2 on a route that reads HTTP; Parse fills Off there.
	ToolPins string `yaml:"tool_pins,omitempty"`
	// OnDivergence is OnDivergenceLog or OnDivergenceQuarantine: what happens when one server
	// shows two clients different definitions of one tool within tool_integrity.divergence_window
	// (always recorded; quarantine hides it from everyone until approved). Needs tool_pins.
	OnDivergence string `yaml:"on_divergence,omitempty"`
	// TracePropagation is TraceRecord or TraceInject: whether the request sent upstream carries
	// the appliance's span as its parent (inject) or the client's trace context unchanged
	// (record). Parse fills record on routes that read HTTP; inject needs one.
	TracePropagation string `yaml:"trace_propagation,omitempty"`
	// Credentials adds the real credential on the way out (credentials.go); zero: the client's
	// own credential passes, judged by token_audience.
	Credentials Credentials `yaml:"credentials,omitempty"`
	// Line and Column locate the route's mapping in the file (0 when built
	// in code), for messages about the route as a whole.
	Line, Column int `yaml:"-"`
}

// DefaultRoute is `default_route`: what happens to flows that match no route.
// At most one of Close and Route is set; neither means opaque (level 0), the
// behaviour without a default_route.
type DefaultRoute struct {
	// Close resets such flows and logs them (`default_route: close`).
	Close bool
	// Route treats them like a route that matches everything, with Name
	// "default" and no Match.
	Route *Route
}

// DefaultRouteName is the Route.Name Parse gives DefaultRoute.Route.
const DefaultRouteName = "default"

// Opaque reports whether such flows are forwarded opaque (level 0) without
// a route's settings.
func (d *DefaultRoute) Opaque() bool {
	return d == nil || !d.Close && d.Route == nil
}

// MarshalYAML writes the same spellings the file accepts.
func (d DefaultRoute) MarshalYAML() (any, error) {
	switch {
	case d.Close:
		return "close", nil
	case d.Route == nil:
		return "opaque", nil
	}
	n := &yaml.Node{}
	if err := n.Encode(d.Route); err != nil {
		return nil, err
	}
	m := &yaml.Node{Kind: yaml.MappingNode, Tag: "!!map"}
	for i := 0; i+1 < len(n.Content); i += 2 {
		if k := n.Content[i].Value; k != "name" && k != "match" {
			m.Content = append(m.Content, n.Content[i], n.Content[i+1])
		}
	}
	return m, nil
}

// LevelOrDefault is the route's awareness level: Level when set, else 0 for
// passthrough (the stream stays encrypted) and 1 otherwise.
func (r Route) LevelOrDefault() int {
	switch {
	case r.Level != nil:
		return *r.Level
	case r.TLS == TLSPassthrough:
		return 0
	}
	return 1
}

// RouteMatch selects flows; every list is optional, an empty one matches
// anything, and a flow must satisfy every non-empty list.
type RouteMatch struct {
	Destinations []netip.Prefix `yaml:"destinations"`
	Ports        []PortRange    `yaml:"ports"`
	// SNI holds lower-case names, exact or "*.suffix" (one or more labels in
	// front of suffix).
	SNI     []string       `yaml:"sni"`
	Clients []netip.Prefix `yaml:"clients"`
}

// routeTable is the schema of one entry of routes (and of default_route,
// less name and match): the keys below, then credentials.
var routeTable = append(routeKeys, credentialsTable...)

var routeKeys = table[Route]{
	key("name", "the route's name in logs and metrics", func(r *Route) *string { return &r.Name }, str),
	key("match.destinations", "destination prefixes the route applies to", func(r *Route) *[]netip.Prefix { return &r.Match.Destinations }, list(parsePrefix)).
		checkedBy(each(checkPrefix)),
	key("match.ports", "destination ports the route applies to", func(r *Route) *[]PortRange { return &r.Match.Ports }, list(parsePortRange)).
		checkedBy(each(checkPortRange)),
	key("match.sni", "server names the route applies to", func(r *Route) *[]string { return &r.Match.SNI }, list(parseSNI)).
		checkedBy(each(checkSNI)),
	key("match.clients", "client prefixes the route applies to", func(r *Route) *[]netip.Prefix { return &r.Match.Clients }, list(parsePrefix)).
		checkedBy(each(checkPrefix)),
	key("tls", "passthrough, terminate or plaintext", func(r *Route) *string { return &r.TLS }, str).
		checked(checkTLS),
	// Filled in so that the effective level shows in a printed config.
	key("level", "awareness: 0 opaque, 1 headers, 2 JSON-RPC bodies", func(r *Route) **int { return &r.Level }, ptr(integer[int](checkLevel))).
		defBy(func(r *Route) (*int, bool) { l := r.LevelOrDefault(); return &l, true }).
		checked(func(l *int) string {
			if l == nil {
				return ""
			}
			return checkLevel(int64(*l))
		}),
	// Close at level 1 and up: passing the bytes on would skip the
	// inspection the route asks for.
	key("on_mismatch", "what bytes the route did not expect get: passthrough or close", func(r *Route) *string { return &r.OnMismatch }, str).
		defBy(func(r *Route) (string, bool) {
			if r.LevelOrDefault() >= 1 {
				return OnMismatchClose, true
			}
			return OnMismatchPassthrough, true
		}).
		checked(func(s string) string { return checkOneOf(s, OnMismatchPassthrough, OnMismatchClose) }),
	key("on_rule_error", "what a rule that fails to evaluate does: closed or open", func(r *Route) *string { return &r.OnRuleError }, str).
		def(OnRuleErrorClosed).
		checked(func(s string) string { return checkOneOf(s, OnRuleErrorClosed, OnRuleErrorOpen) }),
	key("development", "silences the plaintext warning", func(r *Route) *bool { return &r.Development }, boolean),
	key("plaintext_upstream_trusted_network", "lets a terminate route go upstream in plaintext", func(r *Route) *bool { return &r.PlaintextUpstreamTrustedNetwork }, boolean),
	key("strict_mcp_headers", "refuses MCP requests without Mcp-Method", func(r *Route) *bool { return &r.StrictMCPHeaders }, boolean),
	key("allow_upgrade", "protocols a request may switch to", func(r *Route) *[]string { return &r.AllowUpgrade }, list(parseUpgrade)).
		checkedBy(unique(checkUpgrade, quote)),
	key("http_methods", "the request methods the route lets through (others refused)", func(r *Route) *[]string { return &r.HTTPMethods }, list(parseString)).
		checkedBy(unique(checkHTTPMethod, quote)).
		needing(func(r *Route, methods []string) (string, string) {
			if l := r.LevelOrDefault(); len(methods) > 0 && l == 0 {
				return "level", "needs level 1: a level 0 route does not read requests"
			}
			return "", ""
		}),
	key("max_body", "level 2 bound of a body or an event (bytes)", func(r *Route) *int64 { return &r.MaxBody }, integer[int64](checkMaxBody)).
		defBy(func(r *Route) (int64, bool) { return DefaultMaxBody, r.LevelOrDefault() >= 2 }),
	key("on_oversized_response", "what level 2 does with a response over max_body: close or forward", func(r *Route) *string { return &r.OnOversizedResponse }, str).
		defBy(func(r *Route) (string, bool) { return OnOversizedClose, r.LevelOrDefault() >= 2 }),
	key("validate_arguments", "checks tools/call arguments against the tool's schema", func(r *Route) *bool { return &r.ValidateArguments }, boolean),
	key("rule_set", "the rule set applied on the route", func(r *Route) *string { return &r.RuleSet }, str),
	key("audit", "records every request durably before it goes upstream", func(r *Route) *bool { return &r.Audit }, boolean),
	key("audit_arguments", "records arguments (redacted) besides their hash", func(r *Route) *bool { return &r.AuditArguments }, boolean),
	key("token_audience", "checks a bearer token's audience before forwarding: on or off", func(r *Route) *string { return &r.TokenAudience }, scalar(parseOnOff)).
		defBy(func(r *Route) (string, bool) { return On, r.seesHTTP() }),
	key("audiences", "token audiences accepted besides the canonical URI", func(r *Route) *[]string { return &r.Audiences }, list(parseString)).
		checkedBy(unique(checkAudience, quote)),
	key("tool_pins", "pins the definitions servers list, quarantining a changed one: off, learn or enforce", func(r *Route) *string { return &r.ToolPins }, scalar(parseToolPins)).
		defBy(func(r *Route) (string, bool) { return Off, r.seesHTTP() && r.LevelOrDefault() >= 2 }),
	key("on_divergence", "what a server showing clients different definitions gets: log or quarantine", func(r *Route) *string { return &r.OnDivergence }, str).
		defBy(func(r *Route) (string, bool) { return OnDivergenceLog, r.ToolPinsOn() }).
		checked(func(s string) string {
			if s == "" {
				return ""
			}
			return checkOnDivergence(s)
		}),
	key("trace_propagation", "whether the request sent upstream carries the appliance's span as parent: record or inject", func(r *Route) *string { return &r.TracePropagation }, str).
		defBy(func(r *Route) (string, bool) { return TraceRecord, r.seesHTTP() }).
		checked(func(s string) string {
			if s == "" {
				return ""
			}
			return checkOneOf(s, TraceRecord, TraceInject)
		}),
}

// defaultRouteTable is the route keys default_route takes.
var defaultRouteTable = routeTable.without("name", "match", "credentials")

// defaultRouteRefused explains the route keys default_route does not take.
var defaultRouteRefused = map[string]string{
	"name":        fmt.Sprintf("default_route takes no name: its flows are logged under the route name %q", DefaultRouteName),
	"match":       "default_route takes no match: it applies to exactly the flows no route matches",
	"credentials": "default_route takes no credentials: it names no destination, and a credential goes only to a destination a route names (match.destinations or match.sni)",
}

var routesBlock = block[Config]{
	path: "routes", doc: "tried in order; the first that matches decides a flow",
	decodeFn: func(d *decoder, c *Config, v *yaml.Node, key string) bool {
		out, ok := entries(d, v, key, "routes", routeTable, func(r *Route, n *yaml.Node) {
			r.Line, r.Column = n.Line, n.Column
		})
		c.Routes = out
		return ok
	},
	fillFn: func(c *Config, key string, given func(string) bool) {
		for i := range c.Routes {
			routeTable.fill(&c.Routes[i], fmt.Sprintf("%s[%d]", key, i), given)
		}
	},
	checkFn: func(v *validator, c *Config, key string) {
		for i := range c.Routes {
			routeTable.check(v, &c.Routes[i], fmt.Sprintf("%s[%d]", key, i))
		}
	},
}

var defaultRouteBlock = block[Config]{
	path: "default_route", doc: "what flows no route matches get: opaque, close or route keys",
	decodeFn: decodeDefaultRoute,
	fillFn: func(c *Config, key string, given func(string) bool) {
		if d := c.DefaultRoute; d != nil && d.Route != nil {
			defaultRouteTable.fill(d.Route, key, given)
		}
	},
	checkFn: func(v *validator, c *Config, key string) {
		if d := c.DefaultRoute; d != nil && !d.Close && d.Route != nil {
			defaultRouteTable.check(v, d.Route, key)
		}
	},
}

// decodeDefaultRoute decodes `default_route`: opaque, close, or a mapping
// of route keys without name and match.
func decodeDefaultRoute(d *decoder, c *Config, v *yaml.Node, key string) bool {
	switch {
	case v.Kind == yaml.ScalarNode && v.ShortTag() == "!!str" && v.Value == "opaque":
		c.DefaultRoute = &DefaultRoute{}
		return true
	case v.Kind == yaml.ScalarNode && v.ShortTag() == "!!str" && v.Value == "close":
		c.DefaultRoute = &DefaultRoute{Close: true}
		return true
	case v.Kind == yaml.MappingNode:
		r := &Route{Name: DefaultRouteName, Line: v.Line, Column: v.Column}
		c.DefaultRoute = &DefaultRoute{Route: r}
		return d.mappingRefusing(v, key, defaultRouteTable.fields(d, r, ""), defaultRouteRefused)
	case v.Kind == yaml.ScalarNode && v.ShortTag() == "!!str":
		d.fail(v, key, fmt.Sprintf("unknown value %s (valid: opaque, close, or a mapping of route keys: %s)", quote(v.Value), fieldNames(defaultRouteTable.fields(d, &Route{}, ""))))
	default:
		d.fail(v, key, "expected opaque, close or a mapping of route keys, got "+describe(v))
	}
	return false
}

// WithDefaults returns r with the defaults Parse fills for the keys a route
// leaves out, taking a zero value as absent (a route built in code).
func (r Route) WithDefaults() Route {
	routeTable.fill(&r, "", nil)
	return r
}

// checkHTTPMethod accepts an HTTP method as requests spell it: upper-case letters, with '-' or
// '_' inside (M-SEARCH). Methods are case-sensitive and every registered one is spelt so; a
// lower-case entry would match no request and refuse them all.
func checkHTTPMethod(m string) string {
	if m == "" {
		return "must not be empty"
	}
	for i, c := range m {
		if (c < 'A' || c > 'Z') && !((c == '-' || c == '_') && i > 0 && i < len(m)-1) {
			return quote(m) + " is not an HTTP method in upper case (e.g. POST, GET, DELETE)"
		}
	}
	return ""
}
