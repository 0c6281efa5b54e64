package config

import (
	"fmt"
	"math"
	"net"
	"net/netip"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"
)

// Validate checks c as it is, without applying defaults, so a config built in
// code is held to the same rules as a loaded one. The error is an Errors
// value; Line is 0 because there is no file to point into.
func (c *Config) Validate() error {
	errs := c.validate()
	if len(errs) == 0 {
		return nil
	}
	for _, e := range errs {
		e.File = c.Path
	}
	return errs.sorted()
}

type validator struct{ errs Errors }

func (v *validator) check(key, msg string) {
	v.checkAlt(key, "", msg)
}

func (v *validator) checkAlt(key, alt, msg string) {
	if msg != "" {
		v.errs = append(v.errs, &Error{Key: key, Msg: msg, alt: alt})
	}
}

// validate holds every rule that can be stated on typed values: each key's
// own rule from the schema table, then the rules that relate keys. Parse
// runs it too and only adds positions, so a rule cannot be enforced in one
// path and forgotten in the other.
func (c *Config) validate() Errors {
	var v validator
	configTable.check(&v, c, "")

	switch {
	case len(c.Listen.Addresses) > 0:
	case c.Mechanism == External:
		v.check("listen.addresses", `required when mechanism is "external": the integration decides where flows arrive`)
	case c.Mechanism.Known():
		v.check("listen.addresses", "must not be empty")
	}

	// The eBPF program sees every connect of its cgroup, so there empty
	// means everything; the other mechanisms install rules per prefix and
	// port, and steering a whole host by accident is not a default.
	// A federation-only or inbound-only appliance (mechanism external, which installs nothing)
	// steers no outbound flows.
	noOutbound := c.Mechanism == External && (c.FederationOn() || c.InboundOn())
	if len(c.Intercept.Destinations) == 0 && c.Mechanism != EBPF && c.Mechanism != DNS && !noOutbound {
		v.check("intercept.destinations", "required: list the prefixes whose traffic is intercepted, e.g. [10.0.0.0/8]")
	}
	if len(c.Intercept.Ports) == 0 && c.Mechanism != EBPF && c.Mechanism != DNS && !noOutbound {
		v.check("intercept.ports", "required: list the ports to intercept, e.g. [80, 443, \"3000-3010\"]")
	}

	v.marks(c.Steering)

	switch {
	case c.EBPF.Cgroup == "" && c.Mechanism == EBPF:
		v.checkAlt("ebpf.cgroup", "mechanism", "mechanism ebpf needs ebpf.cgroup (a cgroup v2 directory), or use `mcpintercept exec`")
	case c.EBPF.Cgroup != "":
		v.check("ebpf.cgroup", checkCgroup(c.EBPF.Cgroup))
	}

	v.dns(c)
	v.routes(c)
	v.defaultRoute(c)
	v.telemetry(c)
	v.ruleSets(c)
	v.tokens(c)
	v.federation(c)
	v.inbound(c)

	l := c.Limits
	if l.MaxFlows >= 1 && l.MaxFlowsPerClient > l.MaxFlows {
		v.checkAlt("limits.max_flows_per_client", "limits.max_flows",
			fmt.Sprintf("%d exceeds limits.max_flows (%d)", l.MaxFlowsPerClient, l.MaxFlows))
	}
	v.logRotation(c.Log)
	return v.errs
}

// marks keeps the two marks apart.
func (v *validator) marks(s Steering) {
	if s.Mark == 0 || s.BypassMark == 0 {
		return
	}
	switch {
	case s.Mark == s.BypassMark:
		v.checkAlt("steering.bypass_mark", "steering.mark",
			fmt.Sprintf("must differ from steering.mark (both are %#x)", s.Mark))
	case s.Mark&s.BypassMark != 0:
		v.checkAlt("steering.bypass_mark", "steering.mark",
			fmt.Sprintf("%#x shares bits %#x with steering.mark %#x; the two marks must have no bits in common so neither can be mistaken for the other",
				s.BypassMark, s.Mark&s.BypassMark, s.Mark))
	}
}

