package config

import (
	"errors"
	"flag"
	"fmt"
	"io/fs"
	"math"
	"net/netip"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"
)

var update = flag.Bool("update", false, "rewrite testdata/golden/ from the current output")

// minimal is the part every valid test file needs; cases append to it.
const minimal = "intercept:\n  destinations: [10.0.0.0/8]\n  ports: [443]\n"

// withRoutes and withRuleSets open their section on line 4; the first entry
// a case appends is on line 5.
const (
	withRoutes   = minimal + "routes:\n"
	withRuleSets = minimal + "rule_sets:\n"
)

// aliasBomb is a small file whose aliases expand past maxEntries: routes
// that all match the same 1000 ports, the list anchored on line 5. The 200
// routes and 100 lists of ports reach the limit at routes[99].
func aliasBomb() string {
	var b strings.Builder
	b.WriteString(withRoutes + "  - {name: r0, tls: terminate, match: {ports: &ports [")
	for i := range 1000 {
		fmt.Fprintf(&b, "%d, ", i+1)
	}
	b.WriteString("]}}\n")
	for i := 1; i < 200; i++ {
		fmt.Fprintf(&b, "  - {name: r%d, tls: terminate, match: {ports: *ports}}\n", i)
	}
	return b.String()
}

func mustParse(t *testing.T, src string, o Overrides) *Config {
	t.Helper()
	c, err := Parse("test.yaml", []byte(src), o)
	if err != nil {
		t.Fatalf("Parse: %v\ninput:\n%s", err, src)
	}
	return c
}

func TestParseValid(t *testing.T) {
	addrs := func(s ...string) []netip.Addr {
		var out []netip.Addr
		for _, a := range s {
			out = append(out, netip.MustParseAddr(a))
		}
		return out
	}
	prefixes := func(s ...string) []netip.Prefix {
		var out []netip.Prefix
		for _, p := range s {
			out = append(out, netip.MustParsePrefix(p))
		}
		return out
	}
	tests := []struct {
		name  string
		src   string
		o     Overrides
		check func(t *testing.T, c *Config)
	}{
		{
			name: "minimal gets every default",
			src:  minimal,
			check: func(t *testing.T, c *Config) {
				want := Default(NftablesTProxy)
				want.Path = "test.yaml"
				want.Intercept.Destinations = prefixes("10.0.0.0/8")
				want.Intercept.Ports = []PortRange{{443, 443}}
				if !reflect.DeepEqual(c, want) {
					t.Errorf("got  %+v\nwant %+v", c, want)
				}
			},
		},
		{
			name: "nftables-tproxy listens on loopback",
			src:  minimal,
			check: func(t *testing.T, c *Config) {
				if got, want := c.Listen.Addresses, addrs("127.0.0.1", "::1"); !reflect.DeepEqual(got, want) {
					t.Errorf("addresses = %v, want %v", got, want)
				}
			},
		},
		{
			name: "iptables-redirect listens on the wildcard",
			src:  "mechanism: iptables-redirect\n" + minimal,
			check: func(t *testing.T, c *Config) {
				if got, want := c.Listen.Addresses, addrs("0.0.0.0", "::"); !reflect.DeepEqual(got, want) {
					t.Errorf("addresses = %v, want %v", got, want)
				}
			},
		},
		{
			name: "override replaces the mechanism before address defaults",
			src:  "mechanism: nftables-tproxy\n" + minimal,
			o:    Overrides{Mechanism: IptablesRedirect},
			check: func(t *testing.T, c *Config) {
				if c.Mechanism != IptablesRedirect {
					t.Errorf("mechanism = %q", c.Mechanism)
				}
				if got, want := c.Listen.Addresses, addrs("0.0.0.0", "::"); !reflect.DeepEqual(got, want) {
					t.Errorf("addresses = %v, want %v", got, want)
				}
			},
		},
		{
			name: "override wins over a bad mechanism in the file",
			src:  "mechanism: nonsense\n" + minimal,
			o:    Overrides{Mechanism: NftablesTProxy},
			check: func(t *testing.T, c *Config) {
				if c.Mechanism != NftablesTProxy {
					t.Errorf("mechanism = %q", c.Mechanism)
				}
			},
		},
		{
			name: "explicit addresses are kept",
			src:  "listen:\n  addresses: [10.1.1.1]\n" + minimal,
			check: func(t *testing.T, c *Config) {
				if got, want := c.Listen.Addresses, addrs("10.1.1.1"); !reflect.DeepEqual(got, want) {
					t.Errorf("addresses = %v, want %v", got, want)
				}
			},
		},
		{
			name: "external with addresses and so-original-dst",
			src:  "mechanism: external\nlisten: {addresses: [\"::1\"]}\nexternal: {original_dst: so-original-dst}\n" + minimal,
			check: func(t *testing.T, c *Config) {
				if c.External.OriginalDst != OriginalDstSOOriginalDst {
					t.Errorf("original_dst = %q", c.External.OriginalDst)
				}
			},
		},
		{
			name: "external.original_dst defaults to local-address",
			src:  "mechanism: external\nlisten: {addresses: [127.0.0.1]}\n" + minimal,
			check: func(t *testing.T, c *Config) {
				if c.External.OriginalDst != OriginalDstLocalAddress {
					t.Errorf("original_dst = %q", c.External.OriginalDst)
				}
			},
		},
		{
			name: "marks in hex and decimal",
			src:  minimal + "steering:\n  mark: 0x10\n  bypass_mark: 32\n",
			check: func(t *testing.T, c *Config) {
				if c.Steering.Mark != 0x10 || c.Steering.BypassMark != 0x20 {
					t.Errorf("marks = %#x, %#x", c.Steering.Mark, c.Steering.BypassMark)
				}
			},
		},
		{
			name: "largest 32-bit mark",
			src:  minimal + "steering:\n  mark: 0x80000000\n  bypass_mark: 0x1\n",
			check: func(t *testing.T, c *Config) {
				if c.Steering.Mark != 0x80000000 {
					t.Errorf("mark = %#x", c.Steering.Mark)
				}
			},
		},
		{
			name: "destinations: bare addresses become hosts, host bits are masked",
			src:  "intercept:\n  destinations: [10.1.2.3, \"2001:db8::1\", 10.1.2.3/16, \"fd00::1/8\"]\n  ports: [80]\n",
			check: func(t *testing.T, c *Config) {
				want := prefixes("10.1.2.3/32", "2001:db8::1/128", "10.1.0.0/16", "fd00::/8")
				if !reflect.DeepEqual(c.Intercept.Destinations, want) {
					t.Errorf("destinations = %v, want %v", c.Intercept.Destinations, want)
				}
			},
		},
		{
			name: "port forms: integer, string, range, spaced range",
			src:  "intercept:\n  destinations: [10.0.0.0/8]\n  ports: [80, \"443\", \"3000-3010\", \" 5000 - 5001 \", 65535]\n",
			check: func(t *testing.T, c *Config) {
				want := []PortRange{{80, 80}, {443, 443}, {3000, 3010}, {5000, 5001}, {65535, 65535}}
				if !reflect.DeepEqual(c.Intercept.Ports, want) {
					t.Errorf("ports = %v, want %v", c.Intercept.Ports, want)
				}
			},
		},
		{
			name: "local: false survives defaulting",
			src:  "intercept:\n  destinations: [10.0.0.0/8]\n  ports: [80]\n  local: false\n",
			check: func(t *testing.T, c *Config) {
				if c.Intercept.LocalEnabled() {
					t.Error("LocalEnabled() = true, want false")
				}
			},
		},
		{
			name: "local defaults to true",
			src:  minimal,
			check: func(t *testing.T, c *Config) {
				if c.Intercept.Local == nil || !c.Intercept.LocalEnabled() {
					t.Error("local not defaulted to true")
				}
			},
		},
		{
			name: "durations, drain_timeout 0 as a bare integer",
			src:  minimal + "limits:\n  idle_timeout: 1h\n  connect_timeout: 250ms\n  drain_timeout: 0\n",
			check: func(t *testing.T, c *Config) {
				l := c.Limits
				if l.IdleTimeout.Duration != time.Hour || l.ConnectTimeout.Duration != 250*time.Millisecond || l.DrainTimeout.Duration != 0 {
					t.Errorf("limits = %+v", l)
				}
			},
		},
		{
			name: "lowering max_flows alone clamps the per-client default",
			src:  minimal + "limits:\n  max_flows: 100\n",
			check: func(t *testing.T, c *Config) {
				if c.Limits.MaxFlowsPerClient != 100 {
					t.Errorf("max_flows_per_client = %d, want 100", c.Limits.MaxFlowsPerClient)
				}
			},
		},
		{
			name: "empty values and sections mean defaults",
			src:  minimal + "listen:\n  port:\nlog:\nadmin: ~\n",
			check: func(t *testing.T, c *Config) {
				if c.Listen.Port != DefaultPort || c.Log.Level != "info" || c.Admin.Listen != DefaultAdminListen {
					t.Errorf("defaults not applied: %+v", c)
				}
			},
		},
		{
			name: "admin and flow log off",
			src:  minimal + "admin: {listen: \"off\"}\nlog: {flows: off, level: error}\n",
			check: func(t *testing.T, c *Config) {
				if c.Admin.Listen != Off || c.Log.Flows != Off || c.Log.Level != "error" {
					t.Errorf("admin/log = %+v %+v", c.Admin, c.Log)
				}
			},
		},
		{
			name: "a flow log file rotates by default; stdout does not",
			src:  minimal + "log: {flows: /var/log/mcpintercept/flows.jsonl}\n",
			check: func(t *testing.T, c *Config) {
				if c.Log.FlowsMaxSize != DefaultFlowsMaxSize || c.Log.FlowsMaxFiles != DefaultFlowsMaxFiles {
					t.Errorf("rotation = %d × %d, want the defaults", c.Log.FlowsMaxSize, c.Log.FlowsMaxFiles)
				}
				if d := Default(NftablesTProxy); d.Log.FlowsMaxSize != 0 || d.Log.FlowsMaxFiles != 0 {
					t.Errorf("stdout has rotation %d × %d", d.Log.FlowsMaxSize, d.Log.FlowsMaxFiles)
				}
			},
		},
		{
			name: "flow log sizes: bytes or binary units",
			src:  minimal + "log: {flows: f.jsonl, flows_max_size: \" 2 GiB \", flows_max_files: 1000}\n",
			check: func(t *testing.T, c *Config) {
				if c.Log.FlowsMaxSize != 2<<30 || c.Log.FlowsMaxFiles != 1000 {
					t.Errorf("rotation = %d × %d", c.Log.FlowsMaxSize, c.Log.FlowsMaxFiles)
				}
			},
		},
		{
			name: "flows_max_size 0 leaves rotation to logrotate",
			src:  minimal + "log: {flows: f.jsonl, flows_max_size: 0}\n",
			check: func(t *testing.T, c *Config) {
				if c.Log.FlowsMaxSize != 0 || c.Log.FlowsMaxFiles != 0 {
					t.Errorf("rotation = %d × %d", c.Log.FlowsMaxSize, c.Log.FlowsMaxFiles)
				}
				roundTrip(t, c) // the explicit 0 is written out, not lost to the default
			},
		},
		{
			name: "flow log size in plain bytes",
			src:  minimal + "log: {flows: f.jsonl, flows_max_size: 1048576}\n",
			check: func(t *testing.T, c *Config) {
				if c.Log.FlowsMaxSize != 1<<20 || c.Log.FlowsMaxFiles != DefaultFlowsMaxFiles {
					t.Errorf("rotation = %d × %d", c.Log.FlowsMaxSize, c.Log.FlowsMaxFiles)
				}
			},
		},
		{
			name: "anchors and aliases are followed",
			src:  "intercept:\n  destinations: &nets [10.0.0.0/8]\n  ports: [&p 8080]\nlisten: {port: *p}\n",
			check: func(t *testing.T, c *Config) {
				if c.Listen.Port != 8080 {
					t.Errorf("port = %d", c.Listen.Port)
				}
			},
		},
		{
			name: "flow style on one line",
			src:  "{intercept: {destinations: [10.0.0.0/8], ports: [80]}, listen: {port: 1}}",
			check: func(t *testing.T, c *Config) {
				if c.Listen.Port != 1 {
					t.Errorf("port = %d", c.Listen.Port)
				}
			},
		},
		{
			name: "ebpf needs neither destinations nor ports, and listens on loopback",
			src:  "mechanism: ebpf\nebpf: {cgroup: /sys/fs/cgroup/dev.slice}\n",
			check: func(t *testing.T, c *Config) {
				if c.Intercept.Destinations != nil || c.Intercept.Ports != nil {
					t.Errorf("intercept = %+v", c.Intercept)
				}
				if got, want := c.Listen.Addresses, addrs("127.0.0.1", "::1"); !reflect.DeepEqual(got, want) {
					t.Errorf("addresses = %v, want %v", got, want)
				}
				if c.EBPF.Cgroup != "/sys/fs/cgroup/dev.slice" {
					t.Errorf("cgroup = %q", c.EBPF.Cgroup)
				}
			},
		},
		{
			name: "ebpf by override, with empty intercept lists",
			src:  "intercept: {destinations: [], ports: []}\nebpf: {cgroup: /sys/fs/cgroup/x}\n",
			o:    Overrides{Mechanism: EBPF},
			check: func(t *testing.T, c *Config) {
				if c.Mechanism != EBPF || len(c.Intercept.Destinations) != 0 {
					t.Errorf("config = %+v", c)
				}
			},
		},
		{
			name: "TLS, HTTP and CA settings",
			src: minimal + "ca: {dir: /srv/ca}\nupstream_tls: {extra_cas: [/a.pem, /b.pem], handshake_timeout: 1s}\n" +
				"tls: {peek_timeout: 250ms, max_client_hello: 512, leaf_cache: 1, leaf_validity: 19800h}\n" +
				"http: {max_header_bytes: 1048576, header_timeout: 1m}\n",
			check: func(t *testing.T, c *Config) {
				want := Default(NftablesTProxy)
				want.CA.Dir = "/srv/ca"
				want.Upstream = UpstreamTLS{ExtraCAs: []string{"/a.pem", "/b.pem"}, HandshakeTimeout: Duration{time.Second}}
				want.TLS = TLSConfig{PeekTimeout: Duration{250 * time.Millisecond}, MaxClientHello: 512, LeafCache: 1, LeafValidity: Duration{825 * 24 * time.Hour}}
				want.HTTP = HTTPConfig{MaxHeaderBytes: 1 << 20, HeaderTimeout: Duration{time.Minute}}
				if c.CA != want.CA || !reflect.DeepEqual(c.Upstream, want.Upstream) || c.TLS != want.TLS || c.HTTP != want.HTTP {
					t.Errorf("got  %+v %+v %+v %+v\nwant %+v %+v %+v %+v", c.CA, c.Upstream, c.TLS, c.HTTP, want.CA, want.Upstream, want.TLS, want.HTTP)
				}
			},
		},
		{
			name: "new sections left empty take their defaults",
			src:  minimal + "ca:\nupstream_tls: {}\ntls: ~\nhttp:\n  header_timeout:\nroutes:\nrule_sets:\nebpf:\n",
			check: func(t *testing.T, c *Config) {
				want := Default(NftablesTProxy)
				if c.CA != want.CA || c.TLS != want.TLS || c.HTTP != want.HTTP || c.Upstream.HandshakeTimeout != want.Upstream.HandshakeTimeout ||
					c.Routes != nil || c.RuleSets != nil || c.RuleSetOrder != nil || c.EBPF.Cgroup != "" {
					t.Errorf("defaults not applied: %+v", c)
				}
			},
		},
		{
			name: "route defaults depend on tls",
			src: withRoutes +
				"  - {name: t, tls: terminate}\n" +
				"  - {name: p, tls: passthrough}\n" +
				"  - name: x\n    tls: plaintext\n" +
				"  - {name: t0, tls: terminate, level: 0, on_mismatch: close}\n",
			check: func(t *testing.T, c *Config) {
				type got struct {
					name          string
					level         int
					mismatch      string
					line, column  int
					levelFromFile bool
				}
				// Level 1 closes on a mismatch: passing the bytes on would
				// skip the inspection the route asks for.
				want := []got{{"t", 1, "close", 5, 5, false}, {"p", 0, "passthrough", 6, 5, false}, {"x", 1, "close", 7, 5, false}, {"t0", 0, "close", 9, 5, true}}
				if len(c.Routes) != len(want) {
					t.Fatalf("routes = %+v", c.Routes)
				}
				for i, r := range c.Routes {
					w := want[i]
					if r.Name != w.name || r.Level == nil || *r.Level != w.level || r.LevelOrDefault() != w.level || r.OnMismatch != w.mismatch || r.Line != w.line || r.Column != w.column ||
						r.OnRuleError != OnRuleErrorClosed || r.AllowUpgrade != nil {
						t.Errorf("routes[%d] = %+v (level %v), want %+v", i, r, r.LevelOrDefault(), w)
					}
				}
			},
		},
		{
			name: "match lists are optional, empty ones are nil, SNI is lower-cased",
			src: withRoutes + "  - name: a\n    tls: terminate\n    match:\n      destinations: []\n      clients: [10.1.2.3, 10.0.0.0/8]\n" +
				"      sni: [API.Example.COM, \"*.Mcp.Example\", xn--bcher-kva.example, a-1.b2]\n" +
				"  - {name: b, tls: passthrough}\n",
			check: func(t *testing.T, c *Config) {
				m := c.Routes[0].Match
				if m.Destinations != nil || m.Ports != nil || !reflect.DeepEqual(m.Clients, prefixes("10.1.2.3/32", "10.0.0.0/8")) {
					t.Errorf("match = %+v", m)
				}
				if want := []string{"api.example.com", "*.mcp.example", "xn--bcher-kva.example", "a-1.b2"}; !reflect.DeepEqual(m.SNI, want) {
					t.Errorf("sni = %q, want %q", m.SNI, want)
				}
				if !reflect.DeepEqual(c.Routes[1].Match, RouteMatch{}) {
					t.Errorf("absent match = %+v", c.Routes[1].Match)
				}
			},
		},
		{
			name: "route options on the routes they apply to",
			src: withRoutes +
				"  - {name: t, tls: terminate, plaintext_upstream_trusted_network: true, strict_mcp_headers: true, rule_set: s}\n" +
				"  - {name: p, tls: passthrough, rule_set: s, development: false}\n" +
				"  - {name: x, tls: plaintext, development: true, level: 1, strict_mcp_headers: true, rule_set: s}\n" +
				"rule_sets: {s: []}\n",
			check: func(t *testing.T, c *Config) {
				r := c.Routes
				if !r[0].PlaintextUpstreamTrustedNetwork || !r[0].StrictMCPHeaders || r[0].RuleSet != "s" || r[1].RuleSet != "s" || !r[2].Development || !r[2].StrictMCPHeaders {
					t.Errorf("routes = %+v", r)
				}
			},
		},
		{
			name: "route names may repeat rule and rule set names; rule names repeat across sets; unused sets are fine",
			src: withRoutes + "  - {name: a, tls: terminate, rule_set: a}\nrule_sets:\n" +
				"  a: [{name: a, action: allow}]\n  b: [{name: a, action: deny}]\n  unused:\n",
			check: func(t *testing.T, c *Config) {
				if len(c.RuleSets) != 3 || c.RuleSets["unused"] != nil {
					t.Errorf("rule sets = %+v", c.RuleSets)
				}
			},
		},
		{
			name: "rule sets keep file order",
			src:  withRuleSets + "  zeta: []\n  alpha: [{name: r, action: allow}]\n  mid:\n  \"42\": []\n",
			check: func(t *testing.T, c *Config) {
				if want := []string{"zeta", "alpha", "mid", "42"}; !reflect.DeepEqual(c.RuleSetOrder, want) {
					t.Errorf("order = %q, want %q", c.RuleSetOrder, want)
				}
			},
		},
		{
			name: "rules: fields, positions, rate forms",
			src: withRuleSets + "  s:\n" +
				"    - name: d\n      when: mcp.method == \"tools/call\"\n      action: deny\n      reason: " + strings.Repeat("é", 200) + "\n" + // 6-9
				"    - {name: i, action: rate_limit, rate_limit: {key: client.address, rate: 10, burst: 1}}\n" + // 10
				"    - {name: f, action: rate_limit, rate_limit: {key: k, rate: 0.25, burst: 0x10}}\n" +
				"    - {name: h, action: rate_limit, rate_limit: {key: k, rate: 0x10, burst: 2147483647}}\n" +
				"    - {name: e, action: rate_limit, rate_limit: {key: k, rate: 1e3, burst: 1}}\n" +
				"    - {name: a, action: allow, when: true}\n", // 14
			check: func(t *testing.T, c *Config) {
				rs := c.RuleSets["s"]
				if len(rs) != 6 {
					t.Fatalf("rules = %+v", rs)
				}
				d := rs[0]
				if d.When != `mcp.method == "tools/call"` || d.Action != ActionDeny || len([]rune(d.Reason)) != 200 || d.RateLimit != nil ||
					d.Line != 6 || d.Column != 7 || d.WhenPos != (Pos{"test.yaml", 7, 13}) || d.KeyPos != (Pos{}) {
					t.Errorf("rule d = %+v", d)
				}
				if rl := rs[1].RateLimit; rl == nil || *rl != (RateLimit{Key: "client.address", Rate: 10, Burst: 1, MaxKeys: DefaultRateLimitKeys}) || rs[1].KeyPos != (Pos{"test.yaml", 10, 55}) {
					t.Errorf("rule i = %+v %+v", rs[1], rl)
				}
				for i, want := range []RateLimit{{"k", 0.25, 16, DefaultRateLimitKeys}, {"k", 16, 2147483647, DefaultRateLimitKeys}, {"k", 1000, 1, DefaultRateLimitKeys}} {
					if rl := rs[i+2].RateLimit; rl == nil || *rl != want {
						t.Errorf("rule %s rate_limit = %+v, want %+v", rs[i+2].Name, rl, want)
					}
				}
				if rs[5].When != "true" {
					t.Errorf("when: true read as %q", rs[5].When)
				}
			},
		},
		{
			name: "allow_upgrade is lower-cased and kept; on_rule_error open is kept",
			src: withRoutes +
				"  - {name: t, tls: terminate, allow_upgrade: [WebSocket, connect, \"x-Proto.1~\"], on_rule_error: open}\n" +
				"  - {name: x, tls: plaintext, allow_upgrade: [], on_rule_error: closed, on_mismatch: passthrough}\n",
			check: func(t *testing.T, c *Config) {
				if got, want := c.Routes[0].AllowUpgrade, []string{"websocket", UpgradeConnect, "x-proto.1~"}; !reflect.DeepEqual(got, want) {
					t.Errorf("allow_upgrade = %q, want %q", got, want)
				}
				if c.Routes[0].OnRuleError != OnRuleErrorOpen || c.Routes[0].OnMismatch != OnMismatchClose {
					t.Errorf("routes[0] = %+v", c.Routes[0])
				}
				r := c.Routes[1]
				if r.AllowUpgrade != nil || r.OnRuleError != OnRuleErrorClosed || r.OnMismatch != OnMismatchPassthrough {
					t.Errorf("routes[1] = %+v", r)
				}
				roundTrip(t, c)
			},
		},
		{
			name: "default_route absent is nil: opaque",
			src:  minimal,
			check: func(t *testing.T, c *Config) {
				if c.DefaultRoute != nil || !c.DefaultRoute.Opaque() {
					t.Errorf("default_route = %+v", c.DefaultRoute)
				}
			},
		},
		{
			name: "default_route empty value is the default",
			src:  minimal + "default_route:\n",
			check: func(t *testing.T, c *Config) {
				if c.DefaultRoute != nil {
					t.Errorf("default_route = %+v", c.DefaultRoute)
				}
			},
		},
		{
			name: "default_route: close",
			src:  minimal + "default_route: close\n",
			check: func(t *testing.T, c *Config) {
				if !reflect.DeepEqual(c.DefaultRoute, &DefaultRoute{Close: true}) || c.DefaultRoute.Opaque() {
					t.Errorf("default_route = %+v", c.DefaultRoute)
				}
				roundTrip(t, c)
			},
		},
		{
			name: "default_route: opaque",
			src:  minimal + "default_route: opaque\n",
			check: func(t *testing.T, c *Config) {
				if !reflect.DeepEqual(c.DefaultRoute, &DefaultRoute{}) || !c.DefaultRoute.Opaque() {
					t.Errorf("default_route = %+v", c.DefaultRoute)
				}
				roundTrip(t, c)
			},
		},
		{
			name: "default_route mapping gets a route's defaults, the name default and its position",
			src:  minimal + "default_route:\n  tls: terminate\n  rule_set: s\nrule_sets: {s: []}\n",
			check: func(t *testing.T, c *Config) {
				one := 1
				want := &DefaultRoute{Route: &Route{Name: DefaultRouteName, TLS: TLSTerminate, Level: &one, OnMismatch: OnMismatchClose,
					OnRuleError: OnRuleErrorClosed, RuleSet: "s", TokenAudience: On, TracePropagation: TraceRecord, Line: 5, Column: 3}}
				if !reflect.DeepEqual(c.DefaultRoute, want) || c.DefaultRoute.Opaque() {
					t.Errorf("default_route = %+v\nwant %+v", c.DefaultRoute.Route, want.Route)
				}
				roundTrip(t, c)
			},
		},
		{
			name: "default_route mapping keeps explicit values",
			src: minimal + "default_route: {tls: passthrough, on_mismatch: close, on_rule_error: open, rule_set: s}\n" +
				"routes: [{name: r, tls: plaintext, level: 0}]\nrule_sets: {s: []}\n",
			check: func(t *testing.T, c *Config) {
				r := c.DefaultRoute.Route
				if r.TLS != TLSPassthrough || *r.Level != 0 || r.OnMismatch != OnMismatchClose || r.OnRuleError != OnRuleErrorOpen || r.Name != "default" {
					t.Errorf("default_route = %+v", r)
				}
				if r := c.Routes[0]; r.OnMismatch != OnMismatchPassthrough {
					t.Errorf("level 0 route on_mismatch = %q", r.OnMismatch)
				}
				roundTrip(t, c)
			},
		},
		{
			name: "body_timeout and max_keys defaults",
			src:  withRuleSets + "  s: [{name: r, action: rate_limit, rate_limit: {key: k, rate: 1, burst: 1}}, {name: d, action: deny}]\n",
			check: func(t *testing.T, c *Config) {
				if c.Limits.BodyTimeout.Duration != DefaultBodyTimeout || DefaultBodyTimeout != time.Minute {
					t.Errorf("body_timeout = %v", c.Limits.BodyTimeout)
				}
				if rl := c.RuleSets["s"][0].RateLimit; rl.MaxKeys != DefaultRateLimitKeys || DefaultRateLimitKeys != 10000 {
					t.Errorf("max_keys = %d", rl.MaxKeys)
				}
				if c.RuleSets["s"][1].RateLimit != nil {
					t.Errorf("deny rule got a rate_limit")
				}
			},
		},
		{
			name: "body_timeout and max_keys explicit, per rule, quoted rule set names too",
			src: minimal + "limits: {body_timeout: 1500ms}\nrule_sets:\n  x.y: [{name: r, action: rate_limit, rate_limit: {key: k, rate: 1, burst: 1}}]\n  s:\n" +
				"    - {name: a, action: rate_limit, rate_limit: {key: k, rate: 1, burst: 1, max_keys: 1}}\n" +
				"    - {name: b, action: rate_limit, rate_limit: {key: k, rate: 1, burst: 1, max_keys: 1000000}}\n" +
				"    - {name: c, action: rate_limit, rate_limit: {key: k, rate: 1, burst: 1, max_keys: }}\n",
			check: func(t *testing.T, c *Config) {
				if c.Limits.BodyTimeout.Duration != 1500*time.Millisecond {
					t.Errorf("body_timeout = %v", c.Limits.BodyTimeout)
				}
				if got := c.RuleSets["x.y"][0].RateLimit.MaxKeys; got != DefaultRateLimitKeys {
					t.Errorf(`rule_sets."x.y" max_keys = %d`, got)
				}
				for i, want := range []int{1, 1000000, DefaultRateLimitKeys} {
					if got := c.RuleSets["s"][i].RateLimit.MaxKeys; got != want {
						t.Errorf("rule %d max_keys = %d, want %d", i, got, want)
					}
				}
				roundTrip(t, c)
			},
		},
		{
			name:  "trailing document marker is harmless",
			src:   minimal + "---\n",
			check: func(t *testing.T, c *Config) {},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := mustParse(t, tt.src, tt.o)
			if err := c.Validate(); err != nil {
				t.Errorf("parsed config does not re-validate: %v", err)
			}
			tt.check(t, c)
		})
	}
}

