package config

import (
	"errors"
	"flag"
	"io/fs"
	"net/netip"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"
)

var update = flag.Bool("update", false, "rewrite testdata/golden/ from the current output")

// minimal is the part every valid test file needs; cases append to it.
const minimal = "intercept:\n  destinations: [10.0.0.0/8]\n  ports: [443]\n"

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
		{name: "unclosed flow mapping on line 1", src: "{intercept: {destinations: [10.0.0.0/8], ports: [1]}\n", want: []wantErr{{2, "", "did not find expected ',' or '}'"}}},
		{name: "bad indentation in a block mapping", src: "listen:\n  port: 1\n addresses: []\n", want: []wantErr{{3, "", "did not find expected key"}}},
		{name: "scanner error", src: minimal + "log:\n  level: a: b\n", want: []wantErr{{5, "", "mapping values are not allowed in this context"}}},

		// Keys.
		{name: "unknown top-level key", src: minimal + "listn: {}\n", want: []wantErr{{4, "listn", `unknown key "listn" (valid: mechanism, listen, intercept, steering, external, limits, admin, log)`}}},
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
		{name: "ebpf not available", src: "mechanism: ebpf\n" + minimal, want: []wantErr{{1, "mechanism", `mechanism "ebpf" is not available in this build yet`}}},
		{name: "dns not available", src: minimal + "mechanism: dns\n", want: []wantErr{{4, "mechanism", `mechanism "dns" is not available in this build yet`}}},
		{name: "empty mechanism", src: "mechanism: \"\"\n" + minimal, want: []wantErr{{1, "mechanism", "must not be empty (valid: nftables-tproxy"}}},
		{name: "unknown override", src: minimal, o: Overrides{Mechanism: "bogus"}, want: []wantErr{{0, "", `unknown mechanism "bogus" (valid: nftables-tproxy`}}},
		{name: "unavailable override", src: "mechanism: nftables-tproxy\n" + minimal, o: Overrides{Mechanism: EBPF}, want: []wantErr{{0, "", `"ebpf" is not available`}}},
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
		{"intercept.local", *c.Intercept.Local, *d.Intercept.Local},
		{"steering.mark", c.Steering.Mark, d.Steering.Mark},
		{"steering.bypass_mark", c.Steering.BypassMark, d.Steering.BypassMark},
		{"steering.route_table", c.Steering.RouteTable, d.Steering.RouteTable},
		{"steering.rule_priority", c.Steering.RulePriority, d.Steering.RulePriority},
		{"external.original_dst", c.External.OriginalDst, d.External.OriginalDst},
		{"limits.max_flows", c.Limits.MaxFlows, d.Limits.MaxFlows},
		{"limits.max_flows_per_client", c.Limits.MaxFlowsPerClient, d.Limits.MaxFlowsPerClient},
		{"limits.idle_timeout", c.Limits.IdleTimeout, d.Limits.IdleTimeout},
		{"limits.connect_timeout", c.Limits.ConnectTimeout, d.Limits.ConnectTimeout},
		{"limits.drain_timeout", c.Limits.DrainTimeout, d.Limits.DrainTimeout},
		{"admin.listen", c.Admin.Listen, d.Admin.Listen},
		{"log.level", c.Log.Level, d.Log.Level},
		{"log.flows", c.Log.Flows, d.Log.Flows},
	} {
		if reflect.DeepEqual(f.got, f.dflt) {
			t.Errorf("full.yaml sets %s to its default %v", f.key, f.got)
		}
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
		{name: "ebpf is reserved", m: EBPF, wantErr: `mechanism: mechanism "ebpf" is not available in this build yet`},
		{name: "dns is reserved", m: DNS, wantErr: `mechanism "dns" is not available`},
		{name: "unknown", m: "nope", wantErr: "unknown mechanism"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := Default(tt.m)
			if c.Mechanism != tt.m {
				t.Errorf("Mechanism = %q", c.Mechanism)
			}
			if err := c.Validate(); err == nil || !strings.Contains(err.Error(), "intercept.destinations") {
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
	for _, f := range []string{"testdata/lab.yaml", "testdata/full.yaml", "testdata/minimal.yaml"} {
		t.Run(filepath.Base(f), func(t *testing.T) {
			c, err := Load(f, Overrides{})
			if err != nil {
				t.Fatal(err)
			}
			roundTrip(t, c)
		})
	}
}

func roundTrip(t *testing.T, c *Config) {
	t.Helper()
	out, err := yaml.Marshal(c)
	if err != nil {
		t.Fatalf("marshal: %v", err)
	}
	back, err := Parse(c.Path, out, Overrides{})
	if err != nil {
		t.Fatalf("re-parse: %v\n%s", err, out)
	}
	if !reflect.DeepEqual(back, c) {
		t.Fatalf("round trip changed the config:\n%+v\n%+v\n%s", c, back, out)
	}
}