// dns checks the dns section: its values always, what the mechanism needs
// only when it is dns (other mechanisms ignore the section).
func (v *validator) dns(c *Config) {
	d := c.DNS
	on := c.Mechanism == DNS
	pools := []netip.Prefix{d.Pools.V4, d.Pools.V6}
	inPool := func(a netip.Addr) netip.Prefix {
		for _, p := range pools {
			if p.IsValid() && p.Contains(a.Unmap()) {
				return p
			}
		}
		return netip.Prefix{}
	}
	for i, a := range d.Upstream {
		if p := inPool(a.Addr()); p.IsValid() {
			v.check(fmt.Sprintf("dns.upstream[%d]", i), fmt.Sprintf("%s is inside the VIP pool %s", a.Addr(), p))
		}
	}
	for i, a := range d.Listen {
		if p := inPool(a.Addr()); p.IsValid() {
			v.check(fmt.Sprintf("dns.listen[%d]", i), fmt.Sprintf("%s is inside the VIP pool %s", a.Addr(), p))
		}
	}
	for i, p := range d.Clients {
		for _, pool := range pools {
			if pool.IsValid() && p.IsValid() && p.Overlaps(pool) {
				v.check(fmt.Sprintf("dns.clients[%d]", i), fmt.Sprintf("%s overlaps the VIP pool %s", p, pool))
			}
		}
	}
	for _, q := range []struct {
		key string
		n   int
	}{{"dns.client_quota", d.ClientQuota}, {"dns.pattern_quota", d.PatternQuota}} {
		if q.n > d.MaxNames {
			v.check(q.key, fmt.Sprintf("must not exceed dns.max_names (%d): a quota above the table's size bounds nothing", d.MaxNames))
		}
	}
	if !on {
		return
	}
	if min := d.TTL.Duration + c.Limits.IdleTimeout.Duration; d.Quarantine.Duration <= min {
		v.checkAlt("dns.quarantine", "dns.ttl", fmt.Sprintf("must be longer than dns.ttl + limits.idle_timeout (%s): a client may still hold the answer and a flow may still start to a freed VIP", min))
	}
	if len(d.Listen) == 0 {
		v.checkAlt("dns.listen", "mechanism", `required with mechanism dns: the addresses the DNS server answers on, e.g. ["10.0.0.1:53"]`)
	}
	if len(d.Names) == 0 {
		v.checkAlt("dns.names", "mechanism", `required with mechanism dns: the names to intercept, e.g. [mcp.example.com, "*.mcp.example.com"]`)
	}
	if !d.Pools.V4.IsValid() && !d.Pools.V6.IsValid() {
		v.checkAlt("dns.pools", "mechanism", "required with mechanism dns: at least one VIP pool, e.g. v4: 198.18.0.0/15")
	}
	if len(d.Upstream) == 0 {
		v.checkAlt("dns.upstream", "mechanism", `required with mechanism dns: the resolvers queried for everything else, e.g. ["10.0.0.53:53"]`)
	}
	if len(d.Clients) == 0 {
		v.checkAlt("dns.clients", "mechanism", "required with mechanism dns: the client prefixes allowed to query (the server is never an open resolver)")
	}
}

func checkBetween(d, lo, hi time.Duration) string {
	if d < lo || d > hi {
		return fmt.Sprintf("must be between %s and %s, got %s", lo, hi, d)
	}
	return ""
}

// checkPool accepts a VIP pool of the right family with room for a few VIPs.
func checkPool(p netip.Prefix, v6 bool) string {
	switch {
	case !p.IsValid():
		return "invalid prefix"
	case v6 && p.Addr().Is4():
		return fmt.Sprintf("%s is IPv4; v6 takes an IPv6 prefix", p)
	case !v6 && !p.Addr().Is4():
		return fmt.Sprintf("%s is not IPv4; v4 takes an IPv4 prefix", p)
	case p != p.Masked():
		return fmt.Sprintf("%s has host bits set; write %s", p, p.Masked())
	case p.Addr().IsLoopback() || p.Addr().IsLinkLocalUnicast() || p.Addr().IsMulticast() || p.Addr().IsUnspecified():
		return fmt.Sprintf("%s is loopback, link-local, multicast or unspecified space; pick a private or reserved range routed to the appliance", p)
	case p.Bits() > p.Addr().BitLen()-2:
		return fmt.Sprintf("%s is too small: give at least a /%d", p, p.Addr().BitLen()-2)
	}
	return ""
}