// wantErr is one expected problem: line (0 = not tied to a line), an exact
// key, and a fragment of the message.
type wantErr struct {
	line int
	key  string
	msg  string
}

func TestParseErrors(t *testing.T) {
	tests := []struct {
		name string
		src  string
		o    Overrides
		want []wantErr
	}{
		// Shape of the file.
		{name: "empty file", src: "", want: []wantErr{{0, "", "the file is empty"}}},
		{name: "only comments", src: "# nothing\n\n", want: []wantErr{{0, "", "the file is empty"}}},
		{name: "explicit null document", src: "~\n", want: []wantErr{{0, "", "the file is empty"}}},
		{name: "top level is a list", src: "- a\n- b\n", want: []wantErr{{1, "", "top level must be a mapping of keys (mechanism, listen, intercept"}}},
		{name: "top level is a scalar", src: "\n\nhello\n", want: []wantErr{{3, "", "got string \"hello\""}}},
		{name: "syntax error", src: minimal + "listen:\n  port: [1\n", want: []wantErr{{5, "", "invalid YAML"}}},
		{name: "tab indentation", src: "listen:\n\tport: 1\n", want: []wantErr{{2, "", "invalid YAML"}}},
		{name: "second document", src: minimal + "---\nlog: {level: debug}\n", want: []wantErr{{5, "", "one YAML document"}}},
		{name: "unknown anchor", src: minimal + "listen: {port: *nope}\n", want: []wantErr{{4, "", "unknown anchor 'nope' referenced"}}},
		{name: "unclosed flow mapping on line 1", src: "{intercept: {destinations: [10.0.0.0/8], ports: [1]}\n", want: []wantErr{{1, "", "did not find expected ',' or '}'"}}},
		{name: "bad indentation in a block mapping", src: "listen:\n  port: 1\n addresses: []\n", want: []wantErr{{3, "", "did not find expected key"}}},
		{name: "scanner error", src: minimal + "log:\n  level: a: b\n", want: []wantErr{{5, "", "mapping values are not allowed in this context"}}},

		// Keys.
		{name: "unknown top-level key", src: minimal + "listn: {}\n", want: []wantErr{{4, "listn", `unknown key "listn" (valid: mechanism, listen, intercept, inbound, steering, external, ebpf, dns, upstream_deny, ca, audit, tokens, tool_integrity, telemetry, upstream_tls, tls, http, routes, default_route, rule_sets, limits, admin, log, federation, node_agent)`}}},
		{name: "unknown nested key", src: minimal + "listen:\n  port: 1\n  adresses: []\n", want: []wantErr{{6, "listen.adresses", `unknown key "adresses" (valid: port, addresses)`}}},
		{name: "duplicate top-level key", src: minimal + "log: {}\nlog: {}\n", want: []wantErr{{5, "log", `duplicate key "log" (first at line 4)`}}},
		{name: "duplicate nested key", src: "intercept:\n  destinations: [10.0.0.0/8]\n  ports: [1]\n  ports: [2]\n", want: []wantErr{{4, "intercept.ports", "duplicate key"}}},
		{name: "odd key names are quoted in the path", src: minimal + "listen:\n  \"a.b\\nc\": 1\n", want: []wantErr{{5, "listen.\"a.b\\nc\"", `unknown key "a.b\nc"`}}},
		{name: "merge key", src: minimal + "listen:\n  <<: {port: 1}\n", want: []wantErr{{5, "listen", "merge keys"}}},
		{name: "non-scalar key", src: minimal + "? [a]\n: 1\n", want: []wantErr{{4, "", "keys must be plain names"}}},

		// Required keys point at the parent mapping, or line 1.
		{name: "missing intercept", src: "# header\nlog: {level: info}\n", want: []wantErr{
			{2, "intercept.destinations", "required"}, {2, "intercept.ports", "required"}}},
		{name: "missing ports", src: "log: {}\nintercept:\n  destinations: [10.0.0.0/8]\n", want: []wantErr{{2, "intercept.ports", "required"}}},
		{name: "empty destinations", src: "intercept:\n  destinations: []\n  ports: [1]\n", want: []wantErr{{2, "intercept.destinations", "required"}}},

		// Type errors.
		{name: "string for an integer", src: minimal + "listen: {port: \"15001\"}\n", want: []wantErr{{4, "listen.port", `expected an integer, got string "15001"`}}},
		{name: "float for an integer", src: minimal + "limits: {max_flows: 1.5}\n", want: []wantErr{{4, "limits.max_flows", "expected an integer, got number 1.5"}}},
		{name: "list for a string", src: minimal + "log:\n  level: [debug]\n", want: []wantErr{{5, "log.level", "expected a string, got a list"}}},
		{name: "integer for a string", src: minimal + "admin: {listen: 9464}\n", want: []wantErr{{4, "admin.listen", "expected a string, got integer 9464"}}},
		{name: "yes is not a boolean", src: "intercept:\n  destinations: [10.0.0.0/8]\n  ports: [1]\n  local: yes\n", want: []wantErr{{4, "intercept.local", `expected true or false, got string "yes"`}}},
		{name: "scalar for a section", src: minimal + "limits: 5\n", want: []wantErr{{4, "limits", "expected a mapping, got integer 5"}}},
		{name: "scalar for a list", src: "intercept:\n  destinations: 10.0.0.0/8\n  ports: [1]\n", want: []wantErr{{2, "intercept.destinations", "expected a list"}}},
		{name: "unquoted :: reads as a mapping", src: minimal + "listen:\n  addresses:\n    - ::\n", want: []wantErr{{6, "listen.addresses[0]", "quote IPv6 addresses"}}},
		{name: "mechanism is not a string", src: "mechanism: 5\n" + minimal, want: []wantErr{{1, "mechanism", "expected a string, got integer 5"}}},
		{name: "timestamp for a duration", src: minimal + "limits: {idle_timeout: 2024-01-01}\n", want: []wantErr{{4, "limits.idle_timeout", "expected a duration"}}},
		{name: "octal-looking integer", src: minimal + "listen: {port: 015001}\n", want: []wantErr{{4, "listen.port", "leading zero"}}},
		{name: "integer beyond 64 bits", src: minimal + "steering: {mark: 0xffffffffffffffff}\n", want: []wantErr{{4, "steering.mark", "out of range"}}},

		// Mechanism.
		{name: "unknown mechanism lists valid names", src: "mechanism: tproxy\n" + minimal, want: []wantErr{{1, "mechanism", `unknown mechanism "tproxy" (valid: nftables-tproxy, iptables-redirect, ebpf, dns, external)`}}},
		{name: "ebpf needs a cgroup", src: "mechanism: ebpf\n" + minimal, want: []wantErr{{1, "ebpf.cgroup", "mechanism ebpf needs ebpf.cgroup (a cgroup v2 directory), or use `mcpintercept exec`"}}},
		{name: "ebpf needs a cgroup, empty value", src: "mechanism: ebpf\nebpf:\n  cgroup:\n" + minimal, want: []wantErr{{3, "ebpf.cgroup", "mechanism ebpf needs ebpf.cgroup"}}},
		{name: "ebpf via override needs a cgroup", src: minimal, o: Overrides{Mechanism: EBPF}, want: []wantErr{{1, "ebpf.cgroup", "mechanism ebpf needs ebpf.cgroup"}}},
		{name: "ebpf via override points at the ebpf section, not the file's mechanism", src: "mechanism: iptables-redirect\n" + minimal + "ebpf: {}\n", o: Overrides{Mechanism: EBPF}, want: []wantErr{{5, "ebpf.cgroup", "mechanism ebpf needs ebpf.cgroup"}}},
		{name: "relative cgroup", src: minimal + "ebpf: {cgroup: mcpi.slice}\n", want: []wantErr{{4, "ebpf.cgroup", `"mcpi.slice" is relative; give the absolute path of a cgroup v2 directory`}}},
		{name: "cgroup is not a string", src: minimal + "ebpf: {cgroup: [a]}\n", want: []wantErr{{4, "ebpf.cgroup", "expected a string, got a list"}}},
		{name: "ebpf still checks what destinations and ports it is given", src: "mechanism: ebpf\nebpf: {cgroup: /sys/fs/cgroup/x}\nintercept: {destinations: [nope], ports: [0]}\n", want: []wantErr{
			{3, "intercept.destinations[0]", "invalid prefix"}, {3, "intercept.ports[0]", "must be between 1 and 65535"}}},
		{name: "dns needs its section", src: minimal + "mechanism: dns\n", want: []wantErr{
			{4, "dns.clients", "required with mechanism dns"}, {4, "dns.listen", "required with mechanism dns"},
			{4, "dns.names", "required with mechanism dns"}, {4, "dns.pools", "required with mechanism dns"},
			{4, "dns.upstream", "required with mechanism dns"}}},
		{name: "dns section values", src: minimal + "mechanism: dns\ndns:\n  listen: [10.0.0.1, \"10.0.0.1:53\"]\n  names: [\"*.a.test\", \"*.a.test\"]\n  pools: {v4: \"fd00::/64\", v6: \"fd00::/127\"}\n  upstream: [\"10.0.0.2:0\"]\n  clients: [10.0.0.0/8]\n  quarantine: 1m\n", want: []wantErr{
			{6, "dns.listen[1]", "duplicate of dns.listen[0]"}, {7, "dns.names[1]", "duplicate of dns.names[0]"},
			{8, "dns.pools.v4", "is not IPv4"}, {8, "dns.pools.v6", "too small"},
			{9, "dns.upstream[0]", "port must be between 1 and 65535"}, {11, "dns.quarantine", "must be longer than dns.ttl + limits.idle_timeout"}}},
		{name: "dns vip_assignment", src: minimal + "dns:\n  vip_assignment: random\n", want: []wantErr{
			{5, "dns.vip_assignment", `unknown value "random" (valid: sequential, hash)`}}},
		{name: "dns quotas", src: minimal + "dns:\n  max_names: 100\n  client_quota: -1\n  pattern_quota: 101\n", want: []wantErr{
			{6, "dns.client_quota", "must be between 0 and"}, {7, "dns.pattern_quota", "must not exceed dns.max_names (100)"}}},
		{name: "empty mechanism", src: "mechanism: \"\"\n" + minimal, want: []wantErr{{1, "mechanism", "must not be empty (valid: nftables-tproxy"}}},
		{name: "unknown override", src: minimal, o: Overrides{Mechanism: "bogus"}, want: []wantErr{{0, "", `unknown mechanism "bogus" (valid: nftables-tproxy`}}},
		{name: "override to dns needs its section", src: "mechanism: nftables-tproxy\n" + minimal, o: Overrides{Mechanism: DNS}, want: []wantErr{
			{1, "dns.clients", "required"}, {1, "dns.listen", "required"}, {1, "dns.names", "required"}, {1, "dns.pools", "required"}, {1, "dns.upstream", "required"}}},
		{name: "override error alongside an empty file", src: "", o: Overrides{Mechanism: "x"}, want: []wantErr{{0, "", "unknown mechanism"}, {0, "", "the file is empty"}}},
		{name: "external needs addresses", src: "mechanism: external\n" + minimal, want: []wantErr{{1, "listen.addresses", `required when mechanism is "external"`}}},
		{name: "external needs addresses, listen present", src: "mechanism: external\nlisten:\n  port: 1\n" + minimal, want: []wantErr{{2, "listen.addresses", "required"}}},
		{name: "external via override needs addresses", src: minimal, o: Overrides{Mechanism: External}, want: []wantErr{{1, "listen.addresses", "required"}}},

		// Listen and intercept values.
		{name: "port 0", src: minimal + "listen: {port: 0}\n", want: []wantErr{{4, "listen.port", "must be between 1 and 65535, got 0"}}},
		{name: "port too large", src: minimal + "listen: {port: 65536}\n", want: []wantErr{{4, "listen.port", "got 65536"}}},
		{name: "negative port", src: minimal + "listen: {port: -1}\n", want: []wantErr{{4, "listen.port", "got -1"}}},
		{name: "explicitly empty addresses", src: minimal + "listen: {addresses: []}\n", want: []wantErr{{4, "listen.addresses", "must not be empty"}}},
		{name: "bad and duplicate addresses", src: minimal + "listen:\n  addresses: [127.0.0.1, localhost]\n", want: []wantErr{{5, "listen.addresses[1]", `invalid IP address "localhost"`}}},
		{name: "duplicate address", src: minimal + "listen:\n  addresses: [127.0.0.1, \"::1\", 127.0.0.1]\n", want: []wantErr{{5, "listen.addresses[2]", "duplicate of listen.addresses[0]"}}},
		{name: "bad prefixes", src: "intercept:\n  destinations:\n    - 10.0.0.0/33\n    - example.com\n    - \"fe80::1%eth0\"\n  ports: [1]\n", want: []wantErr{
			{3, "intercept.destinations[0]", "invalid prefix"},
			{4, "intercept.destinations[1]", "invalid prefix \"example.com\""},
			{5, "intercept.destinations[2]", "zone"}}},
		{name: "bad ports", src: "intercept:\n  destinations: [10.0.0.0/8]\n  ports:\n    - 0\n    - \"3010-3000\"\n    - \"1-70000\"\n    - \"http\"\n    - \"-5\"\n    - 80\n    - [1]\n", want: []wantErr{
			{4, "intercept.ports[0]", "must be between 1 and 65535, got 0"},
			{5, "intercept.ports[1]", "range 3010-3000 is backwards"},
			{6, "intercept.ports[2]", "ports must be between 1 and 65535"},
			{7, "intercept.ports[3]", `got string "http"`},
			{8, "intercept.ports[4]", `got string "-5"`},
			{10, "intercept.ports[6]", "got a list"}}},

		// Steering.
		{name: "zero mark", src: minimal + "steering: {mark: 0}\n", want: []wantErr{{4, "steering.mark", "must be non-zero"}}},
		{name: "mark beyond 32 bits", src: minimal + "steering: {bypass_mark: 0x100000000}\n", want: []wantErr{{4, "steering.bypass_mark", "must fit in 32 bits"}}},
		{name: "marks equal", src: minimal + "steering:\n  mark: 0x10\n  bypass_mark: 16\n", want: []wantErr{{6, "steering.bypass_mark", "must differ from steering.mark (both are 0x10)"}}},
		{name: "marks share bits", src: minimal + "steering:\n  mark: 0x4d49\n  bypass_mark: 0x4d50\n", want: []wantErr{{6, "steering.bypass_mark", "shares bits 0x4d40 with steering.mark 0x4d49"}}},
		{name: "mark alone clashing with the default bypass mark points at mark", src: minimal + "steering:\n  mark: 0x4d500000\n", want: []wantErr{{5, "steering.bypass_mark", "must differ from steering.mark"}}},
		{name: "bad mark suppresses the cross check", src: minimal + "steering:\n  mark: 0\n  bypass_mark: 0x4d49\n", want: []wantErr{{5, "steering.mark", "non-zero"}}},
		{name: "reserved route tables", src: minimal + "steering: {route_table: 253}\n", want: []wantErr{{4, "steering.route_table", "reserved"}}},
		{name: "route table 0", src: minimal + "steering: {route_table: 0}\n", want: []wantErr{{4, "steering.route_table", "must be between 1 and 2147483647"}}},
		{name: "route table beyond 31 bits", src: minimal + "steering: {route_table: 2147483648}\n", want: []wantErr{{4, "steering.route_table", "must be between 1 and 2147483647"}}},
		{name: "rule priority of the main rule", src: minimal + "steering: {rule_priority: 32766}\n", want: []wantErr{{4, "steering.rule_priority", "must be between 1 and 32765"}}},
		{name: "original_dst", src: minimal + "external: {original_dst: conntrack}\n", want: []wantErr{{4, "external.original_dst", `unknown value "conntrack" (valid: local-address, so-original-dst)`}}},

		// Limits.
		{name: "max_flows 0", src: minimal + "limits: {max_flows: 0}\n", want: []wantErr{{4, "limits.max_flows", "must be between 1"}}},
		{name: "per-client above max", src: minimal + "limits:\n  max_flows: 10\n  max_flows_per_client: 11\n", want: []wantErr{{6, "limits.max_flows_per_client", "11 exceeds limits.max_flows (10)"}}},
		{name: "per-client above the default max_flows", src: minimal + "limits:\n  max_flows_per_client: 20000\n", want: []wantErr{{5, "limits.max_flows_per_client", "20000 exceeds limits.max_flows (10000)"}}},
		{name: "max_flows alone below an explicit per-client points at per-client", src: minimal + "limits:\n  max_flows_per_client: 50\n  max_flows: 20\n", want: []wantErr{{5, "limits.max_flows_per_client", "50 exceeds"}}},
		{name: "duration without a unit", src: minimal + "limits:\n  idle_timeout: 300\n", want: []wantErr{{5, "limits.idle_timeout", `invalid duration "300"`}}},
		{name: "duration nonsense", src: minimal + "limits:\n  connect_timeout: soon\n", want: []wantErr{{5, "limits.connect_timeout", `invalid duration "soon"`}}},
		{name: "zero idle timeout", src: minimal + "limits:\n  idle_timeout: 0s\n", want: []wantErr{{5, "limits.idle_timeout", "must be greater than 0"}}},
		{name: "negative drain", src: minimal + "limits:\n  drain_timeout: -1s\n", want: []wantErr{{5, "limits.drain_timeout", "must not be negative"}}},

		// Admin and log.
		{name: "admin without port", src: minimal + "admin: {listen: localhost}\n", want: []wantErr{{4, "admin.listen", `must be "off" or host:port, got "localhost"`}}},
		{name: "admin bad port", src: minimal + "admin: {listen: \"127.0.0.1:http\"}\n", want: []wantErr{{4, "admin.listen", "port \"http\" must be a number"}}},
		{name: "log level", src: minimal + "log: {level: INFO}\n", want: []wantErr{{4, "log.level", `unknown level "INFO" (valid: debug, info, warn, error)`}}},
		{name: "log flows empty", src: minimal + "log: {flows: \"\"}\n", want: []wantErr{{4, "log.flows", "must be"}}},
		{name: "log flows with a tab", src: minimal + "log: {flows: \"\\tx\\ny\"}\n", want: []wantErr{{4, "log.flows", "contains the control character U+0009"}}},
		{name: "rotation of stdout", src: minimal + "log: {flows_max_size: 100MiB}\n", want: []wantErr{{4, "log.flows_max_size", `only meaningful when log.flows is a file, not "stdout"`}}},
		{name: "rotated files of no file", src: minimal + "log: {flows: \"off\", flows_max_files: 3}\n", want: []wantErr{{4, "log.flows_max_files", `only meaningful when log.flows is a file, not "off"`}}},
		{name: "flow log size too small", src: minimal + "log: {flows: f.jsonl, flows_max_size: 1KiB}\n", want: []wantErr{{4, "log.flows_max_size", "must be 0 (no built-in rotation) or between 1MiB (1048576) and 1TiB, got 1024"}}},
		{name: "flow log size too large", src: minimal + "log: {flows: f.jsonl, flows_max_size: 2TiB}\n", want: []wantErr{{4, "log.flows_max_size", "got 2199023255552"}}},
		{name: "flow log size overflows", src: minimal + "log: {flows: f.jsonl, flows_max_size: 9999999999TiB}\n", want: []wantErr{{4, "log.flows_max_size", `"9999999999TiB" is out of range`}}},
		{name: "flow log size in decimal units", src: minimal + "log: {flows: f.jsonl, flows_max_size: 100MB}\n", want: []wantErr{{4, "log.flows_max_size", `invalid size "100MB": write bytes, or a whole number with KiB, MiB, GiB or TiB, e.g. "100MiB"`}}},
		{name: "flow log size fraction", src: minimal + "log: {flows: f.jsonl, flows_max_size: 1.5GiB}\n", want: []wantErr{{4, "log.flows_max_size", `invalid size "1.5GiB"`}}},
		{name: "flow log size as a list", src: minimal + "log: {flows: f.jsonl, flows_max_size: [1]}\n", want: []wantErr{{4, "log.flows_max_size", `expected a size such as "100MiB", got a list`}}},
		{name: "no rotated files", src: minimal + "log: {flows: f.jsonl, flows_max_files: 0}\n", want: []wantErr{{4, "log.flows_max_files", "must be between 1 and 1000, got 0"}}},
		{name: "too many rotated files", src: minimal + "log: {flows: f.jsonl, flows_max_files: 1001}\n", want: []wantErr{{4, "log.flows_max_files", "must be between 1 and 1000, got 1001"}}},
		{name: "rotated files without a size", src: minimal + "log: {flows: f.jsonl, flows_max_size: 0, flows_max_files: 3}\n", want: []wantErr{{4, "log.flows_max_files", "only meaningful with log.flows_max_size (0 turns the built-in rotation off)"}}},
		{name: "admin listen with a line break", src: minimal + "admin: {listen: \"\\nx:1\"}\n", want: []wantErr{{4, "admin.listen", "contains the control character U+000A"}}},

		// CA, upstream TLS, TLS and HTTP limits.
		{name: "empty ca.dir", src: minimal + "ca: {dir: \"\"}\n", want: []wantErr{{4, "ca.dir", "must not be empty"}}},
		{name: "ca.dir with a NUL byte", src: minimal + "ca: {dir: \"a\\0b\"}\n", want: []wantErr{{4, "ca.dir", "contains a NUL byte"}}},
		{name: "ca.dir with a line break", src: minimal + "ca:\n  dir: |\n    /a\n", want: []wantErr{{5, "ca.dir", "contains the control character U+000A"}}},
		{name: "extra_cas with a tab", src: minimal + "upstream_tls: {extra_cas: [\"a\\tb.pem\"]}\n", want: []wantErr{{4, "upstream_tls.extra_cas[0]", "contains the control character U+0009"}}},
		{name: "cgroup with a line break", src: minimal + "ebpf: {cgroup: \"/sys/fs/cgroup/a\\nb\"}\n", want: []wantErr{{4, "ebpf.cgroup", "U+000A"}}},
		{name: "ca is not a mapping", src: minimal + "ca: /etc/ca\n", want: []wantErr{{4, "ca", `expected a mapping, got string "/etc/ca"`}}},
		{name: "extra_cas is not a list", src: minimal + "upstream_tls: {extra_cas: /a.pem}\n", want: []wantErr{{4, "upstream_tls.extra_cas", "expected a list"}}},
		{name: "extra_cas item is not a string", src: minimal + "upstream_tls:\n  extra_cas: [/a.pem, 5]\n", want: []wantErr{{5, "upstream_tls.extra_cas[1]", "expected a string, got integer 5"}}},
		{name: "extra_cas item is empty", src: minimal + "upstream_tls:\n  extra_cas: [/a.pem, \"\"]\n", want: []wantErr{{5, "upstream_tls.extra_cas[1]", "must not be empty"}}},
		{name: "zero handshake timeout", src: minimal + "upstream_tls:\n  handshake_timeout: 0s\n", want: []wantErr{{5, "upstream_tls.handshake_timeout", "must be greater than 0, got 0s"}}},
		{name: "zero peek timeout", src: minimal + "tls: {peek_timeout: 0s}\n", want: []wantErr{{4, "tls.peek_timeout", "must be greater than 0"}}},
		{name: "peek timeout without a unit", src: minimal + "tls: {peek_timeout: 5}\n", want: []wantErr{{4, "tls.peek_timeout", `invalid duration "5"`}}},
		{name: "max_client_hello too small", src: minimal + "tls: {max_client_hello: 511}\n", want: []wantErr{{4, "tls.max_client_hello", "must be between 512 and 1048576, got 511"}}},
		{name: "max_client_hello too large", src: minimal + "tls: {max_client_hello: 1048577}\n", want: []wantErr{{4, "tls.max_client_hello", "got 1048577"}}},
		{name: "max_client_hello is a string", src: minimal + "tls: {max_client_hello: 64k}\n", want: []wantErr{{4, "tls.max_client_hello", `expected an integer, got string "64k"`}}},
		{name: "leaf_cache 0", src: minimal + "tls: {leaf_cache: 0}\n", want: []wantErr{{4, "tls.leaf_cache", "must be between 1 and 2147483647, got 0"}}},
		{name: "leaf_validity under an hour", src: minimal + "tls: {leaf_validity: 59m}\n", want: []wantErr{{4, "tls.leaf_validity", "must be between 1h and 825 days (19800h), got 59m0s"}}},
		{name: "leaf_validity over 825 days", src: minimal + "tls: {leaf_validity: 19801h}\n", want: []wantErr{{4, "tls.leaf_validity", "got 19801h0m0s"}}},
		{name: "max_header_bytes too small", src: minimal + "http: {max_header_bytes: 1023}\n", want: []wantErr{{4, "http.max_header_bytes", "must be between 1024 and 1048576, got 1023"}}},
		{name: "max_header_bytes too large", src: minimal + "http: {max_header_bytes: 0x100001}\n", want: []wantErr{{4, "http.max_header_bytes", "got 1048577"}}},
		{name: "negative header timeout", src: minimal + "http:\n  header_timeout: -1s\n", want: []wantErr{{5, "http.header_timeout", "must be greater than 0, got -1s"}}},

		// Routes: shape.
		{name: "routes is not a list", src: minimal + "routes: {name: a}\n", want: []wantErr{{4, "routes", "expected a list of routes, got a mapping"}}},
		{name: "route is not a mapping", src: withRoutes + "  - a\n", want: []wantErr{{5, "routes[0]", `expected a mapping, got string "a"`}}},
		{name: "empty route", src: withRoutes + "  -\n  - {name: b, tls: terminate}\n", want: []wantErr{{5, "routes[0]", "expected a mapping, got an empty value"}}},
		{name: "unknown route key", src: withRoutes + "  - {name: a, tls: terminate, levl: 1}\n", want: []wantErr{{5, "routes[0].levl", `unknown key "levl" (valid: name, match, tls, level, on_mismatch, on_rule_error, development, plaintext_upstream_trusted_network, strict_mcp_headers, allow_upgrade, http_methods, max_body, on_oversized_response, validate_arguments, rule_set, audit, audit_arguments, token_audience, audiences, tool_pins, on_divergence, trace_propagation, credentials)`}}},
		{name: "unknown match key", src: withRoutes + "  - name: a\n    tls: terminate\n    match: {port: [1]}\n", want: []wantErr{{7, "routes[0].match.port", `unknown key "port" (valid: destinations, ports, sni, clients)`}}},
		{name: "match is not a mapping", src: withRoutes + "  - {name: a, tls: terminate, match: [1]}\n", want: []wantErr{{5, "routes[0].match", "expected a mapping, got a list"}}},
		{name: "a broken route does not hide the next one's problems", src: withRoutes + "  - x\n  - {name: b, tls: nope}\n", want: []wantErr{
			{5, "routes[0]", "expected a mapping"}, {6, "routes[1].tls", `unknown value "nope"`}}},

		// Routes: names, tls, level.
		{name: "route name required", src: withRoutes + "  - {tls: terminate}\n", want: []wantErr{{5, "routes[0].name", "required: a name for logs and metrics"}}},
		{name: "route name characters", src: withRoutes + "  - {name: \"a b\", tls: terminate}\n", want: []wantErr{{5, "routes[0].name", `invalid name "a b": use letters, digits, '_', '.' and '-'`}}},
		{name: "route name is not a string", src: withRoutes + "  - {name: 7, tls: terminate}\n", want: []wantErr{{5, "routes[0].name", "expected a string, got integer 7"}}},
		{name: "duplicate route names", src: withRoutes + "  - {name: a, tls: terminate}\n  - {name: b, tls: terminate}\n  - {name: a, tls: plaintext}\n", want: []wantErr{{7, "routes[2].name", `duplicate route name "a" (also routes[0])`}}},
		{name: "tls required", src: withRoutes + "  - name: a\n    level: 1\n", want: []wantErr{{5, "routes[0].tls", "required: passthrough, terminate or plaintext"}}},
		{name: "tls unknown", src: withRoutes + "  - {name: a, tls: mitm}\n", want: []wantErr{{5, "routes[0].tls", `unknown value "mitm" (valid: passthrough, terminate, plaintext)`}}},
		{name: "level 2 max_body out of range", src: withRoutes + "  - name: a\n    tls: terminate\n    level: 2\n    max_body: 10\n", want: []wantErr{{8, "routes[0].max_body", "must be between 1024 and 67108864, got 10"}}},
		{name: "max_body below level 2", src: withRoutes + "  - name: a\n    tls: terminate\n    level: 1\n    max_body: 4096\n", want: []wantErr{{8, "routes[0].max_body", "only meaningful with level 2 (bodies are not read below it)"}}},
		{name: "on_oversized_response unknown", src: withRoutes + "  - name: a\n    tls: terminate\n    level: 2\n    on_oversized_response: drop\n", want: []wantErr{{8, "routes[0].on_oversized_response", `unknown value "drop" (valid: close, forward)`}}},
		{name: "level 3", src: withRoutes + "  - {name: a, tls: terminate, level: 3}\n", want: []wantErr{{5, "routes[0].level", "must be 0 (opaque), 1 (HTTP headers) or 2 (JSON-RPC bodies), got 3"}}},
		{name: "negative level", src: withRoutes + "  - {name: a, tls: terminate, level: -1}\n", want: []wantErr{{5, "routes[0].level", "got -1"}}},
		{name: "level as a string", src: withRoutes + "  - {name: a, tls: terminate, level: \"1\"}\n", want: []wantErr{{5, "routes[0].level", `expected an integer, got string "1"`}}},
		{name: "passthrough at level 1", src: withRoutes + "  - name: a\n    tls: passthrough\n    level: 1\n", want: []wantErr{{7, "routes[0].level", "passthrough cannot read HTTP headers (the stream stays encrypted); use level 0, or tls: terminate"}}},
		{name: "on_mismatch unknown", src: withRoutes + "  - {name: a, tls: terminate, on_mismatch: drop}\n", want: []wantErr{{5, "routes[0].on_mismatch", `unknown value "drop" (valid: passthrough, close)`}}},
		{name: "on_mismatch empty", src: withRoutes + "  - {name: a, tls: terminate, on_mismatch: \"\"}\n", want: []wantErr{{5, "routes[0].on_mismatch", "must not be empty (valid: passthrough, close)"}}},

		// Routes: options that depend on tls and level.
		{name: "development on terminate", src: withRoutes + "  - name: a\n    tls: terminate\n    development: true\n", want: []wantErr{{7, "routes[0].development", "development applies to tls: plaintext routes only"}}},
		{name: "development on passthrough", src: withRoutes + "  - {name: a, tls: passthrough, development: true}\n", want: []wantErr{{5, "routes[0].development", "development applies to tls: plaintext routes only"}}},
		{name: "development: false is fine anywhere, but must be a boolean", src: withRoutes + "  - {name: a, tls: terminate, development: false}\n  - {name: b, tls: plaintext, development: 1}\n", want: []wantErr{{6, "routes[1].development", "expected true or false, got integer 1"}}},
		{name: "plaintext upstream on a plaintext route", src: withRoutes + "  - name: a\n    tls: plaintext\n    plaintext_upstream_trusted_network: true\n", want: []wantErr{{7, "routes[0].plaintext_upstream_trusted_network", "plaintext_upstream_trusted_network applies to tls: terminate routes only"}}},
		{name: "plaintext upstream on passthrough", src: withRoutes + "  - {name: a, tls: passthrough, plaintext_upstream_trusted_network: true}\n", want: []wantErr{{5, "routes[0].plaintext_upstream_trusted_network", "applies to tls: terminate routes only"}}},
		{name: "strict headers at level 0", src: withRoutes + "  - name: a\n    tls: terminate\n    level: 0\n    strict_mcp_headers: true\n", want: []wantErr{{8, "routes[0].strict_mcp_headers", "needs level 1: MCP headers are not read at level 0"}}},
		{name: "strict headers on passthrough's default level", src: withRoutes + "  - {name: a, tls: passthrough, strict_mcp_headers: true}\n", want: []wantErr{{5, "routes[0].strict_mcp_headers", "needs level 1"}}},
		{name: "rule_set unknown, none defined", src: withRoutes + "  - {name: a, tls: terminate, rule_set: strict}\n", want: []wantErr{{5, "routes[0].rule_set", `unknown rule set "strict": rule_sets defines none`}}},
		{name: "rule_set unknown lists the sets in file order", src: withRoutes + "  - {name: a, tls: terminate, rule_set: strict}\nrule_sets:\n  zeta: []\n  alpha:\n", want: []wantErr{{5, "routes[0].rule_set", `unknown rule set "strict" (defined: "zeta", "alpha")`}}},
		{name: "rule_set on a level 0 terminate route", src: withRoutes + "  - name: a\n    tls: terminate\n    level: 0\n    rule_set: s\nrule_sets: {s: []}\n", want: []wantErr{{8, "routes[0].rule_set", "needs level 1: a level 0 terminate route does not read requests (only passthrough routes apply connection-level rules at level 0)"}}},
		{name: "rule_set on a level 0 plaintext route", src: withRoutes + "  - {name: a, tls: plaintext, level: 0, rule_set: s}\nrule_sets: {s: []}\n", want: []wantErr{{5, "routes[0].rule_set", "a level 0 plaintext route"}}},
		{name: "combination checks wait for a valid tls", src: withRoutes + "  - {name: a, tls: nope, level: 0, development: true, strict_mcp_headers: true, plaintext_upstream_trusted_network: true}\n", want: []wantErr{{5, "routes[0].tls", `unknown value "nope"`}}},
		{name: "combination checks wait for a valid level", src: withRoutes + "  - {name: a, tls: passthrough, level: 5, strict_mcp_headers: true}\n", want: []wantErr{{5, "routes[0].level", "got 5"}}},

		// Routes: match.
		{name: "route destinations and clients", src: withRoutes + "  - name: a\n    tls: terminate\n    match:\n      destinations: [10.0.0.0/8, example.com]\n      clients: [\"fe80::1%eth0\"]\n", want: []wantErr{
			{8, "routes[0].match.destinations[1]", `invalid prefix "example.com"`}, {9, "routes[0].match.clients[0]", "zone"}}},
		{name: "route ports", src: withRoutes + "  - name: a\n    tls: terminate\n    match: {ports: [\"9-1\", 0]}\n", want: []wantErr{
			{7, "routes[0].match.ports[0]", "range 9-1 is backwards"}, {7, "routes[0].match.ports[1]", "must be between 1 and 65535, got 0"}}},
		{name: "sni names", src: withRoutes + "  - name: a\n    tls: terminate\n    match:\n      sni:\n" +
			"        - 10.0.0.1\n" + // 9
			"        - \"::1\"\n" +
			"        - \"[2001:db8::1]\"\n" +
			"        - 10.0.0.0/8\n" +
			"        - \"*\"\n" + // 13
			"        - a.*.example.com\n" +
			"        - \"*foo.example.com\"\n" +
			"        - example.com.\n" +
			"        - a..example.com\n" + // 17
			"        - -a.example.com\n" +
			"        - a_b.example.com\n" +
			"        - \"\\u212Aelvin.example.com\"\n" +
			"        - 5\n" + // 21
			"        - " + strings.Repeat("a", 64) + ".com\n" +
			"        - \"\"\n" +
			"        - " + strings.Repeat("abcdefghi.", 26) + "com\n" +
			"        - ok.example.com\n",
			want: []wantErr{
				{9, "routes[0].match.sni[0]", "SNI carries names, not addresses; match on destinations instead"},
				{10, "routes[0].match.sni[1]", "SNI carries names, not addresses"},
				{11, "routes[0].match.sni[2]", "SNI carries names, not addresses"},
				{12, "routes[0].match.sni[3]", "SNI carries names, not addresses"},
				{13, "routes[0].match.sni[4]", `a wildcard needs a suffix, e.g. "*.example.com"; leave sni out to match every name`},
				{14, "routes[0].match.sni[5]", `"a.*.example.com": a wildcard must be the whole first label`},
				{15, "routes[0].match.sni[6]", "a wildcard must be the whole first label"},
				{16, "routes[0].match.sni[7]", `"example.com." ends with a dot`},
				{17, "routes[0].match.sni[8]", `"a..example.com" has an empty label`},
				{18, "routes[0].match.sni[9]", `label "-a" starts or ends with '-'`},
				{19, "routes[0].match.sni[10]", `label "a_b" contains '_'; names use letters, digits and '-'`},
				{20, "routes[0].match.sni[11]", `label "Kelvin" contains U+212A 'K'`},
				{21, "routes[0].match.sni[12]", "expected a server name such as api.example.com or *.example.com, got integer 5"},
				{22, "routes[0].match.sni[13]", "is longer than 63 characters"},
				{23, "routes[0].match.sni[14]", "must not be empty"},
				{24, "routes[0].match.sni[15]", "is 263 characters long; a DNS name has at most 253"},
			}},

		// Rule sets: shape.
		{name: "rule_sets is not a mapping", src: minimal + "rule_sets: [a]\n", want: []wantErr{{4, "rule_sets", "expected a mapping of rule set names to lists of rules, got a list"}}},
		{name: "rule set is not a list", src: withRuleSets + "  s: {name: a}\n", want: []wantErr{{5, "rule_sets.s", "expected a list of rules, got a mapping"}}},
		{name: "rule is not a mapping", src: withRuleSets + "  s: [deny]\n", want: []wantErr{{5, "rule_sets.s[0]", `expected a mapping, got string "deny"`}}},
		{name: "unknown rule key", src: withRuleSets + "  s:\n    - {name: a, action: deny, reasn: x}\n", want: []wantErr{{6, "rule_sets.s[0].reasn", `unknown key "reasn" (valid: name, when, action, reason, mode, rate_limit, redact)`}}},
		{name: "unknown rate_limit key", src: withRuleSets + "  s:\n    - {name: a, action: rate_limit, rate_limit: {key: k, rate: 1, burst: 1, per: 1s}}\n", want: []wantErr{{6, "rule_sets.s[0].rate_limit.per", `unknown key "per" (valid: key, rate, burst, max_keys)`}}},
		{name: "rate_limit is not a mapping", src: withRuleSets + "  s:\n    - {name: a, action: rate_limit, rate_limit: 10}\n", want: []wantErr{{6, "rule_sets.s[0].rate_limit", "expected a mapping, got integer 10"}}},
		{name: "rule set name characters", src: withRuleSets + "  \"my set\": []\n", want: []wantErr{{5, `rule_sets."my set"`, `invalid name "my set"`}}},
		{name: "duplicate rule set", src: withRuleSets + "  s: []\n  s: []\n", want: []wantErr{{6, "rule_sets.s", `duplicate key "s" (first at line 5)`}}},
		{name: "merge key in rule_sets", src: withRuleSets + "  <<: {s: []}\n", want: []wantErr{{5, "rule_sets", "merge keys"}}},
		{name: "rule set name is not a scalar", src: withRuleSets + "  ? [s]\n  : []\n", want: []wantErr{{5, "rule_sets", "keys must be plain names, got a list"}}},

		// Rules.
		{name: "rule name required", src: withRuleSets + "  s:\n    - action: deny\n", want: []wantErr{{6, "rule_sets.s[0].name", "required: a name for the decision log"}}},
		{name: "rule name characters", src: withRuleSets + "  s:\n    - {name: \"deny/all\", action: deny}\n", want: []wantErr{{6, "rule_sets.s[0].name", `invalid name "deny/all"`}}},
		{name: "duplicate rule in a set", src: withRuleSets + "  s:\n    - {name: a, action: deny}\n    - {name: b, action: deny}\n    - {name: a, action: allow}\n", want: []wantErr{{8, "rule_sets.s[2].name", `duplicate rule name "a" (also rule_sets.s[0])`}}},
		{name: "action required", src: withRuleSets + "  s:\n    - name: a\n      when: \"true\"\n", want: []wantErr{{6, "rule_sets.s[0].action", "required: allow, deny, rate_limit or redact"}}},
		{name: "action unknown", src: withRuleSets + "  s:\n    - {name: a, action: block}\n", want: []wantErr{{6, "rule_sets.s[0].action", `unknown value "block" (valid: allow, deny, rate_limit, redact)`}}},
		{name: "when is a list", src: withRuleSets + "  s:\n    - {name: a, action: deny, when: [x]}\n", want: []wantErr{{6, "rule_sets.s[0].when", "expected a CEL expression (a string), got a list"}}},
		{name: "reason too long", src: withRuleSets + "  s:\n    - name: a\n      action: deny\n      reason: " + strings.Repeat("é", 201) + "\n", want: []wantErr{{8, "rule_sets.s[0].reason", "is 201 characters long; keep it to 200"}}},
		{name: "reason with a line break", src: withRuleSets + "  s:\n    - {name: a, action: deny, reason: \"no\\nway\"}\n", want: []wantErr{{6, "rule_sets.s[0].reason", "contains the non-printing character U+000A; write one line of plain text"}}},
		{name: "reason with a tab", src: withRuleSets + "  s:\n    - {name: a, action: deny, reason: \"no\\tway\"}\n", want: []wantErr{{6, "rule_sets.s[0].reason", "U+0009"}}},
		{name: "reason with a C1 control", src: withRuleSets + "  s:\n    - {name: a, action: deny, reason: \"no\\x9bway\"}\n", want: []wantErr{{6, "rule_sets.s[0].reason", "U+009B"}}},
		{name: "reason is not a string", src: withRuleSets + "  s:\n    - {name: a, action: deny, reason: 403}\n", want: []wantErr{{6, "rule_sets.s[0].reason", "expected a string, got integer 403"}}},
		{name: "rate_limit required by the action, reported at the action", src: withRuleSets + "  s:\n    - name: a\n      action: rate_limit\n", want: []wantErr{{7, "rule_sets.s[0].rate_limit", "required when action is rate_limit: give key, rate and burst"}}},
		{name: "rate_limit on a deny rule", src: withRuleSets + "  s:\n    - name: a\n      action: deny\n      rate_limit: {key: k, rate: 1, burst: 1}\n", want: []wantErr{{8, "rule_sets.s[0].rate_limit", "applies to action: rate_limit only, and this rule's action is deny"}}},
		{name: "rate_limit parts required", src: withRuleSets + "  s:\n    - name: a\n      action: rate_limit\n      rate_limit: {}\n", want: []wantErr{
			{8, "rule_sets.s[0].rate_limit.burst", "required: the bucket size"},
			{8, "rule_sets.s[0].rate_limit.key", "required: a CEL expression naming the bucket, e.g. client.address"},
			{8, "rule_sets.s[0].rate_limit.rate", "required: tokens per second, greater than 0"}}},
		{name: "blank rate_limit key", src: withRuleSets + "  s:\n    - {name: a, action: rate_limit, rate_limit: {key: \" \", rate: 1, burst: 1}}\n", want: []wantErr{{6, "rule_sets.s[0].rate_limit.key", "required"}}},
		{name: "bad rates", src: withRuleSets + "  s:\n" +
			"    - {name: a, action: rate_limit, rate_limit: {key: k, burst: 1, rate: 0}}\n" +
			"    - {name: b, action: rate_limit, rate_limit: {key: k, burst: 1, rate: -0.5}}\n" +
			"    - {name: c, action: rate_limit, rate_limit: {key: k, burst: 1, rate: .inf}}\n" +
			"    - {name: d, action: rate_limit, rate_limit: {key: k, burst: 1, rate: .nan}}\n" +
			"    - {name: e, action: rate_limit, rate_limit: {key: k, burst: 1, rate: fast}}\n" +
			"    - {name: f, action: rate_limit, rate_limit: {key: k, burst: 1, rate: 010}}\n",
			want: []wantErr{
				{6, "rule_sets.s[0].rate_limit.rate", "must be a positive number of tokens per second, got 0"},
				{7, "rule_sets.s[1].rate_limit.rate", "got -0.5"},
				{8, "rule_sets.s[2].rate_limit.rate", "got +Inf"},
				{9, "rule_sets.s[3].rate_limit.rate", "got NaN"},
				{10, "rule_sets.s[4].rate_limit.rate", `expected a number of tokens per second such as 10 or 0.5, got string "fast"`},
				{11, "rule_sets.s[5].rate_limit.rate", "leading zero"}}},
		{name: "bad bursts", src: withRuleSets + "  s:\n" +
			"    - {name: a, action: rate_limit, rate_limit: {key: k, rate: 1, burst: 0}}\n" +
			"    - {name: b, action: rate_limit, rate_limit: {key: k, rate: 1, burst: 1.5}}\n",
			want: []wantErr{
				{6, "rule_sets.s[0].rate_limit.burst", "must be between 1 and 2147483647, got 0"},
				{7, "rule_sets.s[1].rate_limit.burst", "expected an integer, got number 1.5"}}},
		{name: "a broken rule does not hide the set from routes", src: withRoutes + "  - {name: r, tls: terminate, rule_set: s}\nrule_sets:\n  s: [{name: a, action: rate_limit, rate_limit: 1}]\n", want: []wantErr{{7, "rule_sets.s[0].rate_limit", "expected a mapping"}}},
		{name: "a rule set that is not a list still exists for routes", src: withRoutes + "  - {name: r, tls: terminate, rule_set: s}\nrule_sets:\n  s: deny\n", want: []wantErr{{7, "rule_sets.s", "expected a list of rules"}}},
		{name: "aliases cannot multiply a file past the entry limit", src: aliasBomb(), want: []wantErr{{5, "routes[99].match.ports", "the file has more than 100000 list entries and rule sets (each use of an alias counts again)"}}},
		{name: "errors in rule sets and routes come out in file order", src: minimal +
			"rule_sets:\n  s:\n    - {name: a, action: nope}\n" + // 6
			"routes:\n  - {name: r, tls: terminate, rule_set: t}\n" + // 8
			"log: {level: loud}\n", // 9
			want: []wantErr{
				{6, "rule_sets.s[0].action", "unknown value"},
				{8, "routes[0].rule_set", `unknown rule set "t" (defined: "s")`},
				{9, "log.level", "unknown level"}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := Parse("test.yaml", []byte(tt.src), tt.o)
			if c != nil {
				t.Errorf("got a config despite errors")
			}
			var errs Errors
			if !errors.As(err, &errs) {
				t.Fatalf("error %v (%T) is not an Errors", err, err)
			}
			if len(errs) != len(tt.want) {
				t.Errorf("got %d errors, want %d:\n%v", len(errs), len(tt.want), err)
			}
			for i, w := range tt.want {
				if i >= len(errs) {
					break
				}
				e := errs[i]
				if e.Line != w.line || e.Key != w.key || !strings.Contains(e.Msg, w.msg) {
					t.Errorf("error %d = %q (line %d, key %q)\nwant line %d, key %q, message containing %q",
						i, e.Error(), e.Line, e.Key, w.line, w.key, w.msg)
				}
				wantFile := "test.yaml"
				if tt.o.Mechanism != "" && e.Line == 0 && strings.Contains(e.Msg, "mechanism") {
					wantFile = "--mechanism"
				}
				if e.File != wantFile {
					t.Errorf("error %d file = %q, want %q", i, e.File, wantFile)
				}
				// The rendered message is what users see: it must carry the
				// line and the key too.
				s := e.Error()
				if w.line > 0 && !strings.HasPrefix(s, e.File+":"+strconv.Itoa(w.line)+":") {
					t.Errorf("error %d %q does not start with file:line", i, s)
				}
				if w.key != "" && !strings.Contains(s, w.key+": ") {
					t.Errorf("error %d %q does not name key %q", i, s, w.key)
				}
			}
		})
	}
}

