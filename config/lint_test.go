package config

import (
	"strings"
	"testing"
)

// TestLintWarnings: each never-effective setting is warned about, and the near miss of each is
// not.
func TestLintWarnings(t *testing.T) {
	const base = "mechanism: nftables-tproxy\nintercept: {destinations: [10.0.0.0/8], ports: [443, \"8000-8100\"]}\n"
	tests := []struct {
		name string
		src  string
		want string // "" : no lint warning at all
	}{
		{"catch-all ahead of sni route", "routes:\n  - {name: all, tls: passthrough}\n  - {name: s, match: {sni: [a.example]}, tls: terminate}\n",
			"routes[1] (s): never matches: routes[0] (all) comes first"},
		{"sni route ahead of catch-all", "routes:\n  - {name: s, match: {sni: [a.example]}, tls: terminate}\n  - {name: all, tls: passthrough}\n", ""},
		{"wider prefix and port range first", "routes:\n  - {name: w, match: {destinations: [10.1.0.0/16], ports: [\"8000-8100\"]}, tls: plaintext, development: true}\n" +
			"  - {name: n, match: {destinations: [10.1.2.0/24], ports: [8080]}, tls: plaintext, development: true}\n", "routes[1] (n): never matches: routes[0] (w)"},
		{"narrower first", "routes:\n  - {name: n, match: {destinations: [10.1.2.0/24], ports: [8080]}, tls: plaintext, development: true}\n" +
			"  - {name: w, match: {destinations: [10.1.0.0/16], ports: [\"8000-8100\"]}, tls: plaintext, development: true}\n", ""},
		{"partly overlapping ports", "routes:\n  - {name: a, match: {ports: [\"8000-8050\"]}, tls: plaintext, development: true}\n" +
			"  - {name: b, match: {ports: [\"8040-8060\"]}, tls: plaintext, development: true}\n", ""},
		{"wildcard sni covers deeper names", "routes:\n  - {name: w, match: {sni: [\"*.example.com\"]}, tls: passthrough}\n  - {name: a, match: {sni: [x.a.example.com]}, tls: passthrough}\n",
			"routes[1] (a): never matches: routes[0] (w)"},
		{"wildcard sni does not cover the bare suffix", "routes:\n  - {name: w, match: {sni: [\"*.example.com\"]}, tls: passthrough}\n  - {name: a, match: {sni: [example.com]}, tls: passthrough}\n", ""},
		{"client filter narrows the first route", "routes:\n  - {name: c, match: {clients: [10.9.0.0/16]}, tls: passthrough}\n  - {name: all, tls: passthrough}\n", ""},
		{"route port not steered", "routes:\n  - {name: p, match: {ports: [\"8090-8200\", 9000]}, tls: plaintext, development: true}\n",
			"routes[0] (p): match.ports 8101-8200, 9000 not in intercept.ports"},
		{"route port steered", "routes:\n  - {name: p, match: {ports: [\"8000-8100\", 443]}, tls: plaintext, development: true}\n", ""},
		{"sni on plaintext", "routes:\n  - {name: p, match: {sni: [a.example]}, tls: plaintext, development: true}\n",
			"routes[0] (p): match.sni on a tls: plaintext route never matches"},
		{"unknown upgrade", "routes:\n  - {name: p, tls: plaintext, development: true, allow_upgrade: [websockets]}\n",
			"routes[0] (p): allow_upgrade[0]: \"websockets\" is not an upgrade protocol clients send (did you mean websocket?)"},
		{"known upgrade", "routes:\n  - {name: p, tls: plaintext, development: true, allow_upgrade: [websocket, connect]}\n", ""},
		{"unknown upgrade on the default route", "default_route: {tls: plaintext, development: true, allow_upgrade: [mqtt]}\n",
			"default_route: allow_upgrade[0]: \"mqtt\""},
		{"unused rule set", "routes:\n  - {name: p, tls: plaintext, development: true, rule_set: used}\nrule_sets:\n  used: []\n  spare:\n    - {name: r, action: deny}\n",
			"rule_sets.spare: unused"},
		{"rule set used by the default route", "default_route: {tls: plaintext, development: true, rule_set: d}\nrule_sets:\n  d:\n    - {name: r, action: deny}\n", ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c, err := Parse("test.yaml", []byte(base+tc.src), Overrides{})
			if err != nil {
				t.Fatal(err)
			}
			w := c.lintWarnings()
			if tc.want == "" {
				if len(w) != 0 {
					t.Fatalf("warnings %q, want none", w)
				}
				return
			}
			if len(w) != 1 || !strings.Contains(w[0], tc.want) {
				t.Fatalf("warnings %q, want one containing %q", w, tc.want)
			}
			if !strings.Contains(strings.Join(c.Warnings(), "\n"), tc.want) {
				t.Errorf("Warnings() lacks the lint warning")
			}
		})
	}
}

// TestParsePartial: a file with problems still yields its rules without problems (for the CEL
// pass), without the rules that have them, and Parse's errors.
func TestParsePartial(t *testing.T) {
	src := "mechanism: nftables-tproxy\nintercept: {destinations: [10.0.0.0/8], ports: [443]}\nlimits: {idle_timout: 5m}\n" +
		"rule_sets:\n  s:\n    - {name: good, when: 'mcp.name ==', action: deny}\n    - {name: bad, when: 'x', action: nope}\n"
	c, errs, err := ParsePartial("test.yaml", []byte(src), Overrides{})
	if err != nil {
		t.Fatal(err)
	}
	if len(errs) != 2 || !strings.Contains(errs.Error(), "idle_timout") || !strings.Contains(errs.Error(), "rule_sets.s[1].action") {
		t.Fatalf("errs = %v", errs)
	}
	if rs := c.RuleSets["s"]; len(rs) != 1 || rs[0].Name != "good" || rs[0].WhenPos.Line != 6 {
		t.Fatalf("rule set s = %+v", rs)
	}
	if _, perr := Parse("test.yaml", []byte(src), Overrides{}); perr == nil || perr.Error() != errs.Error() {
		t.Errorf("Parse: %v, want the same errors", perr)
	}
	c, errs, _ = ParsePartial("test.yaml", []byte("mechanism: nftables-tproxy\nintercept: {destinations: [10.0.0.0/8], ports: [443]}\n"), Overrides{})
	if errs != nil || c == nil || c.Path != "test.yaml" {
		t.Errorf("valid file: %v, %v", c, errs)
	}
}