// checkPrefix refuses what parsePrefix would never return (a config built
// in code).
func checkPrefix(p netip.Prefix) string {
	switch {
	case !p.IsValid():
		return "invalid prefix"
	case p != p.Masked():
		return fmt.Sprintf("%s has host bits set; write %s", p, p.Masked())
	}
	return ""
}

func checkAddr(a netip.Addr) string {
	if !a.IsValid() {
		return "invalid address"
	}
	return ""
}

func (v *validator) routes(c *Config) {
	names := map[string]int{}
	for i, r := range c.Routes {
		key := fmt.Sprintf("routes[%d]", i)
		switch j, dup := names[r.Name]; {
		case r.Name == "":
			v.check(key+".name", "required: a name for logs and metrics, e.g. partner-api")
		case dup:
			v.check(key+".name", fmt.Sprintf("duplicate route name %s (also routes[%d])", quote(r.Name), j))
		case r.Name == DefaultRouteName && c.DefaultRoute != nil:
			v.checkAlt(key+".name", "default_route", fmt.Sprintf("%q is the name default_route's flows are logged under; pick another", DefaultRouteName))
		default:
			names[r.Name] = i
			v.check(key+".name", checkName(r.Name))
		}
		v.route(c, key, r)
	}
}

// defaultRoute checks default_route; its route is held to the rules of a
// route, less the name and match it does not have.
func (v *validator) defaultRoute(c *Config) {
	d := c.DefaultRoute
	switch {
	case d == nil:
	case d.Close && d.Route != nil:
		v.check("default_route", "Close and Route are exclusive: close resets the flows a route would treat")
	case d.Route != nil:
		if !reflect.DeepEqual(d.Route.Match, RouteMatch{}) {
			v.check("default_route.match", "default_route takes no match: it applies to exactly the flows no route matches")
		}
		v.route(c, "default_route", *d.Route)
	}
}

// route relates the keys of the route at key, less its name and match.
func (v *validator) route(c *Config, key string, r Route) {
	tlsKey, levelKey := key+".tls", key+".level"
	tlsOK := checkTLS(r.TLS) == ""
	levelOK := r.Level == nil || checkLevel(int64(*r.Level)) == ""
	if r.LevelOrDefault() >= 2 {
		v.check(key+".max_body", checkMaxBody(r.MaxBody))
		v.check(key+".on_oversized_response", checkOneOf(r.OnOversizedResponse, OnOversizedClose, OnOversizedForward))
	} else {
		if r.MaxBody != 0 {
			v.check(key+".max_body", "only meaningful with level 2 (bodies are not read below it)")
		}
		if r.OnOversizedResponse != "" {
			v.check(key+".on_oversized_response", "only meaningful with level 2 (bodies are not read below it)")
		}
		if r.ValidateArguments && levelOK {
			v.checkAlt(key+".validate_arguments", levelKey, "needs level 2: arguments are in the body, which is not read below it")
		}
	}
	level := r.LevelOrDefault()
	upKey := key + ".allow_upgrade"
	v.auditRoute(c, key, r, tlsOK && levelOK)
	v.tokensRoute(key, r, tlsOK && levelOK)
	v.toolsRoute(c, key, r, tlsOK && levelOK)
	v.traceRoute(key, r, tlsOK && levelOK)
	v.credentialsRoute(key, r, tlsOK && levelOK)

	// The cross checks need both sides valid: a message about a
	// combination is noise while one half is itself wrong.
	if tlsOK && levelOK {
		if r.TLS == TLSPassthrough && level >= 1 {
			v.checkAlt(levelKey, tlsKey, "passthrough cannot read HTTP headers (the stream stays encrypted); use level 0, or tls: terminate")
		}
		if r.StrictMCPHeaders && level < 1 {
			v.checkAlt(key+".strict_mcp_headers", levelKey, fmt.Sprintf("needs level 1: MCP headers are not read at level %d", level))
		}
		if r.RuleSet != "" && level < 1 && r.TLS != TLSPassthrough {
			v.checkAlt(key+".rule_set", levelKey, fmt.Sprintf("needs level 1: a level 0 %s route does not read requests (only passthrough routes apply connection-level rules at level 0)", r.TLS))
		}
		if len(r.AllowUpgrade) > 0 && level < 1 {
			v.checkAlt(upKey, levelKey, "only meaningful with level >= 1; level 0 forwards everything opaque")
		}
		if i := slices.Index(r.AllowUpgrade, UpgradeH2C); i >= 0 && level >= 1 {
			v.check(fmt.Sprintf("%s[%d]", upKey, i), "h2c is never allowed through a Level 1 route: after the switch, requests are HTTP/2 frames Level 1 cannot read")
		}
	}
	if tlsOK && r.Development && r.TLS != TLSPlaintext {
		v.checkAlt(key+".development", tlsKey, "development applies to tls: plaintext routes only")
	}
	if tlsOK && r.PlaintextUpstreamTrustedNetwork && r.TLS != TLSTerminate {
		v.checkAlt(key+".plaintext_upstream_trusted_network", tlsKey, "plaintext_upstream_trusted_network applies to tls: terminate routes only (it lets the decrypted stream go upstream in plaintext)")
	}
	if rules, ok := c.RuleSets[r.RuleSet]; ok && levelOK && r.LevelOrDefault() < 2 {
		for i, rule := range rules {
			if rule.Action == ActionRedact {
				v.checkAlt(key+".rule_set", levelKey, fmt.Sprintf("rule set %s has a redact rule (%s, rule_sets.%s[%d]), which needs level 2: bodies are not read below it",
					quote(r.RuleSet), quote(rule.Name), r.RuleSet, i))
				break
			}
		}
	}
	if _, ok := c.RuleSets[r.RuleSet]; r.RuleSet != "" && !ok {
		msg := fmt.Sprintf("unknown rule set %s: rule_sets defines none", quote(r.RuleSet))
		if names := c.ruleSetNames(); len(names) > 0 {
			for i, n := range names {
				names[i] = quote(n)
			}
			msg = fmt.Sprintf("unknown rule set %s (defined: %s)", quote(r.RuleSet), strings.Join(names, ", "))
		}
		v.check(key+".rule_set", msg)
	}
}