// TestParseErrorPositions pins the whole rendered message, position
// included, for the keys of issue 8 (allow_upgrade, on_rule_error,
// default_route, limits.body_timeout, rate_limit.max_keys).
func TestParseErrorPositions(t *testing.T) {
	const drKeys = "tls, level, on_mismatch, on_rule_error, development, plaintext_upstream_trusted_network, strict_mcp_headers, allow_upgrade, http_methods, max_body, on_oversized_response, validate_arguments, rule_set, audit, audit_arguments, token_audience, audiences, tool_pins, on_divergence, trace_propagation"
	tests := []struct {
		name string
		src  string
		want []string
	}{
		// http_methods: upper-case tokens, no duplicates, level 1 (the key added after issue 30's
		// refactor, with its rules in the schema table).
		{name: "http_methods on a passthrough route", src: withRoutes + "  - {name: a, tls: passthrough, http_methods: [POST]}\n", want: []string{
			"test.yaml:5:47: routes[0].http_methods: needs level 1: a level 0 route does not read requests"}},
		{name: "http_methods lower case and duplicated", src: withRoutes + "  - {name: a, tls: terminate, http_methods: [POST, get, POST]}\n", want: []string{
			`test.yaml:5:52: routes[0].http_methods[1]: "get" is not an HTTP method in upper case (e.g. POST, GET, DELETE)`,
			`test.yaml:5:57: routes[0].http_methods[2]: duplicate of routes[0].http_methods[0] ("POST")`}},
		{name: "http_methods on a level 1 route", src: withRoutes + "  - {name: a, tls: terminate, http_methods: [POST, GET, DELETE]}\n  - {name: b, tls: nope}\n", want: []string{
			`test.yaml:6:20: routes[1].tls: unknown value "nope" (valid: passthrough, terminate, plaintext)`}},
		// allow_upgrade (routes start on line 5).
		{name: "h2c on a level 1 route", src: withRoutes + "  - {name: a, tls: terminate, allow_upgrade: [websocket, H2C]}\n", want: []string{
			"test.yaml:5:58: routes[0].allow_upgrade[1]: h2c is never allowed through a Level 1 route: after the switch, requests are HTTP/2 frames Level 1 cannot read"}},
		{name: "h2c on a plaintext route's default level", src: withRoutes + "  - name: a\n    tls: plaintext\n    allow_upgrade:\n      - h2c\n", want: []string{
			"test.yaml:8:9: routes[0].allow_upgrade[0]: h2c is never allowed through a Level 1 route: after the switch, requests are HTTP/2 frames Level 1 cannot read"}},
		{name: "allow_upgrade on a passthrough route", src: withRoutes + "  - {name: a, tls: passthrough, allow_upgrade: [websocket]}\n", want: []string{
			"test.yaml:5:48: routes[0].allow_upgrade: only meaningful with level >= 1; level 0 forwards everything opaque"}},
		{name: "allow_upgrade at an explicit level 0, h2c included", src: withRoutes + "  - name: a\n    tls: terminate\n    level: 0\n    allow_upgrade: [h2c]\n", want: []string{
			"test.yaml:8:20: routes[0].allow_upgrade: only meaningful with level >= 1; level 0 forwards everything opaque"}},
		{name: "an empty allow_upgrade is fine at level 0", src: withRoutes + "  - {name: a, tls: passthrough, allow_upgrade: []}\n  - {name: b, tls: nope}\n", want: []string{
			`test.yaml:6:20: routes[1].tls: unknown value "nope" (valid: passthrough, terminate, plaintext)`}},
		{name: "duplicate tokens, compared case-insensitively", src: withRoutes + "  - {name: a, tls: terminate, allow_upgrade: [websocket, connect, WebSocket, connect]}\n", want: []string{
			`test.yaml:5:67: routes[0].allow_upgrade[2]: duplicate of routes[0].allow_upgrade[0] ("websocket")`,
			`test.yaml:5:78: routes[0].allow_upgrade[3]: duplicate of routes[0].allow_upgrade[1] ("connect")`}},
		{name: "invalid tokens", src: withRoutes + "  - name: a\n    tls: terminate\n    allow_upgrade:\n" +
			"      - web socket\n" + // 8
			"      - websocket/13\n" +
			"      - \"\"\n" +
			"      - 13\n" + // 11
			"      - [websocket]\n" +
			"      - \"wébsocket\"\n" +
			"      - \"(ws)\"\n", // 14
			want: []string{
				"test.yaml:8:9: routes[0].allow_upgrade[0]: \"web socket\" is not a protocol name: use letters, digits and !#$%&'*+-.^_`|~ (an RFC 9110 token)",
				`test.yaml:9:9: routes[0].allow_upgrade[1]: "websocket/13": give the protocol name only, e.g. "websocket", without a /version`,
				`test.yaml:10:9: routes[0].allow_upgrade[2]: must not be empty`,
				`test.yaml:11:9: routes[0].allow_upgrade[3]: expected a protocol name such as websocket, got integer 13`,
				`test.yaml:12:9: routes[0].allow_upgrade[4]: expected a protocol name such as websocket, got a list`,
				"test.yaml:13:9: routes[0].allow_upgrade[5]: \"wébsocket\" is not a protocol name: use letters, digits and !#$%&'*+-.^_`|~ (an RFC 9110 token)",
				"test.yaml:14:9: routes[0].allow_upgrade[6]: \"(ws)\" is not a protocol name: use letters, digits and !#$%&'*+-.^_`|~ (an RFC 9110 token)",
			}},
		{name: "allow_upgrade is not a list", src: withRoutes + "  - {name: a, tls: terminate, allow_upgrade: websocket}\n", want: []string{
			`test.yaml:5:46: routes[0].allow_upgrade: expected a list, got string "websocket"`}},

		// on_mismatch and on_rule_error.
		{name: "on_rule_error unknown", src: withRoutes + "  - {name: a, tls: terminate, on_rule_error: fail-open}\n", want: []string{
			`test.yaml:5:46: routes[0].on_rule_error: unknown value "fail-open" (valid: closed, open)`}},
		{name: "on_rule_error empty", src: withRoutes + "  - {name: a, tls: terminate, on_rule_error: \"\"}\n", want: []string{
			`test.yaml:5:46: routes[0].on_rule_error: must not be empty (valid: closed, open)`}},
		{name: "on_rule_error is not a string", src: withRoutes + "  - {name: a, tls: terminate, on_rule_error: true}\n", want: []string{
			`test.yaml:5:46: routes[0].on_rule_error: expected a string, got boolean true`}},

		// default_route.
		{name: "default_route unknown word", src: minimal + "default_route: drop\n", want: []string{
			`test.yaml:4:16: default_route: unknown value "drop" (valid: opaque, close, or a mapping of route keys: ` + drKeys + ")"}},
		{name: "default_route is case-sensitive", src: minimal + "default_route: Close\n", want: []string{
			`test.yaml:4:16: default_route: unknown value "Close" (valid: opaque, close, or a mapping of route keys: ` + drKeys + ")"}},
		{name: "default_route is a list", src: minimal + "default_route: [close]\n", want: []string{
			`test.yaml:4:16: default_route: expected opaque, close or a mapping of route keys, got a list`}},
		{name: "default_route is a boolean", src: minimal + "default_route: false\n", want: []string{
			`test.yaml:4:16: default_route: expected opaque, close or a mapping of route keys, got boolean false`}},
		{name: "default_route takes no name or match", src: minimal + "default_route:\n  name: fallback\n  match: {ports: [1]}\n  tls: passthrough\n", want: []string{
			`test.yaml:5:3: default_route.name: default_route takes no name: its flows are logged under the route name "default"`,
			`test.yaml:6:3: default_route.match: default_route takes no match: it applies to exactly the flows no route matches`}},
		{name: "default_route unknown key lists the keys it takes", src: minimal + "default_route: {tls: terminate, levle: 1}\n", want: []string{
			`test.yaml:4:33: default_route.levle: unknown key "levle" (valid: ` + drKeys + ")"}},
		{name: "default_route needs tls, pointed at default_route", src: minimal + "default_route:\n  level: 1\n", want: []string{
			`test.yaml:4:1: default_route.tls: required: passthrough, terminate or plaintext`}},
		{name: "default_route needs tls, empty mapping", src: minimal + "default_route: {}\n", want: []string{
			`test.yaml:4:1: default_route.tls: required: passthrough, terminate or plaintext`}},
		{name: "default_route is validated like a route", src: minimal + "default_route:\n" +
			"  tls: passthrough\n" + // 5
			"  level: 1\n" +
			"  on_mismatch: drop\n" +
			"  strict_mcp_headers: maybe\n" + // 8
			"  development: true\n" +
			"  rule_set: nope\n", // 10
			want: []string{
				`test.yaml:6:10: default_route.level: passthrough cannot read HTTP headers (the stream stays encrypted); use level 0, or tls: terminate`,
				`test.yaml:7:16: default_route.on_mismatch: unknown value "drop" (valid: passthrough, close)`,
				`test.yaml:8:23: default_route.strict_mcp_headers: expected true or false, got string "maybe"`,
				`test.yaml:9:16: default_route.development: development applies to tls: plaintext routes only`,
				`test.yaml:10:13: default_route.rule_set: unknown rule set "nope": rule_sets defines none`,
			}},
		{name: "default_route allow_upgrade", src: minimal + "default_route: {tls: terminate, allow_upgrade: [h2c, h2c]}\n", want: []string{
			`test.yaml:4:49: default_route.allow_upgrade[0]: h2c is never allowed through a Level 1 route: after the switch, requests are HTTP/2 frames Level 1 cannot read`,
			`test.yaml:4:54: default_route.allow_upgrade[1]: duplicate of default_route.allow_upgrade[0] ("h2c")`}},
		{name: "default_route rule_set at level 0 and a set that exists elsewhere", src: minimal + "default_route: {tls: plaintext, level: 0, rule_set: s}\nrule_sets: {t: []}\n", want: []string{
			`test.yaml:4:53: default_route.rule_set: needs level 1: a level 0 plaintext route does not read requests (only passthrough routes apply connection-level rules at level 0)`,
			`test.yaml:4:53: default_route.rule_set: unknown rule set "s" (defined: "t")`}},
		{name: "a route named default clashes with default_route", src: withRoutes + "  - {name: default, tls: terminate}\ndefault_route: close\n", want: []string{
			`test.yaml:5:12: routes[0].name: "default" is the name default_route's flows are logged under; pick another`}},

		// limits.body_timeout.
		{name: "body_timeout 0", src: minimal + "limits:\n  body_timeout: 0s\n", want: []string{
			`test.yaml:5:17: limits.body_timeout: must be greater than 0, got 0s`}},
		{name: "body_timeout negative", src: minimal + "limits: {body_timeout: -5s}\n", want: []string{
			`test.yaml:4:24: limits.body_timeout: must be greater than 0, got -5s`}},
		{name: "body_timeout without a unit", src: minimal + "limits: {body_timeout: 60}\n", want: []string{
			`test.yaml:4:24: limits.body_timeout: invalid duration "60": write a number with a unit, e.g. "5s" or "1m30s"`}},

		// rate_limit.max_keys.
		{name: "max_keys out of range", src: withRuleSets + "  s:\n" +
			"    - {name: a, action: rate_limit, rate_limit: {key: k, rate: 1, burst: 1, max_keys: 0}}\n" +
			"    - {name: b, action: rate_limit, rate_limit: {key: k, rate: 1, burst: 1, max_keys: 1000001}}\n" +
			"    - {name: c, action: rate_limit, rate_limit: {key: k, rate: 1, burst: 1, max_keys: 10k}}\n" +
			"    - {name: d, action: rate_limit, rate_limit: {key: k, rate: 1, burst: 1, max_keys: -1}}\n",
			want: []string{
				`test.yaml:6:87: rule_sets.s[0].rate_limit.max_keys: must be between 1 and 1000000, got 0`,
				`test.yaml:7:87: rule_sets.s[1].rate_limit.max_keys: must be between 1 and 1000000, got 1000001`,
				`test.yaml:8:87: rule_sets.s[2].rate_limit.max_keys: expected an integer, got string "10k"`,
				`test.yaml:9:87: rule_sets.s[3].rate_limit.max_keys: must be between 1 and 1000000, got -1`,
			}},
		{name: "max_keys on a deny rule is reported with its rate_limit", src: withRuleSets + "  s:\n    - {name: a, action: deny, rate_limit: {max_keys: 5}}\n", want: []string{
			`test.yaml:6:31: rule_sets.s[0].rate_limit.burst: required: the bucket size (requests allowed at once), at least 1`,
			`test.yaml:6:31: rule_sets.s[0].rate_limit.key: required: a CEL expression naming the bucket, e.g. client.address`,
			`test.yaml:6:31: rule_sets.s[0].rate_limit.rate: required: tokens per second, greater than 0`,
			`test.yaml:6:43: rule_sets.s[0].rate_limit: applies to action: rate_limit only, and this rule's action is deny`,
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := Parse("test.yaml", []byte(tt.src), Overrides{})
			if c != nil || err == nil {
				t.Fatalf("parsed:\n%s", tt.src)
			}
			var got []string
			var errs Errors
			if !errors.As(err, &errs) {
				t.Fatalf("error %v (%T) is not an Errors", err, err)
			}
			for _, e := range errs {
				got = append(got, e.Error())
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("got\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(tt.want, "\n"))
			}
		})
	}
}

func TestErrorsOrderedByLine(t *testing.T) {
	// Decode errors and validation errors are found in separate passes;
	// the result must still read top to bottom, and the same every time.
	src := "log: {level: nope}\n" + // 1: validation
		"listen: {port: x}\n" + // 2: decode
		"intercept:\n  destinations: [10.0.0.0/8]\n  ports: [0]\n" + // 5: decode
		"admin: {listen: bad}\n" + // 6: validation
		"bogus: 1\n" // 7: decode
	var first string
	for i := range 20 {
		_, err := Parse("f.yaml", []byte(src), Overrides{})
		if err == nil {
			t.Fatal("no error")
		}
		if i == 0 {
			first = err.Error()
			continue
		}
		if err.Error() != first {
			t.Fatalf("run %d differs:\n%s\nvs\n%s", i, err, first)
		}
	}
	var errs Errors
	_, err := Parse("f.yaml", []byte(src), Overrides{})
	errors.As(err, &errs)
	var lines []int
	for _, e := range errs {
		lines = append(lines, e.Line)
	}
	if want := []int{1, 2, 5, 6, 7}; !reflect.DeepEqual(lines, want) {
		t.Errorf("lines = %v, want %v\n%v", lines, want, err)
	}
}

func TestErrorString(t *testing.T) {
	tests := []struct {
		name string
		err  *Error
		want string
	}{
		{name: "everything", err: &Error{File: "a.yaml", Line: 3, Column: 5, Key: "listen.port", Msg: "bad"}, want: "a.yaml:3:5: listen.port: bad"},
		{name: "no column", err: &Error{File: "a.yaml", Line: 3, Key: "k", Msg: "bad"}, want: "a.yaml:3: k: bad"},
		{name: "no line", err: &Error{File: "a.yaml", Key: "k", Msg: "bad"}, want: "a.yaml: k: bad"},
		{name: "no key", err: &Error{File: "a.yaml", Line: 1, Column: 1, Msg: "bad"}, want: "a.yaml:1:1: bad"},
		{name: "no file", err: &Error{Line: 2, Column: 1, Key: "k", Msg: "bad"}, want: "2:1: k: bad"},
		{name: "message only", err: &Error{Msg: "bad"}, want: "bad"},
		{name: "command line", err: &Error{File: "--mechanism", Msg: "bad"}, want: "--mechanism: bad"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.err.Error(); got != tt.want {
				t.Errorf("got %q, want %q", got, tt.want)
			}
		})
	}
	errs := Errors{tests[0].err, tests[5].err}
	if got, want := errs.Error(), "a.yaml:3:5: listen.port: bad\nbad"; got != want {
		t.Errorf("Errors.Error() = %q, want %q", got, want)
	}
}

