package appliance

import (
	"fmt"
	"strings"
	"testing"

	"mcpintercept/config"
	"mcpintercept/engine"
	"mcpintercept/level1"
	"mcpintercept/stage"
)

// TestRoutingFromConfigDefaults: routes built in code get on_mismatch close at Level >= 1 and
// on_rule_error closed, and default_route maps to the routing table.
func TestRoutingFromConfigDefaults(t *testing.T) {
	one, zero := 1, 0
	cfg := &config.Config{
		Routes: []config.Route{
			{Name: "l1", TLS: "terminate", Level: &one},
			{Name: "l0", TLS: "passthrough", Level: &zero},
			{Name: "open", TLS: "plaintext", Level: &one, OnRuleError: config.OnRuleErrorOpen, OnMismatch: "passthrough",
				AllowUpgrade: []string{"websocket"}, HTTPMethods: []string{"POST", "GET"}},
		},
		DefaultRoute: &config.DefaultRoute{Route: &config.Route{TLS: "terminate", Level: &one, RuleSet: "r"}},
		RuleSets:     map[string][]config.Rule{"r": {{Name: "deny", Action: "deny"}}},
	}
	rt, _, err := RoutingFromConfig(cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i, want := range []struct{ mismatch, ruleErr string }{{"close", "closed"}, {"passthrough", "closed"}, {"passthrough", "open"}} {
		if r := rt.Routes[i]; r.OnMismatch != want.mismatch || r.OnRuleError != want.ruleErr {
			t.Errorf("route %s: on_mismatch %q on_rule_error %q, want %q %q", r.Name, r.OnMismatch, r.OnRuleError, want.mismatch, want.ruleErr)
		}
	}
	if o, _ := stage.Get[*level1.RouteOptions](rt.Routes[2].Stages, level1.ClassifyName); o == nil || len(o.AllowUpgrade) != 1 || o.AllowUpgrade[0] != "websocket" ||
		len(o.HTTPMethods) != 2 || o.HTTPMethods[1] != "GET" {
		t.Errorf("allow_upgrade and http_methods %+v", o)
	}
	if d := rt.Default; d == nil || d.Name != "default" || d.TLS != engine.Terminate || d.Level != 1 || d.RuleSet != "r" || d.OnMismatch != "close" {
		t.Fatalf("default route %+v", rt.Default)
	}
	cfg.DefaultRoute = &config.DefaultRoute{Close: true}
	if rt, _, err = RoutingFromConfig(cfg, nil); err != nil || !rt.DefaultClose || rt.Default != nil {
		t.Fatalf("default_route close: %+v, %v", rt, err)
	}
	cfg.DefaultRoute = nil
	if rt, _, err = RoutingFromConfig(cfg, nil); err != nil || rt.DefaultClose || rt.Default != nil {
		t.Fatalf("no default_route: %+v, %v", rt, err)
	}
}

// TestRoutingRefusesFieldsAboveTheRouteLevel: a rule that reads what its route's level cannot
// see would never match; it is refused with the position of its expression, and the same rule
// set is accepted on a Level 2 route.
func TestRoutingRefusesFieldsAboveTheRouteLevel(t *testing.T) {
	const doc = `
intercept: {destinations: [10.0.0.0/8], ports: [80]}
routes:
  - name: mcp
    match: {destinations: [10.0.0.0/8], ports: [80]}
    tls: plaintext
    level: %d
    rule_set: r
rule_sets:
  r:
    - name: no-rm
      when: 'mcp.arguments.command == "rm"'
      action: deny
`
	for _, tc := range []struct {
		level int
		want  string // "" accepted
	}{{1, "cfg.yaml:12:14: rule no-rm: mcp.arguments needs awareness level 2, the route has level 1"}, {2, ""}} {
		cfg, err := config.Parse("cfg.yaml", []byte(fmt.Sprintf(doc, tc.level)), config.Overrides{})
		if err != nil {
			t.Fatal(err)
		}
		_, _, err = RoutingFromConfig(cfg, nil)
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("level %d: %v", tc.level, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("level %d: error %v, want %q", tc.level, err, tc.want)
		}
	}
}