// ruleSetNames lists the rule sets in file order, then any RuleSetOrder
// misses (a config built in code), sorted.
func (c *Config) ruleSetNames() []string {
	var names []string
	for _, n := range c.RuleSetOrder {
		if _, ok := c.RuleSets[n]; ok && !slices.Contains(names, n) {
			names = append(names, n)
		}
	}
	var rest []string
	for n := range c.RuleSets {
		if !slices.Contains(names, n) {
			rest = append(rest, n)
		}
	}
	slices.Sort(rest)
	return append(names, rest...)
}

func (v *validator) ruleSets(c *Config) {
	names := c.ruleSetNames()
	if len(c.RuleSetOrder) != len(names) || !slices.Equal(c.RuleSetOrder, names[:len(c.RuleSetOrder)]) {
		// Only reachable from code: Parse keeps the two in step.
		v.check("rule_sets", "RuleSetOrder must name every rule set exactly once")
	}
	for _, name := range names {
		setKey := join("rule_sets", segment(name))
		v.check(setKey, checkName(name))
		first := map[string]int{}
		for i, r := range c.RuleSets[name] {
			key := fmt.Sprintf("%s[%d]", setKey, i)
			switch j, dup := first[r.Name]; {
			case r.Name == "":
				v.check(key+".name", "required: a name for the decision log, e.g. deny-admin-tools")
			case dup:
				v.check(key+".name", fmt.Sprintf("duplicate rule name %s (also %s[%d])", quote(r.Name), setKey, j))
			default:
				first[r.Name] = i
				v.check(key+".name", checkName(r.Name))
			}
			actionKey, rlKey := key+".action", key+".rate_limit"
			actionMsg := checkOneOf(r.Action, ActionAllow, ActionDeny, ActionRateLimit, ActionRedact)
			if r.Action == "" {
				actionMsg = "required: allow, deny, rate_limit or redact"
			}
			switch redactKey := key + ".redact"; {
			case r.Action == ActionRedact && r.Redact == nil:
				v.checkAlt(redactKey, actionKey, "required when action is redact: give paths and/or patterns (and optionally marker)")
			case actionMsg == "" && r.Action != ActionRedact && r.Redact != nil:
				v.checkAlt(redactKey, actionKey, fmt.Sprintf("applies to action: redact only, and this rule's action is %s", r.Action))
			case r.Redact != nil && len(r.Redact.Paths) == 0 && len(r.Redact.Patterns) == 0:
				v.check(redactKey, "give at least one of paths (JSON paths such as $.result.content[*].text) and patterns (regular expressions)")
			case r.Redact != nil && len(r.Redact.Marker) > 128:
				v.check(redactKey+".marker", "at most 128 bytes")
			}
			v.check(actionKey, actionMsg)
			switch {
			case r.Action == ActionRateLimit && r.RateLimit == nil:
				v.checkAlt(rlKey, actionKey, "required when action is rate_limit: give key, rate and burst")
			case actionMsg == "" && r.Action != ActionRateLimit && r.RateLimit != nil:
				v.checkAlt(rlKey, actionKey, fmt.Sprintf("applies to action: rate_limit only, and this rule's action is %s", r.Action))
			}
			if rl := r.RateLimit; rl != nil {
				if strings.TrimSpace(rl.Key) == "" {
					v.check(rlKey+".key", "required: a CEL expression naming the bucket, e.g. client.address")
				}
				if rl.Rate == 0 {
					v.check(rlKey+".rate", "required: tokens per second, greater than 0")
				} else {
					v.check(rlKey+".rate", checkRate(rl.Rate))
				}
				if rl.Burst == 0 {
					v.check(rlKey+".burst", "required: the bucket size (requests allowed at once), at least 1")
				} else {
					v.check(rlKey+".burst", checkCount(int64(rl.Burst)))
				}
			}
		}
	}
}