func TestLoad(t *testing.T) {
	t.Run("missing file is an os error", func(t *testing.T) {
		_, err := Load(filepath.Join(t.TempDir(), "nope.yaml"), Overrides{})
		if !errors.Is(err, fs.ErrNotExist) {
			t.Fatalf("err = %v, want fs.ErrNotExist", err)
		}
		var errs Errors
		if errors.As(err, &errs) {
			t.Error("an I/O error must not be an Errors")
		}
	})
	t.Run("content errors carry the path", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "bad.yaml")
		if err := os.WriteFile(path, []byte("listen: {port: 0}\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		_, err := Load(path, Overrides{})
		var e *Error
		if !errors.As(err, &e) {
			t.Fatalf("err = %v, want an *Error inside", err)
		}
		if e.File != path {
			t.Errorf("File = %q, want %q", e.File, path)
		}
	})
	t.Run("lab routes", func(t *testing.T) {
		c, err := Load("testdata/lab-routes.yaml", Overrides{})
		if err != nil {
			t.Fatal(err)
		}
		// Relative to testdata/, where the file is.
		if c.CA.Dir != ".lab/appliance-ca" || !reflect.DeepEqual(c.Upstream.ExtraCAs, []string{".lab/pki/server-ca.pem"}) {
			t.Errorf("paths = %q, %q", c.CA.Dir, c.Upstream.ExtraCAs)
		}
		type route struct {
			name, tls string
			level     int
			ruleSet   string
			dev       bool
		}
		var got []route
		for _, r := range c.Routes {
			got = append(got, route{r.Name, r.TLS, *r.Level, r.RuleSet, r.Development})
		}
		want := []route{{"lab-terminate", "terminate", 1, "lab", false}, {"lab-passthrough", "passthrough", 0, "", false}, {"lab-plaintext", "plaintext", 1, "lab", true}}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("routes = %+v\nwant %+v", got, want)
		}
		if !reflect.DeepEqual(c.RuleSetOrder, []string{"lab"}) || len(c.RuleSets["lab"]) != 2 {
			t.Fatalf("rule sets = %+v", c.RuleSets)
		}
		deny, rate := c.RuleSets["lab"][0], c.RuleSets["lab"][1]
		file := "testdata/lab-routes.yaml"
		if deny.When != `mcp.method == "tools/call" && mcp.name.startsWith("denied_")` || deny.WhenPos != (Pos{file, 29, 14}) ||
			deny.Action != ActionDeny || deny.Reason != "tools named denied_* are blocked in the lab" || deny.Line != 28 || deny.Column != 7 {
			t.Errorf("deny rule = %+v", deny)
		}
		if rate.WhenPos != (Pos{file, 33, 13}) || rate.KeyPos != (Pos{file, 35, 25}) ||
			rate.RateLimit == nil || *rate.RateLimit != (RateLimit{Key: "client.address", Rate: 50, Burst: 200, MaxKeys: DefaultRateLimitKeys}) {
			t.Errorf("rate rule = %+v %+v", rate, rate.RateLimit)
		}
	})
	t.Run("path is recorded", func(t *testing.T) {
		c, err := Load("testdata/lab.yaml", Overrides{})
		if err != nil {
			t.Fatal(err)
		}
		if c.Path != "testdata/lab.yaml" {
			t.Errorf("Path = %q", c.Path)
		}
	})
}

