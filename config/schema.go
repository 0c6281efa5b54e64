package config

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"
)

// configTable is the whole file format: every key in the order error
// messages list them, where its value goes, its default and its own rule.
var configTable = table[Config]{
	key("mechanism", "how flows are steered into the appliance", func(c *Config) *Mechanism { return &c.Mechanism }, mechanismName).
		def(NftablesTProxy).checked(checkMechanism),

	intKey("listen.port", "port of the transparent listeners", func(c *Config) *uint16 { return &c.Listen.Port }, checkPort).
		def(DefaultPort),
	key("listen.addresses", "addresses the transparent listeners bind (default by mechanism)", func(c *Config) *[]netip.Addr { return &c.Listen.Addresses }, list(parseAddr)).
		defBy(func(c *Config) ([]netip.Addr, bool) { return DefaultAddresses(c.Mechanism), true }).
		checkedBy(unique(checkAddr, netip.Addr.String)),

	key("intercept.destinations", "prefixes whose traffic is steered", func(c *Config) *[]netip.Prefix { return &c.Intercept.Destinations }, list(parsePrefix)).
		checkedBy(each(checkPrefix)),
	key("intercept.ports", "ports (or ranges) that are steered", func(c *Config) *[]PortRange { return &c.Intercept.Ports }, list(parsePortRange)).
		checkedBy(each(checkPortRange)),
	key("intercept.local", "whether the host's own processes are steered too", func(c *Config) **bool { return &c.Intercept.Local }, ptr(boolean)).
		defBy(func(*Config) (*bool, bool) { t := true; return &t, true }),

	intKey("steering.mark", "firewall mark of intercepted flows", func(c *Config) *uint32 { return &c.Steering.Mark }, checkMark).
		def(DefaultMark),
	intKey("steering.bypass_mark", "firewall mark of the appliance's own upstream dials", func(c *Config) *uint32 { return &c.Steering.BypassMark }, checkMark).
		def(DefaultBypassMark),
	intKey("steering.route_table", "policy routing table of the TPROXY route", func(c *Config) *int { return &c.Steering.RouteTable }, checkRouteTable).
		def(DefaultRouteTable),
	intKey("steering.rule_priority", "priority of the policy routing rule", func(c *Config) *int { return &c.Steering.RulePriority }, checkRulePriority).
		def(DefaultRulePriority),

	key("external.original_dst", "how an external integration hands over the destination", func(c *Config) *string { return &c.External.OriginalDst }, str).
		def(OriginalDstLocalAddress).checked(checkOriginalDst),

	key("ebpf.cgroup", "cgroup v2 directory whose connects are steered (mechanism ebpf)", func(c *Config) *string { return &c.EBPF.Cgroup }, str),

	key("dns.listen", "where the DNS server answers", func(c *Config) *[]netip.AddrPort { return &c.DNS.Listen }, list(parseDNSListen)).
		checkedBy(unique(nil, netip.AddrPort.String)),
	key("dns.names", "names answered with virtual IPs", func(c *Config) *[]string { return &c.DNS.Names }, list(parseSNI)).
		checkedBy(unique(checkSNI, quote)),
	key("dns.pools.v4", "IPv4 VIP pool", func(c *Config) *netip.Prefix { return &c.DNS.Pools.V4 }, pool(false)).
		checked(poolCheck(false)),
	key("dns.pools.v6", "IPv6 VIP pool", func(c *Config) *netip.Prefix { return &c.DNS.Pools.V6 }, pool(true)).
		checked(poolCheck(true)),
	key("dns.upstream", "resolvers queried for everything else", func(c *Config) *[]netip.AddrPort { return &c.DNS.Upstream }, list(parseDNSListen)),
	key("dns.clients", "client prefixes allowed to query", func(c *Config) *[]netip.Prefix { return &c.DNS.Clients }, list(parsePrefix)).
		checkedBy(each(checkPrefix)),
	key("dns.ttl", "TTL of VIP answers", func(c *Config) *Duration { return &c.DNS.TTL }, duration).
		def(Duration{DefaultDNSTTL}).checked(durationBetween(time.Second, 24*time.Hour)),
	key("dns.hold", "how long an idle VIP stays bound to its name", func(c *Config) *Duration { return &c.DNS.Hold }, duration).
		def(Duration{DefaultDNSHold}).checked(durationBetween(time.Minute, 365*24*time.Hour)),
	key("dns.quarantine", "how long a freed VIP is not reused", func(c *Config) *Duration { return &c.DNS.Quarantine }, duration).
		def(Duration{DefaultDNSQuarantine}),
	key("dns.state_dir", "where the VIP table persists", func(c *Config) *string { return &c.DNS.StateDir }, str).
		def(DefaultDNSStateDir).checked(checkPath),
	intKey("dns.max_names", "bound of the VIP table", func(c *Config) *int { return &c.DNS.MaxNames }, checkCount).
		def(DefaultDNSMaxNames),
	key("dns.client_quota", "names one client may hold (0: derived)", func(c *Config) *int { return &c.DNS.ClientQuota }, integer[int](checkQuota)),
	key("dns.pattern_quota", "names one pattern may hold (0: derived)", func(c *Config) *int { return &c.DNS.PatternQuota }, integer[int](checkQuota)),
	intKey("dns.cache_size", "entries of the forwarder's cache", func(c *Config) *int { return &c.DNS.CacheSize }, checkCount).
		def(DefaultDNSCacheSize),
	key("dns.client_rate", "queries per second of one client", func(c *Config) *float64 { return &c.DNS.ClientRate }, rate).
		def(DefaultDNSClientRate).checked(checkRate),
	intKey("dns.client_burst", "query burst of one client", func(c *Config) *int { return &c.DNS.ClientBurst }, checkCount).
		def(DefaultDNSClientBurst),
	key("dns.timeout", "bound of one upstream exchange", func(c *Config) *Duration { return &c.DNS.Timeout }, duration).
		def(Duration{DefaultDNSTimeout}).checked(durationBetween(10*time.Millisecond, time.Minute)),

	key("upstream_deny", "prefixes the appliance never dials", func(c *Config) *[]netip.Prefix { return &c.UpstreamDeny }, list(parsePrefix)).
		defBy(func(*Config) ([]netip.Prefix, bool) { return slices.Clone(DefaultUpstreamDeny), true }).
		checkedBy(each(checkPrefix)),

	key("ca.dir", "directory of the appliance's CA", func(c *Config) *string { return &c.CA.Dir }, str).
		def(DefaultCADir).checked(checkPath),

	key("upstream_tls.extra_cas", "PEM files trusted besides the system roots", func(c *Config) *[]string { return &c.Upstream.ExtraCAs }, list(parseString)).
		checkedBy(each(checkPath)),
	key("upstream_tls.handshake_timeout", "bound of the upstream TLS handshake", func(c *Config) *Duration { return &c.Upstream.HandshakeTimeout }, duration).
		def(Duration{DefaultHandshakeTimeout}).checked(positive),

	key("tls.peek_timeout", "how long to wait for a client's first bytes", func(c *Config) *Duration { return &c.TLS.PeekTimeout }, duration).
		def(Duration{DefaultPeekTimeout}).checked(positive),
	intKey("tls.max_client_hello", "bound of a ClientHello (bytes)", func(c *Config) *int { return &c.TLS.MaxClientHello }, checkMaxClientHello).
		def(DefaultMaxClientHello),
	intKey("tls.leaf_cache", "minted leaves kept", func(c *Config) *int { return &c.TLS.LeafCache }, checkCount).
		def(DefaultLeafCache),
	key("tls.leaf_validity", "lifetime of a minted leaf", func(c *Config) *Duration { return &c.TLS.LeafValidity }, duration).
		def(Duration{DefaultLeafValidity}).checked(func(d Duration) string { return checkLeafValidity(d.Duration) }),

	intKey("http.max_header_bytes", "bound of a request head", func(c *Config) *int { return &c.HTTP.MaxHeaderBytes }, checkMaxHeaderBytes).
		def(DefaultMaxHeaderBytes),
	key("http.header_timeout", "bound of a request head's arrival", func(c *Config) *Duration { return &c.HTTP.HeaderTimeout }, duration).
		def(Duration{DefaultHeaderTimeout}).checked(positive),

	routesBlock,
	defaultRouteBlock,
	ruleSetsBlock,

	intKey("limits.max_flows", "flows open at once", func(c *Config) *int { return &c.Limits.MaxFlows }, checkCount).
		def(DefaultMaxFlows),
	intKey("limits.max_flows_per_client", "flows one client may hold open", func(c *Config) *int { return &c.Limits.MaxFlowsPerClient }, checkCount).
		defBy(func(c *Config) (int, bool) {
			// Clamped so that lowering only max_flows does not make the
			// untouched default invalid.
			if c.Limits.MaxFlows >= 1 && c.Limits.MaxFlows < DefaultMaxFlowsPerClient {
				return c.Limits.MaxFlows, true
			}
			return DefaultMaxFlowsPerClient, true
		}),
	key("limits.idle_timeout", "how long a flow may stay silent", func(c *Config) *Duration { return &c.Limits.IdleTimeout }, duration).
		def(Duration{DefaultIdleTimeout}).checked(positive),
	key("limits.body_timeout", "bound of a request body's arrival (Level 1)", func(c *Config) *Duration { return &c.Limits.BodyTimeout }, duration).
		def(Duration{DefaultBodyTimeout}).checked(positive),
	key("limits.connect_timeout", "bound of an upstream connect", func(c *Config) *Duration { return &c.Limits.ConnectTimeout }, duration).
		def(Duration{DefaultConnectTimeout}).checked(positive),
	key("limits.drain_timeout", "how long open flows may finish on shutdown", func(c *Config) *Duration { return &c.Limits.DrainTimeout }, duration).
		def(Duration{DefaultDrainTimeout}).checked(func(d Duration) string { return checkNonNegative(d.Duration) }),

	key("admin.listen", "host:port of the admin endpoint, or off", func(c *Config) *string { return &c.Admin.Listen }, str).
		def(DefaultAdminListen).checked(checkAdminListen),

	key("log.level", "debug, info, warn or error", func(c *Config) *string { return &c.Log.Level }, str).
		def(DefaultLogLevel).checked(checkLogLevel),
	key("log.flows", "where the flow log goes: stdout, off or a file", func(c *Config) *string { return &c.Log.Flows }, str).
		def(FlowsStdout).checked(checkLogFlows),
	// Rotation applies to a file only; an explicit flows_max_size: 0 leaves it to logrotate.
	key("log.flows_max_size", "size at which the flow log file rotates (0: never)", func(c *Config) *int64 { return &c.Log.FlowsMaxSize }, size(checkFlowsMaxSize)).
		defBy(func(c *Config) (int64, bool) { return DefaultFlowsMaxSize, c.Log.FlowsFile() }),
	key("log.flows_max_files", "rotated flow log files kept", func(c *Config) *int { return &c.Log.FlowsMaxFiles }, integer[int](checkFlowsMaxFiles)).
		defBy(func(c *Config) (int, bool) { return DefaultFlowsMaxFiles, c.Log.FlowsFile() && c.Log.FlowsMaxSize > 0 }),
}