// The check functions return "" when the value is fine and the message
// otherwise. Parse calls the numeric ones while decoding, because a value
// that does not fit the Go field must be rejected before it is stored.

func between(v, lo, hi int64) string {
	if v < lo || v > hi {
		return fmt.Sprintf("must be between %d and %d, got %d", lo, hi, v)
	}
	return ""
}

func checkPort(v int64) string { return between(v, 1, math.MaxUint16) }

func checkPortRange(p PortRange) string {
	switch {
	case p.From == 0 || p.To == 0:
		return fmt.Sprintf("port %s: ports must be between 1 and 65535", p)
	case p.From > p.To:
		return fmt.Sprintf("range %s is backwards: the start must not exceed the end", p)
	}
	return ""
}

func checkMark(v int64) string {
	switch {
	case v == 0:
		// 0 is what every unmarked packet carries.
		return "must be non-zero"
	case v < 0 || v > math.MaxUint32:
		return fmt.Sprintf("must fit in 32 bits (1 to 0xffffffff), got %d", v)
	}
	return ""
}

func checkRouteTable(v int64) string {
	if msg := between(v, 1, math.MaxInt32); msg != "" {
		return msg
	}
	if v >= 253 && v <= 255 {
		return fmt.Sprintf("table %d is reserved by the kernel (253 default, 254 main, 255 local)", v)
	}
	return ""
}

func checkRulePriority(v int64) string {
	// 0, 32766 and 32767 hold the kernel's local, main and default rules.
	return between(v, 1, 32765)
}

func checkCount(v int64) string { return between(v, 1, math.MaxInt32) }

// checkQuota allows 0: a dns quota of 0 is derived from the pool size.
func checkQuota(v int64) string { return between(v, 0, math.MaxInt32) }

func checkPositive(d time.Duration) string {
	if d <= 0 {
		return fmt.Sprintf("must be greater than 0, got %s", d)
	}
	return ""
}

func checkNonNegative(d time.Duration) string {
	if d < 0 {
		return fmt.Sprintf("must not be negative, got %s", d)
	}
	return ""
}

func checkOriginalDst(s string) string {
	if s != OriginalDstLocalAddress && s != OriginalDstSOOriginalDst {
		return fmt.Sprintf("unknown value %s (valid: %s, %s)", quote(s), OriginalDstLocalAddress, OriginalDstSOOriginalDst)
	}
	return ""
}

func checkAdminListen(s string) string {
	if s == Off {
		return ""
	}
	if msg := checkControl(s); msg != "" {
		return msg
	}
	_, port, err := net.SplitHostPort(s)
	if err != nil {
		return fmt.Sprintf(`must be "off" or host:port, got %s`, quote(s))
	}
	if p, err := strconv.ParseUint(port, 10, 16); err != nil || p == 0 {
		return fmt.Sprintf("port %s must be a number between 1 and 65535", quote(port))
	}
	return ""
}

func checkLogLevel(s string) string {
	if !slices.Contains(LogLevels, s) {
		return fmt.Sprintf("unknown level %s (valid: %s)", quote(s), strings.Join(LogLevels, ", "))
	}
	return ""
}