// TestGolden parses every example under testdata/ and compares the effective
// configuration (defaults included) or the error report with a golden file.
func TestGolden(t *testing.T) {
	files, err := filepath.Glob("testdata/*.yaml")
	if err != nil || len(files) == 0 {
		t.Fatalf("no testdata: %v", err)
	}
	for _, f := range files {
		name := strings.TrimSuffix(filepath.Base(f), ".yaml")
		t.Run(name, func(t *testing.T) {
			var got []byte
			c, err := Load(f, Overrides{})
			switch {
			case name == "invalid":
				if err == nil {
					t.Fatal("invalid.yaml parsed")
				}
				got = []byte(err.Error() + "\n")
			case err != nil:
				t.Fatal(err)
			default:
				if got, err = yaml.Marshal(c); err != nil {
					t.Fatal(err)
				}
			}
			golden := filepath.Join("testdata", "golden", name+".golden")
			if *update {
				if err := os.WriteFile(golden, got, 0o644); err != nil {
					t.Fatal(err)
				}
				return
			}
			want, err := os.ReadFile(golden)
			if err != nil {
				t.Fatalf("%v (run with -update to create it)", err)
			}
			if string(got) != string(want) {
				t.Errorf("output differs from %s (run with -update to accept):\ngot:\n%s\nwant:\n%s", golden, got, want)
			}
		})
	}
}