// routeTable is the schema of one entry of routes (and of default_route,
// less name and match).
var routeTable = table[Route]{
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
	key("max_body", "level 2 bound of a body or an event (bytes)", func(r *Route) *int64 { return &r.MaxBody }, integer[int64](checkMaxBody)).
		defBy(func(r *Route) (int64, bool) { return DefaultMaxBody, r.LevelOrDefault() >= 2 }),
	key("on_oversized_response", "what level 2 does with a response over max_body: close or forward", func(r *Route) *string { return &r.OnOversizedResponse }, str).
		defBy(func(r *Route) (string, bool) { return OnOversizedClose, r.LevelOrDefault() >= 2 }),
	key("validate_arguments", "checks tools/call arguments against the tool's schema", func(r *Route) *bool { return &r.ValidateArguments }, boolean),
	key("rule_set", "the rule set applied on the route", func(r *Route) *string { return &r.RuleSet }, str),
}

// defaultRouteTable is the route keys default_route takes.
var defaultRouteTable = routeTable.without("name", "match")

// defaultRouteRefused explains the route keys default_route does not take.
var defaultRouteRefused = map[string]string{
	"name":  fmt.Sprintf("default_route takes no name: its flows are logged under the route name %q", DefaultRouteName),
	"match": "default_route takes no match: it applies to exactly the flows no route matches",
}