func checkLogFlows(s string) string {
	switch {
	case s == "":
		return `must be "stdout", "off" or a file path`
	}
	return checkControl(s)
}

// logRotation checks the flow log file's rotation keys, which only a file has.
func (v *validator) logRotation(l Log) {
	if !l.FlowsFile() {
		notFile := fmt.Sprintf("only meaningful when log.flows is a file, not %s", quote(l.Flows))
		if l.FlowsMaxSize != 0 {
			v.check("log.flows_max_size", notFile)
		}
		if l.FlowsMaxFiles != 0 {
			v.check("log.flows_max_files", notFile)
		}
		return
	}
	v.check("log.flows_max_size", checkFlowsMaxSize(l.FlowsMaxSize))
	switch {
	case l.FlowsMaxSize > 0:
		v.check("log.flows_max_files", checkFlowsMaxFiles(int64(l.FlowsMaxFiles)))
	case l.FlowsMaxFiles != 0:
		v.checkAlt("log.flows_max_files", "log.flows_max_size",
			"only meaningful with log.flows_max_size (0 turns the built-in rotation off)")
	}
}

// Bounds of the flow log rotation: a limit under 1 MiB would rotate several times a second under
// load; more than 1000 files is no longer a bound anyone reads.
const (
	minFlowsMaxSize  = 1 << 20
	maxFlowsMaxSize  = 1 << 40
	maxFlowsMaxFiles = 1000
)

func checkFlowsMaxSize(n int64) string {
	if n != 0 && (n < minFlowsMaxSize || n > maxFlowsMaxSize) {
		return fmt.Sprintf("must be 0 (no built-in rotation) or between 1MiB (%d) and 1TiB, got %d", int64(minFlowsMaxSize), n)
	}
	return ""
}

func checkFlowsMaxFiles(n int64) string { return between(n, 1, maxFlowsMaxFiles) }

// checkControl rejects control characters (line breaks and tabs included)
// where they can only be a mistake: file paths and addresses. They would
// also break a log line, and yaml.v3 cannot always write them back out.
func checkControl(s string) string {
	for _, r := range s {
		if r == 0 {
			return "contains a NUL byte"
		}
		if unicode.IsControl(r) {
			return fmt.Sprintf("contains the control character %U", r)
		}
	}
	return ""
}

func checkOneOf(s string, valid ...string) string {
	if s == "" {
		return "must not be empty (valid: " + strings.Join(valid, ", ") + ")"
	}
	if !slices.Contains(valid, s) {
		return fmt.Sprintf("unknown value %s (valid: %s)", quote(s), strings.Join(valid, ", "))
	}
	return ""
}

func checkTLS(s string) string {
	if s == "" {
		return "required: passthrough, terminate or plaintext"
	}
	return checkOneOf(s, TLSPassthrough, TLSTerminate, TLSPlaintext)
}

func checkLevel(v int64) string {
	switch v {
	case 0, 1, 2:
		return ""
	}
	return fmt.Sprintf("must be 0 (opaque), 1 (HTTP headers) or 2 (JSON-RPC bodies), got %d", v)
}

func checkMaxBody(v int64) string { return between(v, 1024, 64<<20) }

// checkName keeps route and rule names safe to print in logs and metric
// labels as they are.
func checkName(s string) string {
	for _, r := range s {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '_' || r == '.' || r == '-') {
			return fmt.Sprintf("invalid name %s: use letters, digits, '_', '.' and '-'", quote(s))
		}
	}
	if s == "" {
		return "must not be empty"
	}
	return ""
}

const maxReason = 200

// checkReason keeps a reason to one printable line, since it becomes a line
// of an HTTP response body and of the decision log.
func checkReason(s string) string {
	if !utf8.ValidString(s) {
		return "is not valid UTF-8"
	}
	for _, r := range s {
		if !unicode.IsPrint(r) {
			return fmt.Sprintf("contains the non-printing character %U; write one line of plain text", r)
		}
	}
	if n := utf8.RuneCountInString(s); n > maxReason {
		return fmt.Sprintf("is %d characters long; keep it to %d", n, maxReason)
	}
	return ""
}