func TestFullExampleUsesEveryKey(t *testing.T) {
	// full.yaml documents the schema; it must not fall behind it.
	data, err := os.ReadFile("testdata/full.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var file map[string]any
	if err := yaml.Unmarshal(data, &file); err != nil {
		t.Fatal(err)
	}
	schema, err := yaml.Marshal(Default(NftablesTProxy))
	if err != nil {
		t.Fatal(err)
	}
	var keys map[string]any
	if err := yaml.Unmarshal(schema, &keys); err != nil {
		t.Fatal(err)
	}
	for top, v := range keys {
		fv, ok := file[top]
		if !ok {
			t.Errorf("full.yaml lacks %s", top)
			continue
		}
		if sub, ok := v.(map[string]any); ok {
			fsub, _ := fv.(map[string]any)
			for k := range sub {
				if _, ok := fsub[k]; !ok {
					t.Errorf("full.yaml lacks %s.%s", top, k)
				}
			}
		}
	}
	// And every value differs from its default, so the golden output
	// proves each key is read.
	c, err := Load("testdata/full.yaml", Overrides{})
	if err != nil {
		t.Fatal(err)
	}
	d := Default(c.Mechanism)
	for _, f := range []struct {
		key       string
		got, dflt any
	}{
		{"mechanism", c.Mechanism, NftablesTProxy},
		{"listen.port", c.Listen.Port, d.Listen.Port},
		{"inbound.ports", c.Inbound.Ports, d.Inbound.Ports},
		{"inbound.addresses", c.Inbound.Addresses, d.Inbound.Addresses},
		{"inbound.listen_port", c.Inbound.ListenPort, d.Inbound.ListenPort},
		{"inbound.tls", c.Inbound.TLS, d.Inbound.TLS},
		{"intercept.local", *c.Intercept.Local, *d.Intercept.Local},
		{"steering.mark", c.Steering.Mark, d.Steering.Mark},
		{"steering.bypass_mark", c.Steering.BypassMark, d.Steering.BypassMark},
		{"steering.route_table", c.Steering.RouteTable, d.Steering.RouteTable},
		{"steering.rule_priority", c.Steering.RulePriority, d.Steering.RulePriority},
		{"external.original_dst", c.External.OriginalDst, d.External.OriginalDst},
		{"limits.max_flows", c.Limits.MaxFlows, d.Limits.MaxFlows},
		{"limits.max_flows_per_client", c.Limits.MaxFlowsPerClient, d.Limits.MaxFlowsPerClient},
		{"limits.idle_timeout", c.Limits.IdleTimeout, d.Limits.IdleTimeout},
		{"limits.body_timeout", c.Limits.BodyTimeout, d.Limits.BodyTimeout},
		{"default_route", c.DefaultRoute, d.DefaultRoute},
		{"limits.connect_timeout", c.Limits.ConnectTimeout, d.Limits.ConnectTimeout},
		{"limits.drain_timeout", c.Limits.DrainTimeout, d.Limits.DrainTimeout},
		{"admin.listen", c.Admin.Listen, d.Admin.Listen},
		{"log.level", c.Log.Level, d.Log.Level},
		{"log.flows", c.Log.Flows, d.Log.Flows},
		// The defaults of a flow log file (Default logs to stdout, which has no rotation).
		{"log.flows_max_size", c.Log.FlowsMaxSize, int64(DefaultFlowsMaxSize)},
		{"log.flows_max_files", c.Log.FlowsMaxFiles, DefaultFlowsMaxFiles},
		{"ebpf.cgroup", c.EBPF.Cgroup, d.EBPF.Cgroup},
		{"ca.dir", c.CA.Dir, d.CA.Dir},
		{"audit.dir", c.Audit.Dir, d.Audit.Dir},
		{"audit.fail", c.Audit.Fail, d.Audit.Fail},
		{"audit.timeout", c.Audit.Timeout, d.Audit.Timeout},
		{"audit.segment_bytes", c.Audit.SegmentBytes, d.Audit.SegmentBytes},
		{"audit.retain_segments", c.Audit.RetainSegments, d.Audit.RetainSegments},
		{"audit.retain_age", c.Audit.RetainAge, d.Audit.RetainAge},
		{"audit.checkpoint_every", c.Audit.CheckpointEvery, d.Audit.CheckpointEvery},
		{"tokens.clock_skew", c.Tokens.ClockSkew, d.Tokens.ClockSkew},
		{"tool_integrity.dir", c.ToolIntegrity.Dir, d.ToolIntegrity.Dir},
		{"tool_integrity.pin_file", c.ToolIntegrity.PinFile, d.ToolIntegrity.PinFile},
		{"tool_integrity.max_tools", c.ToolIntegrity.MaxTools, d.ToolIntegrity.MaxTools},
		{"tool_integrity.divergence_window", c.ToolIntegrity.DivergenceWindow, d.ToolIntegrity.DivergenceWindow},
		{"tool_integrity.patterns", c.ToolIntegrity.Patterns, d.ToolIntegrity.Patterns},
		{"tokens.opaque_tokens", c.Tokens.OpaqueTokens, d.Tokens.OpaqueTokens},
		{"tokens.introspection", c.Tokens.Introspection, d.Tokens.Introspection},
		{"tokens.max_header", c.Tokens.MaxHeader, d.Tokens.MaxHeader},
		{"tokens.issuers", c.Tokens.Issuers, d.Tokens.Issuers},
		{"dns.ttl", c.DNS.TTL, d.DNS.TTL},
		{"dns.hold", c.DNS.Hold, d.DNS.Hold},
		{"dns.quarantine", c.DNS.Quarantine, d.DNS.Quarantine},
		{"dns.state_dir", c.DNS.StateDir, d.DNS.StateDir},
		{"dns.max_names", c.DNS.MaxNames, d.DNS.MaxNames},
		{"dns.cache_size", c.DNS.CacheSize, d.DNS.CacheSize},
		{"dns.client_rate", c.DNS.ClientRate, d.DNS.ClientRate},
		{"dns.client_burst", c.DNS.ClientBurst, d.DNS.ClientBurst},
		{"dns.timeout", c.DNS.Timeout, d.DNS.Timeout},
		{"dns.vip_assignment", c.DNS.VIPAssignment, d.DNS.VIPAssignment},
		{"upstream_deny", c.UpstreamDeny, d.UpstreamDeny},
		{"upstream_tls.extra_cas", c.Upstream.ExtraCAs, d.Upstream.ExtraCAs},
		{"upstream_tls.handshake_timeout", c.Upstream.HandshakeTimeout, d.Upstream.HandshakeTimeout},
		{"tls.peek_timeout", c.TLS.PeekTimeout, d.TLS.PeekTimeout},
		{"tls.max_client_hello", c.TLS.MaxClientHello, d.TLS.MaxClientHello},
		{"tls.leaf_cache", c.TLS.LeafCache, d.TLS.LeafCache},
		{"tls.leaf_validity", c.TLS.LeafValidity, d.TLS.LeafValidity},
		{"http.max_header_bytes", c.HTTP.MaxHeaderBytes, d.HTTP.MaxHeaderBytes},
		{"http.header_timeout", c.HTTP.HeaderTimeout, d.HTTP.HeaderTimeout},
	} {
		if reflect.DeepEqual(f.got, f.dflt) {
			t.Errorf("full.yaml sets %s to its default %v", f.key, f.got)
		}
	}

	// Routes and rules are lists, which the loops above only see exist:
	// each of their keys must be set in some entry, to something other
	// than its default in some entry.
	entryKeys := func(v any) map[string]any {
		out, err := yaml.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		var keys map[string]any
		if err := yaml.Unmarshal(out, &keys); err != nil {
			t.Fatal(err)
		}
		return keys
	}
	covers := func(what string, entries []any, keys map[string]any) {
		for k, v := range keys {
			found, foundSub := false, map[string]bool{}
			for _, e := range entries {
				m, _ := e.(map[string]any)
				if _, ok := m[k]; ok {
					found = true
					sub, _ := m[k].(map[string]any)
					for sk := range sub {
						foundSub[sk] = true
					}
				}
			}
			if !found {
				t.Errorf("no entry of full.yaml's %s sets %s", what, k)
			}
			if sub, ok := v.(map[string]any); ok {
				for sk := range sub {
					if !foundSub[sk] {
						t.Errorf("no entry of full.yaml's %s sets %s.%s", what, k, sk)
					}
				}
			}
		}
	}
	routes, _ := file["routes"].([]any)
	covers("routes", routes, entryKeys(Route{}))
	var rules []any
	sets, _ := file["rule_sets"].(map[string]any)
	for _, set := range sets {
		list, _ := set.([]any)
		rules = append(rules, list...)
	}
	covers("rules", rules, entryKeys(Rule{RateLimit: &RateLimit{}}))

	type seen struct{ match, level, mismatch, ruleErr, dev, plain, strict, upgrade, set bool }
	var r seen
	for _, x := range c.Routes {
		m := x.Match
		r.match = r.match || len(m.Destinations) > 0 && len(m.Ports) > 0 && len(m.SNI) > 0 && len(m.Clients) > 0
		r.level = r.level || *x.Level != (Route{TLS: x.TLS}).LevelOrDefault()
		r.mismatch = r.mismatch || (x.OnMismatch == OnMismatchClose) != (*x.Level >= 1)
		r.ruleErr = r.ruleErr || x.OnRuleError != OnRuleErrorClosed
		r.dev = r.dev || x.Development
		r.plain = r.plain || x.PlaintextUpstreamTrustedNetwork
		r.strict = r.strict || x.StrictMCPHeaders
		r.upgrade = r.upgrade || len(x.AllowUpgrade) > 0
		r.set = r.set || x.RuleSet != ""
	}
	if r != (seen{true, true, true, true, true, true, true, true, true}) {
		t.Errorf("some route key never leaves its default in full.yaml (false below): %+v", r)
	}
	var when, reason, limit, maxKeys, actions = false, false, false, false, map[string]bool{}
	for _, name := range c.RuleSetOrder {
		for _, x := range c.RuleSets[name] {
			when, reason, limit = when || x.When != "", reason || x.Reason != "", limit || x.RateLimit != nil
			maxKeys = maxKeys || x.RateLimit != nil && x.RateLimit.MaxKeys != DefaultRateLimitKeys
			actions[x.Action] = true
		}
	}
	if !when || !reason || !limit || !maxKeys || len(actions) != 3 {
		t.Errorf("full.yaml's rules leave a key at its default: when %v, reason %v, rate_limit %v, max_keys %v, actions %v", when, reason, limit, maxKeys, actions)
	}
}

func TestDefault(t *testing.T) {
	dest := []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}
	ports := []PortRange{{443, 443}}
	tests := []struct {
		name    string
		m       Mechanism
		wantErr string // "" = valid once destinations and ports are filled
	}{
		{name: "nftables-tproxy", m: NftablesTProxy},
		{name: "iptables-redirect", m: IptablesRedirect},
		{name: "external needs addresses", m: External, wantErr: "listen.addresses: required"},
		{name: "dns needs its section", m: DNS, wantErr: `dns.listen: required with mechanism dns`},
		{name: "unknown", m: "nope", wantErr: "unknown mechanism"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := Default(tt.m)
			if c.Mechanism != tt.m {
				t.Errorf("Mechanism = %q", c.Mechanism)
			}
			// dns steers its VIP pools: destinations are optional there.
			if err := c.Validate(); tt.m != DNS && (err == nil || !strings.Contains(err.Error(), "intercept.destinations")) {
				t.Errorf("Default without destinations validated: %v", err)
			}
			c.Intercept.Destinations, c.Intercept.Ports = dest, ports
			err := c.Validate()
			switch {
			case tt.wantErr == "" && err != nil:
				t.Errorf("Validate: %v", err)
			case tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)):
				t.Errorf("Validate = %v, want %q", err, tt.wantErr)
			}
		})
	}
	t.Run("ebpf validates with only a cgroup filled in", func(t *testing.T) {
		c := Default(EBPF)
		err := c.Validate()
		if err == nil || err.Error() != "ebpf.cgroup: mechanism ebpf needs ebpf.cgroup (a cgroup v2 directory), or use `mcpintercept exec`" {
			t.Errorf("Validate without a cgroup = %v", err)
		}
		c.EBPF.Cgroup = "/sys/fs/cgroup/user.slice/mcpi-exec.scope"
		if err := c.Validate(); err != nil {
			t.Errorf("Validate: %v", err)
		}
		if got, want := c.Listen.Addresses, DefaultAddresses(NftablesTProxy); !reflect.DeepEqual(got, want) {
			t.Errorf("addresses = %v, want %v", got, want)
		}
	})
	t.Run("defaults of the TLS, HTTP and CA settings", func(t *testing.T) {
		c := Default(NftablesTProxy)
		want := Config{
			CA:       CAConfig{Dir: "/var/lib/mcpintercept/ca"},
			Upstream: UpstreamTLS{HandshakeTimeout: Duration{10 * time.Second}},
			TLS:      TLSConfig{PeekTimeout: Duration{5 * time.Second}, MaxClientHello: 65536, LeafCache: 1024, LeafValidity: Duration{24 * time.Hour}},
			HTTP:     HTTPConfig{MaxHeaderBytes: 65536, HeaderTimeout: Duration{10 * time.Second}},
		}
		if c.CA != want.CA || !reflect.DeepEqual(c.Upstream, want.Upstream) || c.TLS != want.TLS || c.HTTP != want.HTTP ||
			c.Routes != nil || c.RuleSets != nil || c.RuleSetOrder != nil || c.EBPF != (EBPFConfig{}) {
			t.Errorf("Default = %+v", c)
		}
	})
	t.Run("default marks do not alias", func(t *testing.T) {
		if DefaultMark&DefaultBypassMark != 0 {
			t.Errorf("%#x & %#x != 0", DefaultMark, DefaultBypassMark)
		}
	})
	t.Run("calls do not share slices", func(t *testing.T) {
		a, b := Default(NftablesTProxy), Default(NftablesTProxy)
		a.Listen.Addresses[0] = netip.IPv4Unspecified()
		if b.Listen.Addresses[0] == a.Listen.Addresses[0] {
			t.Error("Default returned shared address slices")
		}
	})
}