// ruleTable is the schema of one rule of a rule set.
var ruleTable = table[Rule]{
	key("name", "the rule's name in the decision log", func(r *Rule) *string { return &r.Name }, str),
	expr("when", "CEL condition; absent matches every request", func(r *Rule) (*string, *Pos) { return &r.When, &r.WhenPos }),
	key("action", "allow, deny, rate_limit or redact", func(r *Rule) *string { return &r.Action }, str),
	key("reason", "one line for the response body and the log", func(r *Rule) *string { return &r.Reason }, str).
		checked(checkReason),
	block[Rule]{
		path: "rate_limit", doc: "token bucket of a rate_limit rule",
		decodeFn: func(d *decoder, r *Rule, v *yaml.Node, key string) bool {
			r.RateLimit = &RateLimit{}
			return d.mapping(v, key, rateLimitTable.fields(d, r, ""))
		},
		fillFn: func(r *Rule, key string, given func(string) bool) {
			if r.RateLimit != nil {
				rateLimitTable.fill(r, key, given)
			}
		},
		checkFn: func(v *validator, r *Rule, key string) {
			if r.RateLimit != nil {
				rateLimitTable.check(v, r, key)
			}
		},
	},
	block[Rule]{
		path: "redact", doc: "what a redact rule hides",
		decodeFn: func(d *decoder, r *Rule, v *yaml.Node, key string) bool {
			r.Redact = &Redact{}
			return d.mapping(v, key, redactTable.fields(d, r, ""))
		},
	},
}

