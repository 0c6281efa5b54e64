package config

import (
	"errors"
	"net/netip"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestToolIntegrityValid(t *testing.T) {
	tests := []struct {
		name  string
		src   string
		check func(t *testing.T, c *Config)
	}{
		{
			name: "defaults: beside ca.dir, no pin file, 100000, 10m, built-in patterns",
			src:  minimal,
			check: func(t *testing.T, c *Config) {
				ti := c.ToolIntegrity
				if ti.Dir != "/var/lib/mcpintercept/tools" || ti.PinFile != "" || ti.MaxTools != 100_000 ||
					ti.DivergenceWindow.Duration != 10*time.Minute || ti.Patterns != nil {
					t.Errorf("tool_integrity = %+v", ti)
				}
				if c.ToolPinsOn() {
					t.Error("ToolPinsOn() with no route pinning")
				}
			},
		},
		{
			name: "default dir follows ca.dir; relative paths resolved against the file",
			src:  minimal + "ca: {dir: /srv/mcpi/ca}\ntool_integrity: {pin_file: pins.json}\n",
			check: func(t *testing.T, c *Config) {
				if c.ToolIntegrity.Dir != "/srv/mcpi/tools" {
					t.Errorf("dir = %q, want /srv/mcpi/tools", c.ToolIntegrity.Dir)
				}
				if want := filepath.Join("conf", "pins.json"); c.ToolIntegrity.PinFile != want {
					t.Errorf("pin_file = %q, want %q", c.ToolIntegrity.PinFile, want)
				}
			},
		},
		{
			name: "every key",
			src: minimal + "tool_integrity:\n  dir: state/tools\n  pin_file: /etc/pins.json\n  max_tools: 10000000\n  divergence_window: 1s\n" +
				"  patterns:\n    - {name: imp, regex: '(?i)<important>'}\n    - {name: x.y-z_1, regex: 'a+b'}\n",
			check: func(t *testing.T, c *Config) {
				ti := c.ToolIntegrity
				if ti.Dir != filepath.Join("conf", "state/tools") || ti.PinFile != "/etc/pins.json" || ti.MaxTools != 10_000_000 ||
					ti.DivergenceWindow.Duration != time.Second || len(ti.Patterns) != 2 ||
					ti.Patterns[0] != (ToolPattern{"imp", "(?i)<important>"}) || ti.Patterns[1].Name != "x.y-z_1" {
					t.Errorf("tool_integrity = %+v", ti)
				}
			},
		},
		{
			name: "routes: off filled at level 2 only, log filled where pins are on",
			src: withRoutes + "  - {name: a, tls: terminate, level: 2, tool_pins: learn}\n" +
				"  - {name: b, tls: plaintext, level: 2, tool_pins: enforce, on_divergence: quarantine}\n" +
				"  - {name: c, tls: plaintext, level: 2}\n" +
				"  - {name: d, tls: terminate, level: 1}\n" +
				"  - {name: e, tls: passthrough, tool_pins: off}\n",
			check: func(t *testing.T, c *Config) {
				got := ""
				for _, r := range c.Routes {
					got += r.Name + ":" + r.ToolPins + "/" + r.OnDivergence + " "
				}
				if want := "a:learn/log b:enforce/quarantine c:off/ d:/ e:off/ "; got != want {
					t.Errorf("routes %q, want %q", got, want)
				}
				if !c.ToolPinsOn() || !c.Routes[0].ToolPinsOn() || c.Routes[2].ToolPinsOn() || c.Routes[4].ToolPinsOn() {
					t.Error("ToolPinsOn wrong")
				}
			},
		},
		{
			name: "false is off",
			src:  withRoutes + "  - {name: a, tls: plaintext, level: 2, tool_pins: false}\n",
			check: func(t *testing.T, c *Config) {
				if c.Routes[0].ToolPins != Off {
					t.Errorf("tool_pins = %q, want off", c.Routes[0].ToolPins)
				}
			},
		},
		{
			name: "default_route inherits the keys",
			src:  minimal + "default_route: {tls: plaintext, level: 2, tool_pins: enforce, on_divergence: quarantine}\n",
			check: func(t *testing.T, c *Config) {
				r := c.DefaultRoute.Route
				if r.ToolPins != ToolPinsEnforce || r.OnDivergence != OnDivergenceQuarantine || !c.ToolPinsOn() {
					t.Errorf("default_route = %+v", r)
				}
			},
		},
		{
			name: "default_route close pins nothing",
			src:  minimal + "default_route: close\n",
			check: func(t *testing.T, c *Config) {
				if c.ToolPinsOn() {
					t.Error("ToolPinsOn with default_route: close")
				}
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := Parse("conf/test.yaml", []byte(tt.src), Overrides{})
			if err != nil {
				t.Fatalf("Parse: %v", err)
			}
			if err := c.Validate(); err != nil {
				t.Fatalf("Validate after Parse: %v", err)
			}
			tt.check(t, c)
		})
	}
}

func TestToolIntegrityErrors(t *testing.T) {
	tests := []struct {
		name string
		src  string
		want []wantErr
	}{
		{name: "tool_pins unknown", src: withRoutes + "  - {name: a, tls: plaintext, level: 2, tool_pins: always}\n",
			want: []wantErr{{5, "routes[0].tool_pins", `unknown value "always" (valid: off, learn, enforce)`}}},
		{name: "tool_pins true", src: withRoutes + "  - {name: a, tls: plaintext, level: 2, tool_pins: true}\n",
			want: []wantErr{{5, "routes[0].tool_pins", "expected off, learn or enforce"}}},
		{name: "tool_pins at level 1", src: withRoutes + "  - {name: a, tls: terminate, level: 1, tool_pins: learn}\n",
			want: []wantErr{{5, "routes[0].tool_pins", "needs level 2: definitions are in the bodies of list results, which a level 1 route does not read"}}},
		{name: "tool_pins on passthrough", src: withRoutes + "  - {name: a, tls: passthrough, tool_pins: enforce}\n",
			want: []wantErr{{5, "routes[0].tool_pins", "needs a route that reads HTTP at level 2 (tls terminate or plaintext)"}}},
		{name: "tool_pins on an opaque plaintext route", src: withRoutes + "  - {name: a, tls: plaintext, level: 0, development: true, tool_pins: enforce}\n",
			want: []wantErr{{5, "routes[0].tool_pins", "needs level 2"}}},
		{name: "quarantine without tool_pins", src: withRoutes + "  - {name: a, tls: plaintext, level: 2, on_divergence: quarantine}\n",
			want: []wantErr{{5, "routes[0].on_divergence", "on_divergence: quarantine needs tool_pins (learn or enforce)"}}},
		{name: "quarantine with tool_pins off", src: withRoutes + "  - {name: a, tls: plaintext, level: 2, tool_pins: off, on_divergence: quarantine}\n",
			want: []wantErr{{5, "routes[0].on_divergence", "needs tool_pins"}}},
		{name: "on_divergence unknown", src: withRoutes + "  - {name: a, tls: plaintext, level: 2, tool_pins: learn, on_divergence: block}\n",
			want: []wantErr{{5, "routes[0].on_divergence", `unknown value "block" (valid: log, quarantine)`}}},
		{name: "default_route tool_pins at level 1", src: minimal + "default_route: {tls: plaintext, level: 1, tool_pins: learn}\n",
			want: []wantErr{{4, "default_route.tool_pins", "needs level 2"}}},
		{name: "pins on with no dir", src: minimal + "tool_integrity: {dir: \"\"}\nroutes:\n  - {name: a, tls: plaintext, level: 2, tool_pins: learn}\n",
			want: []wantErr{{6, "routes[0].tool_pins", "needs tool_integrity.dir"}}},
		{name: "max_tools zero", src: minimal + "tool_integrity: {max_tools: 0}\n",
			want: []wantErr{{4, "tool_integrity.max_tools", "must be between 1 and 10000000"}}},
		{name: "max_tools too many", src: minimal + "tool_integrity: {max_tools: 10000001}\n",
			want: []wantErr{{4, "tool_integrity.max_tools", "must be between 1 and 10000000"}}},
		{name: "window too short", src: minimal + "tool_integrity: {divergence_window: 500ms}\n",
			want: []wantErr{{4, "tool_integrity.divergence_window", "must be between 1s and 24h0m0s"}}},
		{name: "window too long", src: minimal + "tool_integrity: {divergence_window: 25h}\n",
			want: []wantErr{{4, "tool_integrity.divergence_window", "must be between 1s and 24h0m0s"}}},
		{name: "pin_file with a control character", src: minimal + "tool_integrity: {pin_file: \"a\\tb\"}\n",
			want: []wantErr{{4, "tool_integrity.pin_file", "control character"}}},
		{name: "unknown key", src: minimal + "tool_integrity: {pinfile: x}\n",
			want: []wantErr{{4, "tool_integrity.pinfile", `unknown key "pinfile" (valid: dir, pin_file, max_tools, divergence_window, patterns)`}}},
		{name: "patterns not a list", src: minimal + "tool_integrity: {patterns: important}\n",
			want: []wantErr{{4, "tool_integrity.patterns", "expected a list of patterns"}}},
		{name: "pattern regex does not compile, named", src: minimal + "tool_integrity:\n  patterns:\n    - {name: ok, regex: 'a'}\n    - {name: broken, regex: '(a'}\n",
			want: []wantErr{{7, "tool_integrity.patterns[1].regex", `pattern "broken": not a regular expression (RE2): error parsing regexp: missing closing )`}}},
		{name: "pattern regex Perl-only", src: minimal + "tool_integrity:\n  patterns:\n    - {name: look, regex: '(?=x)y'}\n",
			want: []wantErr{{6, "tool_integrity.patterns[0].regex", `pattern "look": not a regular expression (RE2)`}}},
		{name: "pattern matching the empty string", src: minimal + "tool_integrity:\n  patterns:\n    - {name: any, regex: 'x*'}\n",
			want: []wantErr{{6, "tool_integrity.patterns[0].regex", `pattern "any": the regex matches the empty string`}}},
		{name: "pattern without regex", src: minimal + "tool_integrity:\n  patterns:\n    - {name: nothing}\n",
			want: []wantErr{{6, "tool_integrity.patterns[0]", `required: a regular expression (RE2) pattern "nothing" finds`}}},
		{name: "pattern without name", src: minimal + "tool_integrity:\n  patterns:\n    - {regex: a}\n",
			want: []wantErr{{6, "tool_integrity.patterns[0]", "required: the finding's name"}}},
		{name: "pattern names duplicate and invalid", src: minimal + "tool_integrity:\n  patterns:\n    - {name: a, regex: a}\n    - {name: a, regex: b}\n    - {name: 'a b', regex: c}\n",
			want: []wantErr{{7, "tool_integrity.patterns[1].name", `duplicate pattern name "a" (also tool_integrity.patterns[0])`},
				{8, "tool_integrity.patterns[2].name", `invalid name "a b"`}}},
		{name: "pattern unknown key", src: minimal + "tool_integrity:\n  patterns:\n    - {name: a, re: a}\n",
			want: []wantErr{{6, "tool_integrity.patterns[0].regex", "required"}, {6, "tool_integrity.patterns[0].re", `unknown key "re" (valid: name, regex)`}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := Parse("test.yaml", []byte(tt.src), Overrides{})
			if c != nil {
				t.Fatal("got a config despite errors")
			}
			var errs Errors
			if !errors.As(err, &errs) {
				t.Fatalf("error %v (%T) is not an Errors", err, err)
			}
			if len(errs) != len(tt.want) {
				t.Fatalf("got %d errors, want %d:\n%v", len(errs), len(tt.want), err)
			}
			for i, w := range tt.want {
				e := errs[i]
				if e.Line != w.line || !strings.HasPrefix(e.Key, w.key) || !strings.Contains(e.Msg, w.msg) || e.Column == 0 {
					t.Errorf("error %d = %q (line %d col %d, key %q)\nwant line %d, key %q, message containing %q",
						i, e.Error(), e.Line, e.Column, e.Key, w.line, w.key, w.msg)
				}
			}
		})
	}
}

// TestToolIntegrityValidateInCode: a config built in code is held to the same rules (Validate
// compiles the patterns and relates tool_pins to the level).
func TestToolIntegrityValidateInCode(t *testing.T) {
	c := Default(NftablesTProxy)
	c.Intercept.Destinations = []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}
	c.Intercept.Ports = []PortRange{{443, 443}}
	lvl := 1
	c.Routes = []Route{{Name: "a", TLS: TLSTerminate, Level: &lvl, OnMismatch: OnMismatchClose, OnRuleError: OnRuleErrorClosed, TokenAudience: On, ToolPins: ToolPinsLearn}}
	c.ToolIntegrity.Patterns = []ToolPattern{{Name: "p", Regex: "[z-a]"}}
	err := c.Validate()
	if err == nil {
		t.Fatal("Validate accepted tool_pins at level 1 and a broken pattern")
	}
	for _, want := range []string{"routes[0].tool_pins: needs level 2", `tool_integrity.patterns[0].regex: pattern "p": not a regular expression`} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("Validate: %v\nlacks %q", err, want)
		}
	}
}