func TestValidateInCode(t *testing.T) {
	valid := func() *Config {
		c := Default(NftablesTProxy)
		c.Intercept.Destinations = []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}
		c.Intercept.Ports = []PortRange{{80, 80}}
		return c
	}
	tests := []struct {
		name   string
		modify func(c *Config)
		want   string
	}{
		{name: "valid", modify: func(c *Config) {}},
		{name: "host bits", modify: func(c *Config) {
			c.Intercept.Destinations = []netip.Prefix{netip.MustParsePrefix("10.1.2.3/8")}
		}, want: "intercept.destinations[0]: 10.1.2.3/8 has host bits set; write 10.0.0.0/8"},
		{name: "zero prefix", modify: func(c *Config) { c.Intercept.Destinations = []netip.Prefix{{}} }, want: "intercept.destinations[0]: invalid prefix"},
		{name: "zero address", modify: func(c *Config) { c.Listen.Addresses = []netip.Addr{{}} }, want: "listen.addresses[0]: invalid address"},
		{name: "zero port range", modify: func(c *Config) { c.Intercept.Ports = []PortRange{{0, 5}} }, want: "intercept.ports[0]: port 0-5"},
		{name: "backwards range", modify: func(c *Config) { c.Intercept.Ports = []PortRange{{9, 5}} }, want: "backwards"},
		{name: "path names the file", modify: func(c *Config) { c.Path = "x.yaml"; c.Log.Level = "" }, want: "x.yaml: log.level: unknown level"},
		{name: "zero value config", modify: func(c *Config) { *c = Config{} }, want: "mechanism: must not be empty"},
		{name: "valid routes and rule sets, levels left to LevelOrDefault", modify: func(c *Config) {
			c.Routes = []Route{
				{Name: "p", TLS: TLSPassthrough, OnMismatch: OnMismatchPassthrough, OnRuleError: OnRuleErrorClosed, RuleSet: "conn"},
				{Name: "t", TLS: TLSTerminate, OnMismatch: OnMismatchClose, OnRuleError: OnRuleErrorOpen, StrictMCPHeaders: true, RuleSet: "http", AllowUpgrade: []string{"websocket", UpgradeConnect}},
			}
			c.RuleSets = map[string][]Rule{
				"http": {{Name: "r", Action: ActionRateLimit, RateLimit: &RateLimit{Key: "client.address", Rate: 0.5, Burst: 1, MaxKeys: 1}}},
				"conn": {{Name: "r", Action: ActionDeny, When: "conn.orig_port == 1"}},
			}
			c.RuleSetOrder = []string{"http", "conn"}
		}},
		{name: "passthrough route's default level has no headers", modify: func(c *Config) {
			c.Routes = []Route{{Name: "p", TLS: TLSPassthrough, OnMismatch: OnMismatchPassthrough, OnRuleError: OnRuleErrorClosed, StrictMCPHeaders: true}}
		}, want: "routes[0].strict_mcp_headers: needs level 1"},
		{name: "passthrough route's default level reads no methods", modify: func(c *Config) {
			c.Routes = []Route{{Name: "p", TLS: TLSPassthrough, OnMismatch: OnMismatchPassthrough, OnRuleError: OnRuleErrorClosed, HTTPMethods: []string{"POST"}}}
		}, want: "routes[0].http_methods: needs level 1"},
		{name: "an empty http_methods is fine at level 0", modify: func(c *Config) {
			c.Routes = []Route{{Name: "p", TLS: TLSPassthrough, OnMismatch: OnMismatchPassthrough, OnRuleError: OnRuleErrorClosed, HTTPMethods: []string{}}}
		}},
		{name: "http_methods with a dash", modify: func(c *Config) {
			c.Routes = []Route{{Name: "t", TLS: TLSTerminate, OnMismatch: OnMismatchClose, OnRuleError: OnRuleErrorClosed, HTTPMethods: []string{"M-SEARCH", "-X"}}}
		}, want: `routes[0].http_methods[1]: "-X" is not an HTTP method in upper case`},
		{name: "route without on_mismatch", modify: func(c *Config) {
			c.Routes = []Route{{Name: "p", TLS: TLSPassthrough}}
		}, want: "routes[0].on_mismatch: must not be empty"},
		{name: "upper-case SNI", modify: func(c *Config) {
			c.Routes = []Route{{Name: "t", TLS: TLSTerminate, OnMismatch: OnMismatchClose, OnRuleError: OnRuleErrorClosed, Match: RouteMatch{SNI: []string{"Example.com"}}}}
		}, want: `routes[0].match.sni[0]: "Example.com" must be lower case`},
		{name: "route prefixes with host bits", modify: func(c *Config) {
			c.Routes = []Route{{Name: "t", TLS: TLSTerminate, OnMismatch: OnMismatchClose, OnRuleError: OnRuleErrorClosed, Match: RouteMatch{Clients: []netip.Prefix{netip.MustParsePrefix("10.1.2.3/8")}}}}
		}, want: "routes[0].match.clients[0]: 10.1.2.3/8 has host bits set"},
		{name: "rule sets without RuleSetOrder", modify: func(c *Config) {
			c.RuleSets = map[string][]Rule{"s": nil}
		}, want: "rule_sets: RuleSetOrder must name every rule set exactly once"},
		{name: "RuleSetOrder names a missing set", modify: func(c *Config) {
			c.RuleSets = map[string][]Rule{"s": nil}
			c.RuleSetOrder = []string{"s", "t"}
		}, want: "RuleSetOrder must name every rule set exactly once"},
		{name: "RuleSetOrder repeats a set", modify: func(c *Config) {
			c.RuleSets = map[string][]Rule{"s": nil}
			c.RuleSetOrder = []string{"s", "s"}
		}, want: "RuleSetOrder must name every rule set exactly once"},
		{name: "reason that is not UTF-8", modify: func(c *Config) {
			c.RuleSets = map[string][]Rule{"s": {{Name: "r", Action: ActionDeny, Reason: "\xff"}}}
			c.RuleSetOrder = []string{"s"}
		}, want: "rule_sets.s[0].reason: is not valid UTF-8"},
		{name: "NaN rate", modify: func(c *Config) {
			c.RuleSets = map[string][]Rule{"s": {{Name: "r", Action: ActionRateLimit, RateLimit: &RateLimit{Key: "k", Rate: math.NaN(), Burst: 1, MaxKeys: 1}}}}
			c.RuleSetOrder = []string{"s"}
		}, want: "rule_sets.s[0].rate_limit.rate: must be a positive number of tokens per second, got NaN"},
		{name: "negative burst", modify: func(c *Config) {
			c.RuleSets = map[string][]Rule{"s": {{Name: "r", Action: ActionRateLimit, RateLimit: &RateLimit{Key: "k", Rate: 1, Burst: -1, MaxKeys: 1}}}}
			c.RuleSetOrder = []string{"s"}
		}, want: "rule_sets.s[0].rate_limit.burst: must be between 1 and 2147483647, got -1"},
		{name: "odd rule set names are quoted in keys", modify: func(c *Config) {
			c.RuleSets = map[string][]Rule{"a b": nil}
			c.RuleSetOrder = []string{"a b"}
		}, want: `rule_sets."a b": invalid name "a b"`},
		{name: "zero body timeout", modify: func(c *Config) { c.Limits.BodyTimeout = Duration{} }, want: "limits.body_timeout: must be greater than 0, got 0s"},
		{name: "route without on_rule_error", modify: func(c *Config) {
			c.Routes = []Route{{Name: "t", TLS: TLSTerminate, OnMismatch: OnMismatchClose}}
		}, want: "routes[0].on_rule_error: must not be empty (valid: closed, open)"},
		{name: "upper-case upgrade token", modify: func(c *Config) {
			c.Routes = []Route{{Name: "t", TLS: TLSTerminate, OnMismatch: OnMismatchClose, OnRuleError: OnRuleErrorClosed, AllowUpgrade: []string{"WebSocket"}}}
		}, want: `routes[0].allow_upgrade[0]: "WebSocket" must be lower case`},
		{name: "h2c on a level 1 route built in code", modify: func(c *Config) {
			c.Routes = []Route{{Name: "t", TLS: TLSPlaintext, OnMismatch: OnMismatchClose, OnRuleError: OnRuleErrorClosed, AllowUpgrade: []string{UpgradeH2C}}}
		}, want: "routes[0].allow_upgrade[0]: h2c is never allowed through a Level 1 route"},
		{name: "rate limit without max_keys", modify: func(c *Config) {
			c.RuleSets = map[string][]Rule{"s": {{Name: "r", Action: ActionRateLimit, RateLimit: &RateLimit{Key: "k", Rate: 1, Burst: 1}}}}
			c.RuleSetOrder = []string{"s"}
		}, want: "rule_sets.s[0].rate_limit.max_keys: must be between 1 and 1000000, got 0"},
		{name: "default route close", modify: func(c *Config) { c.DefaultRoute = &DefaultRoute{Close: true} }},
		{name: "default route opaque", modify: func(c *Config) { c.DefaultRoute = &DefaultRoute{} }},
		{name: "default route without a name is fine in code", modify: func(c *Config) {
			c.DefaultRoute = &DefaultRoute{Route: &Route{TLS: TLSTerminate, OnMismatch: OnMismatchClose, OnRuleError: OnRuleErrorOpen, AllowUpgrade: []string{"websocket"}}}
		}},
		{name: "default route close and a route", modify: func(c *Config) {
			c.DefaultRoute = &DefaultRoute{Close: true, Route: &Route{TLS: TLSTerminate, OnMismatch: OnMismatchClose, OnRuleError: OnRuleErrorClosed}}
		}, want: "default_route: Close and Route are exclusive"},
		{name: "default route with a match", modify: func(c *Config) {
			c.DefaultRoute = &DefaultRoute{Route: &Route{TLS: TLSTerminate, OnMismatch: OnMismatchClose, OnRuleError: OnRuleErrorClosed, Match: RouteMatch{Ports: []PortRange{{1, 1}}}}}
		}, want: "default_route.match: default_route takes no match"},
		{name: "default route validated like a route", modify: func(c *Config) {
			c.DefaultRoute = &DefaultRoute{Route: &Route{TLS: TLSPassthrough, OnMismatch: OnMismatchClose, OnRuleError: OnRuleErrorClosed, AllowUpgrade: []string{"websocket"}}}
		}, want: "default_route.allow_upgrade: only meaningful with level >= 1"},
		{name: "zero TLS and HTTP settings", modify: func(c *Config) { c.TLS, c.HTTP = TLSConfig{}, HTTPConfig{} }, want: "tls.peek_timeout: must be greater than 0"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := valid()
			tt.modify(c)
			err := c.Validate()
			if tt.want == "" {
				if err != nil {
					t.Fatalf("Validate: %v", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("Validate = %v, want %q", err, tt.want)
			}
			var errs Errors
			if !errors.As(err, &errs) {
				t.Fatalf("%T is not Errors", err)
			}
			for _, e := range errs {
				if e.Line != 0 {
					t.Errorf("in-code error has a line: %v", e)
				}
			}
		})
	}
}

