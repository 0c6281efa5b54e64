package level2

import (
	"strings"
	"testing"

	"mcpintercept/policy"
)

// A shadow deny never hides a tool: list filtering probes the rules, and probes skip shadow
// rules. A call of that tool goes through and its record says would_deny; the enforced rule
// beside it still hides and denies.
func TestShadowRuleKeepsToolListed(t *testing.T) {
	results := map[string]string{
		"tools/list": `{"tools":[{"name":"echo","inputSchema":{"type":"object"}},{"name":"denied_delete","inputSchema":{"type":"object"}}]}`,
	}
	rules := []policy.RuleSpec{
		{Name: "shadow-echo", When: `mcp.method == "tools/call" && mcp.name == "echo"`, Action: policy.RuleDeny, Mode: policy.ModeShadow},
		{Name: "deny-denied-tools", When: `mcp.method == "tools/call" && mcp.name.startsWith("denied_")`, Action: policy.RuleDeny},
	}
	u := newUpstream(t, listServer(results, false))
	h := surfaceHarness(t, u, rules, NewSessions(0), nil)
	r := post(t, h.addr, jsonHeaders, req(5, "tools/list", `{}`))
	if got := names(resultOf(t, r.body)["tools"], "name"); strings.Join(got, ",") != "echo" {
		t.Fatalf("tools %v, want [echo] (%s)", got, r.body)
	}
	r = post(t, h.addr, jsonHeaders, call(6, "echo", `{}`))
	if res := resultOf(t, r.body); res == nil {
		t.Fatalf("the shadow-denied call was refused: %s", r.body)
	}
	var found bool
	eventually(t, func() bool {
		for _, rec := range h.recs() {
			if rec.Method == "tools/call" && rec.Name == "echo" {
				found = string(rec.Decision) == "allow" && strings.Contains(rec.Reason, "would_deny by shadow-echo (shadow)")
				return true
			}
		}
		return false
	})
	if !found {
		t.Fatalf("no record of the echo call says would_deny: %+v", h.recs())
	}
	for _, rec := range h.recs() {
		if rec.Method == "tools/list" && strings.Contains(rec.Reason, "shadow") {
			t.Errorf("the list's record names a shadow rule: %q", rec.Reason)
		}
	}
}