func checkRate(r float64) string {
	if math.IsNaN(r) || math.IsInf(r, 0) || r <= 0 {
		return fmt.Sprintf("must be a positive number of tokens per second, got %v", r)
	}
	return ""
}

func checkMaxKeys(v int64) string { return between(v, 1, maxRateLimitKeys) }

// checkUpgrade accepts a lower-case protocol name as the Upgrade header
// spells it: an RFC 9110 token, without the "/version" a header may add.
func checkUpgrade(s string) string {
	if s == "" {
		return "must not be empty"
	}
	if name, _, ok := strings.Cut(s, "/"); ok && name != "" {
		return fmt.Sprintf("%s: give the protocol name only, e.g. %s, without a /version", quote(s), quote(name))
	}
	for _, c := range s {
		switch {
		case c >= 'A' && c <= 'Z':
			return fmt.Sprintf("%s must be lower case", quote(s))
		case c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || strings.ContainsRune("!#$%&'*+-.^_`|~", c):
		default:
			return fmt.Sprintf("%s is not a protocol name: use letters, digits and !#$%%&'*+-.^_`|~ (an RFC 9110 token)", quote(s))
		}
	}
	return ""
}

func checkMaxClientHello(v int64) string { return between(v, minClientHello, maxClientHello) }

func checkMaxHeaderBytes(v int64) string { return between(v, minHeaderBytes, maxHeaderBytes) }

func checkLeafValidity(d time.Duration) string {
	if d < minLeafValidity || d > maxLeafValidity {
		return fmt.Sprintf("must be between 1h and 825 days (19800h), got %s", d)
	}
	return ""
}

func checkPath(s string) string {
	if s == "" {
		return "must not be empty"
	}
	return checkControl(s)
}

func checkCgroup(s string) string {
	if msg := checkPath(s); msg != "" {
		return msg
	}
	if !strings.HasPrefix(s, "/") {
		return fmt.Sprintf("%s is relative; give the absolute path of a cgroup v2 directory, e.g. /sys/fs/cgroup/mcpintercept.slice", quote(s))
	}
	return ""
}

// checkSNI accepts what a client can put in server_name (RFC 6066: a DNS
// host name, no trailing dot, never an address) plus a leading "*." label.
func checkSNI(s string) string {
	if s == "" {
		return "must not be empty"
	}
	if _, err := netip.ParseAddr(strings.Trim(s, "[]")); err == nil {
		return "SNI carries names, not addresses; match on destinations instead"
	}
	if _, err := netip.ParsePrefix(s); err == nil {
		return "SNI carries names, not addresses; match on destinations instead"
	}
	if len(s) > 253 {
		return fmt.Sprintf("is %d characters long; a DNS name has at most 253", len(s))
	}
	labels := strings.Split(s, ".")
	for i, l := range labels {
		switch {
		case l == "*" && i == 0 && len(labels) > 1:
			continue
		case l == "*" && i == 0:
			return `a wildcard needs a suffix, e.g. "*.example.com"; leave sni out to match every name`
		case strings.Contains(l, "*"):
			return fmt.Sprintf(`%s: a wildcard must be the whole first label, as in "*.example.com"`, quote(s))
		case l == "" && i == len(labels)-1:
			return fmt.Sprintf("%s ends with a dot; remove it (SNI names carry no trailing dot)", quote(s))
		case l == "":
			return fmt.Sprintf("%s has an empty label", quote(s))
		case len(l) > 63:
			return fmt.Sprintf("label %s is longer than 63 characters", quote(l))
		case l[0] == '-' || l[len(l)-1] == '-':
			return fmt.Sprintf("label %s starts or ends with '-'", quote(l))
		}
		for _, c := range l {
			if c >= 'A' && c <= 'Z' {
				return fmt.Sprintf("%s must be lower case", quote(s))
			}
			if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-') {
				what := fmt.Sprintf("%q", c)
				if c >= utf8.RuneSelf {
					// Spelled out: U+212A prints exactly like "K".
					what = fmt.Sprintf("%U %s", c, what)
				}
				return fmt.Sprintf("label %s contains %s; names use letters, digits and '-'", quote(l), what)
			}
		}
	}
	return ""
}

// quote keeps messages one line and short whatever the file contained.
func quote(s string) string {
	const max = 40
	if r := []rune(s); len(r) > max {
		s = string(r[:max]) + "…"
	}
	return strconv.Quote(s)
}