func TestPortRange(t *testing.T) {
	tests := []struct {
		name string
		r    PortRange
		str  string
		in   []uint16
		out  []uint16
	}{
		{name: "single", r: PortRange{8080, 8080}, str: "8080", in: []uint16{8080}, out: []uint16{8079, 8081}},
		{name: "range", r: PortRange{3000, 3010}, str: "3000-3010", in: []uint16{3000, 3005, 3010}, out: []uint16{2999, 3011}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.r.String(); got != tt.str {
				t.Errorf("String() = %q, want %q", got, tt.str)
			}
			for _, p := range tt.in {
				if !tt.r.Contains(p) {
					t.Errorf("Contains(%d) = false", p)
				}
			}
			for _, p := range tt.out {
				if tt.r.Contains(p) {
					t.Errorf("Contains(%d) = true", p)
				}
			}
			var back PortRange
			b, _ := yaml.Marshal(tt.r)
			if err := yaml.Unmarshal(b, &back); err != nil || back != tt.r {
				t.Errorf("yaml round trip = %v, %v", back, err)
			}
		})
	}
}

func TestDurationYAML(t *testing.T) {
	tests := []struct {
		name    string
		src     string
		want    time.Duration
		wantErr bool
	}{
		{name: "minutes", src: "1m30s", want: 90 * time.Second},
		{name: "zero", src: "0", want: 0},
		{name: "no unit", src: "30", wantErr: true},
		{name: "list", src: "[1s]", wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var d Duration
			err := yaml.Unmarshal([]byte(tt.src), &d)
			if (err != nil) != tt.wantErr || d.Duration != tt.want {
				t.Errorf("got %v, %v", d, err)
			}
		})
	}
}

// TestMarshalRoundTrip checks that a loaded config written back out as YAML
// loads to the same value, so a future `check --print` cannot drift.
func TestMarshalRoundTrip(t *testing.T) {
	for _, f := range []string{"testdata/lab.yaml", "testdata/lab-routes.yaml", "testdata/full.yaml", "testdata/minimal.yaml"} {
		t.Run(filepath.Base(f), func(t *testing.T) {
			c, err := Load(f, Overrides{})
			if err != nil {
				t.Fatal(err)
			}
			roundTrip(t, c)
		})
	}
}

// TestMarshalAwkwardExpressions covers the strings yaml.v3 writes as block
// scalars it cannot read back; Rule and RateLimit double-quote them.
func TestMarshalAwkwardExpressions(t *testing.T) {
	for _, expr := range []string{"  x\n", "\nx\n", "\tx\ny", " x\ny", "\u2028x\n", "x\n  y\n", "x\n\ty", "  x", "true", "no", "1:20", ""} {
		t.Run(strconv.Quote(expr), func(t *testing.T) {
			c := Default(NftablesTProxy)
			c.Intercept.Destinations = []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}
			c.Intercept.Ports = []PortRange{{80, 80}}
			c.RuleSets = map[string][]Rule{"s": {
				{Name: "w", When: expr, Action: ActionDeny},
				{Name: "k", Action: ActionRateLimit, RateLimit: &RateLimit{Key: expr + "k", Rate: 1.5, Burst: 2, MaxKeys: 7}},
			}}
			c.RuleSetOrder = []string{"s"}
			if err := c.Validate(); err != nil {
				t.Fatal(err)
			}
			roundTrip(t, c)
		})
	}
	t.Run("plain expressions read like a hand-written file", func(t *testing.T) {
		out, err := yaml.Marshal(Rule{Name: "r", When: "a ==\n  b\n", Action: ActionRateLimit, RateLimit: &RateLimit{Key: "client.address", Rate: 50, Burst: 3, MaxKeys: 9}})
		if err != nil {
			t.Fatal(err)
		}
		want := "name: r\nwhen: |\n    a ==\n      b\naction: rate_limit\nreason: \"\"\nrate_limit:\n    key: client.address\n    rate: 50\n    burst: 3\n    max_keys: 9\n"
		if string(out) != want {
			t.Errorf("got\n%s\nwant\n%s", out, want)
		}
	})
}

func roundTrip(t *testing.T, c *Config) {
	t.Helper()
	out, err := yaml.Marshal(c)
	if err != nil {
		t.Fatalf("marshal: %v", err)
	}
	// Parsed without a name: the paths in out are already resolved
	// against the directory of c.Path, and must not be resolved twice.
	back, err := Parse("", out, Overrides{})
	if err != nil {
		t.Fatalf("re-parse: %v\n%s", err, out)
	}
	if got, want := normalized(back), normalized(c); !reflect.DeepEqual(got, want) {
		t.Fatalf("round trip changed the config:\n%+v\n%+v\n%s", want, got, out)
	}
}

// normalized drops what a written-out config cannot carry: the file name,
// positions in the file, and the order of the rule sets (YAML writes a map
// sorted).
func normalized(c *Config) *Config {
	out := *c
	out.Path = ""
	out.Routes = slices.Clone(c.Routes)
	for i := range out.Routes {
		out.Routes[i].Line, out.Routes[i].Column = 0, 0
	}
	if d := c.DefaultRoute; d != nil && d.Route != nil {
		r := *d.Route
		r.Line, r.Column = 0, 0
		out.DefaultRoute = &DefaultRoute{Close: d.Close, Route: &r}
	}
	if c.RuleSets != nil {
		out.RuleSets = map[string][]Rule{}
		for name, rules := range c.RuleSets {
			rules = slices.Clone(rules)
			for i := range rules {
				rules[i].Line, rules[i].Column, rules[i].WhenPos, rules[i].KeyPos = 0, 0, Pos{}, Pos{}
			}
			out.RuleSets[name] = rules
		}
	}
	out.RuleSetOrder = slices.Sorted(slices.Values(c.RuleSetOrder))
	return &out
}

func TestPathsResolvedAgainstTheConfigFile(t *testing.T) {
	src := minimal + "ca: {dir: ca}\nupstream_tls: {extra_cas: [../pki/a.pem, /etc/b.pem, ./c.pem]}\n"
	tests := []struct {
		name    string
		file    string
		dir     string
		extraCA []string
	}{
		{name: "absolute config path", file: "/etc/mcpintercept/config.yaml", dir: "/etc/mcpintercept/ca", extraCA: []string{"/etc/pki/a.pem", "/etc/b.pem", "/etc/mcpintercept/c.pem"}},
		{name: "relative config path", file: "conf/mcpi.yaml", dir: "conf/ca", extraCA: []string{"pki/a.pem", "/etc/b.pem", "conf/c.pem"}},
		{name: "config in the working directory", file: "mcpi.yaml", dir: "ca", extraCA: []string{"../pki/a.pem", "/etc/b.pem", "c.pem"}},
		{name: "no file name: left as written", file: "", dir: "ca", extraCA: []string{"../pki/a.pem", "/etc/b.pem", "./c.pem"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := Parse(tt.file, []byte(src), Overrides{})
			if err != nil {
				t.Fatal(err)
			}
			if c.CA.Dir != tt.dir || !reflect.DeepEqual(c.Upstream.ExtraCAs, tt.extraCA) {
				t.Errorf("ca.dir = %q, extra_cas = %q\nwant %q, %q", c.CA.Dir, c.Upstream.ExtraCAs, tt.dir, tt.extraCA)
			}
		})
	}
	t.Run("the default is absolute and stays", func(t *testing.T) {
		c, err := Parse("conf/mcpi.yaml", []byte(minimal), Overrides{})
		if err != nil {
			t.Fatal(err)
		}
		if c.CA.Dir != DefaultCADir {
			t.Errorf("ca.dir = %q", c.CA.Dir)
		}
	})
	t.Run("missing files are not an error", func(t *testing.T) {
		mustParse(t, minimal+"upstream_tls: {extra_cas: [/nonexistent/ca.pem]}\nca: {dir: /nonexistent/ca}\n", Overrides{})
	})
}

func TestLevelOrDefault(t *testing.T) {
	one, zero := 1, 0
	tests := []struct {
		name string
		r    Route
		want int
	}{
		{name: "passthrough", r: Route{TLS: TLSPassthrough}, want: 0},
		{name: "terminate", r: Route{TLS: TLSTerminate}, want: 1},
		{name: "plaintext", r: Route{TLS: TLSPlaintext}, want: 1},
		{name: "explicit level wins", r: Route{TLS: TLSTerminate, Level: &zero}, want: 0},
		{name: "explicit level on passthrough is returned as is", r: Route{TLS: TLSPassthrough, Level: &one}, want: 1},
		{name: "no tls yet", r: Route{}, want: 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.r.LevelOrDefault(); got != tt.want {
				t.Errorf("LevelOrDefault() = %d, want %d", got, tt.want)
			}
		})
	}
}

// TestLevel2RouteDefaults: a level 2 route gets the body bound and the oversized-response choice
// filled in; explicit values are kept.
func TestLevel2RouteDefaults(t *testing.T) {
	src := "mechanism: nftables-tproxy\nintercept:\n  destinations: [10.0.0.0/8]\n  ports: [80]\nroutes:\n" +
		"  - {name: a, tls: plaintext, level: 2}\n" +
		"  - {name: b, tls: terminate, level: 2, max_body: 65536, on_oversized_response: forward}\n"
	c, err := Parse("test.yaml", []byte(src), Overrides{})
	if err != nil {
		t.Fatal(err)
	}
	a, b := c.Routes[0], c.Routes[1]
	if a.MaxBody != DefaultMaxBody || a.OnOversizedResponse != OnOversizedClose || a.OnMismatch != OnMismatchClose {
		t.Errorf("defaults: %+v", a)
	}
	if b.MaxBody != 65536 || b.OnOversizedResponse != OnOversizedForward {
		t.Errorf("explicit values: %+v", b)
	}
}