// rateLimitTable is the rate_limit block of a rule; Rule.RateLimit is set
// before it is used.
var rateLimitTable = table[Rule]{
	expr("key", "CEL expression naming the bucket", func(r *Rule) (*string, *Pos) { return &r.RateLimit.Key, &r.KeyPos }),
	key("rate", "tokens per second", func(r *Rule) *float64 { return &r.RateLimit.Rate }, rate),
	key("burst", "bucket size", func(r *Rule) *int { return &r.RateLimit.Burst }, integer[int](checkCount)),
	intKey("max_keys", "buckets the rule keeps", func(r *Rule) *int { return &r.RateLimit.MaxKeys }, checkMaxKeys).
		def(DefaultRateLimitKeys),
}

// redactTable is the redact block of a rule; Rule.Redact is set before it
// is used.
var redactTable = table[Rule]{
	key("paths", "JSON paths whose values are hidden", func(r *Rule) *[]string { return &r.Redact.Paths }, list(parseRedactPath)),
	key("patterns", "regular expressions whose matches are hidden", func(r *Rule) *[]string { return &r.Redact.Patterns }, list(parseRedactPattern)),
	key("marker", "what replaces a hidden value", func(r *Rule) *string { return &r.Redact.Marker }, str),
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

var ruleSetsBlock = block[Config]{
	path: "rule_sets", doc: "named lists of rules that routes apply",
	decodeFn: decodeRuleSets,
	fillFn: func(c *Config, key string, given func(string) bool) {
		for _, name := range c.RuleSetOrder {
			for i := range c.RuleSets[name] {
				ruleTable.fill(&c.RuleSets[name][i], fmt.Sprintf("%s[%d]", join(key, segment(name)), i), given)
			}
		}
	},
	checkFn: func(v *validator, c *Config, key string) {
		for _, name := range c.ruleSetNames() {
			for i := range c.RuleSets[name] {
				ruleTable.check(v, &c.RuleSets[name][i], fmt.Sprintf("%s[%d]", join(key, segment(name)), i))
			}
		}
	},
}

// decodeRuleSets decodes a mapping whose keys are names the user chose,
// which a table cannot list; RuleSetOrder records them as the file lists
// them.
func decodeRuleSets(d *decoder, c *Config, v *yaml.Node, key string) bool {
	if v.Kind != yaml.MappingNode {
		d.fail(v, key, "expected a mapping of rule set names to lists of rules, got "+describe(v))
		return false
	}
	sets := map[string][]Rule{}
	var names []string
	ok := true
	d.pairs(v, key, func(kn, vn *yaml.Node, k string) {
		if !ok || !d.count(kn, k, 1) {
			ok = false
			return
		}
		// The key, not the list, is what a message about the set's
		// name or existence should point at.
		d.keys[k], d.vals[k] = kn, kn
		var rules []Rule
		if !isNull(vn) { // "name:" alone is a set without rules
			var good bool
			rules, good = entries(d, vn, k, "rules", ruleTable, func(r *Rule, n *yaml.Node) {
				r.Line, r.Column = n.Line, n.Column
			})
			if !good {
				d.bad[k] = true
			}
		}
		// Registered even when broken, so that a route naming it is
		// not also told the set does not exist.
		sets[kn.Value] = rules
		names = append(names, kn.Value)
	})
	if len(names) > 0 {
		c.RuleSets, c.RuleSetOrder = sets, names
	}
	return ok
}

// expr takes any scalar, since `when: true` is as much a CEL expression as
// a quoted one, and records where its text starts for the policy package.
func expr(path, doc string, get func(*Rule) (*string, *Pos)) block[Rule] {
	return block[Rule]{path: path, doc: doc, decodeFn: func(d *decoder, r *Rule, v *yaml.Node, key string) bool {
		if v.Kind != yaml.ScalarNode {
			d.fail(v, key, "expected a CEL expression (a string), got "+describe(v))
			return false
		}
		s, pos := get(r)
		*s, *pos = v.Value, d.textPos(v)
		return true
	}}
}

var mechanismName = scalar(func(n *yaml.Node) (Mechanism, string) {
	s, msg := parseString(n)
	return Mechanism(s), msg
})

// pool decodes a VIP pool prefix of the given family; an empty string is no
// pool of this family (how an unset pool is written back).
func pool(v6 bool) func(*decoder, *yaml.Node, string) (netip.Prefix, bool) {
	return scalar(func(n *yaml.Node) (netip.Prefix, string) {
		if n.Kind == yaml.ScalarNode && n.ShortTag() == "!!str" && strings.TrimSpace(n.Value) == "" {
			return netip.Prefix{}, ""
		}
		p, msg := parsePrefix(n)
		if msg == "" {
			msg = checkPool(p, v6)
		}
		return p, msg
	})
}

func poolCheck(v6 bool) func(netip.Prefix) string {
	return func(p netip.Prefix) string {
		if !p.IsValid() {
			return ""
		}
		return checkPool(p, v6)
	}
}

func positive(d Duration) string { return checkPositive(d.Duration) }

func durationBetween(lo, hi time.Duration) func(Duration) string {
	return func(d Duration) string { return checkBetween(d.Duration, lo, hi) }
}

// applyDefaults fills every key for which given reports false. It works on
// presence rather than zero values so that an explicit 0 in the file is
// validated instead of silently replaced.
func applyDefaults(c *Config, given func(key string) bool) {
	configTable.fill(c, "", given)
}

// WithDefaults returns r with the defaults Parse fills for the keys a route
// leaves out, taking a zero value as absent (a route built in code).
func (r Route) WithDefaults() Route {
	routeTable.fill(&r, "", nil)
	return r
}
