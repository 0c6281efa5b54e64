package policy

import (
	"slices"
	"testing"
)

// argsBody serves arguments that would make every rule below match, were they read: Explain
// must not read a field known refuses, only leave it unknown.
type argsBody struct{}

func (argsBody) Arguments() map[string]any  { return map[string]any{"x": int64(1), "text": "forbidden"} }
func (argsBody) Result() any                { return nil }
func (argsBody) ClientInfo() map[string]any { return map[string]any{"name": "a-untrusted"} }

func partialInput(method, name string) *Input {
	in := msgInput(name)
	in.Vars.MCP.Method = method
	in.Vars.MCP.Body = argsBody{}
	return in
}

// noBody is what a flow log record knows: no arguments, no client info, no headers.
func noBody(f string) bool {
	switch f {
	case "mcp", "mcp.arguments", "mcp.client_info", "http.headers", "http":
		return false
	}
	return true
}

// TestExplainPartial: a rule that reads a field the input cannot supply is decided when its
// other conditions decide it (CEL partial evaluation), and unknown only when its outcome depends
// on the missing field.
func TestExplainPartial(t *testing.T) {
	for _, c := range []struct {
		name, when, method, tool string
		want                     string // outcome
		unknown                  []string
	}{
		{"and decided false", `mcp.method == "tools/call" && mcp.arguments.x == 1`, "tools/list", "", OutcomeNoMatch, []string{"mcp.arguments"}},
		{"and depends", `mcp.method == "tools/call" && mcp.arguments.x == 1`, "tools/call", "echo", OutcomeUnknown, []string{"mcp.arguments"}},
		{"missing field first", `mcp.arguments.x == 1 && mcp.method == "tools/call"`, "tools/list", "", OutcomeNoMatch, []string{"mcp.arguments"}},
		{"or decided true", `mcp.method == "tools/list" || mcp.arguments.x == 1`, "tools/list", "", OutcomeMatch, []string{"mcp.arguments"}},
		{"or depends", `mcp.method == "tools/list" || mcp.arguments.x == 1`, "tools/call", "echo", OutcomeUnknown, []string{"mcp.arguments"}},
		{"in", `mcp.name == "echo" && "text" in mcp.arguments`, "tools/call", "echo", OutcomeUnknown, []string{"mcp.arguments"}},
		{"in decided", `mcp.name == "echo" && "text" in mcp.arguments`, "tools/call", "add", OutcomeNoMatch, []string{"mcp.arguments"}},
		{"has", `has(mcp.arguments.x)`, "tools/call", "echo", OutcomeUnknown, []string{"mcp.arguments"}},
		{"nested", `mcp.method == "sampling/createMessage" && mcp.client_info.name.endsWith("-untrusted")`, "tools/call", "", OutcomeNoMatch, []string{"mcp.client_info"}},
		{"header", `http.headers["x-n"] == "abc"`, "tools/call", "", OutcomeUnknown, []string{"http.headers"}},
		{"whole variable", `size(mcp) > 100`, "tools/call", "", OutcomeUnknown, []string{"mcp"}},
		{"whole variable decided", `mcp.method == "ping" && size(mcp) > 100`, "tools/call", "", OutcomeNoMatch, []string{"mcp", "mcp.method"}},
		{"known fields only", `mcp.name == "echo"`, "tools/call", "echo", OutcomeMatch, nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			set := mustCompile(t, []RuleSpec{{Name: "r", When: c.when, Action: RuleDeny}})
			ex := set.Explain(partialInput(c.method, c.tool), noBody)
			o := ex.Rules[0]
			if o.Outcome != c.want {
				t.Fatalf("outcome %s, want %s (%+v)", o.Outcome, c.want, o)
			}
			wantAction := ActionAllow
			if c.want == OutcomeMatch {
				wantAction = ActionDeny
			}
			if ex.Decision.Action != wantAction || ex.Unknown != (c.want == OutcomeUnknown) {
				t.Fatalf("decision %+v, unknown %v", ex.Decision, ex.Unknown)
			}
			if c.want == OutcomeUnknown {
				if o.Assumed != OutcomeNoMatch {
					t.Errorf("assumed %q, want no_match", o.Assumed)
				}
				for _, u := range o.Unknown {
					if !slices.Contains(c.unknown, u) {
						t.Errorf("unknown %v, want within %v", o.Unknown, c.unknown)
					}
				}
				if len(o.Unknown) == 0 {
					t.Error("an unknown outcome names no field")
				}
			} else if len(o.Unknown) > 0 || o.Assumed != "" {
				t.Errorf("a decided rule says unknown %v, assumed %q", o.Unknown, o.Assumed)
			}
			// With every field known the rule reads the (matching) arguments.
			if full := set.Explain(partialInput(c.method, c.tool), nil); full.Unknown || full.Rules[0].Outcome == OutcomeUnknown {
				t.Errorf("known: %+v", full)
			}
		})
	}
}

// TestExplainAssuming: an unknown rule reached before the decision is taken as assume says:
// matched decides (a rate limit as limited, spending no token; a shadow rule as its mark), not
// matched goes on to the next rule. An unknown rule past the decision is not assumed anything.
func TestExplainAssuming(t *testing.T) {
	rules := []RuleSpec{
		{Name: "shadow-args", When: `mcp.arguments.x == 1`, Action: RuleDeny, Mode: ModeShadow},
		{Name: "deny-args", When: `mcp.method == "tools/call" && mcp.arguments.x == 1`, Action: RuleDeny},
		{Name: "limit-by-arg", When: `mcp.method == "tools/call"`, Action: RuleRateLimit,
			RateLimit: &RateLimit{Key: "string(mcp.arguments.x)", Rate: 1e-6, Burst: 1}},
		{Name: "deny-echo", When: `mcp.name == "echo"`, Action: RuleDeny},
		{Name: "after", When: `mcp.arguments.x == 1`, Action: RuleDeny},
	}
	set := mustCompile(t, rules, WithClock(newFakeClock().now))
	outcomes := func(ex Explanation) (s []string) {
		for _, o := range ex.Rules {
			s = append(s, o.Outcome+"/"+o.Assumed)
		}
		return s
	}
	for _, c := range []struct {
		name, assume, tool string
		action             Action
		rule               string
		shadow             bool
		want               []string
	}{
		{"none", "", "echo", ActionDeny, "deny-echo", false,
			[]string{"unknown/no_match", "unknown/no_match", "unknown/no_match", "match/", "unknown/"}},
		{"deny", "deny-args", "echo", ActionDeny, "deny-args", false,
			[]string{"unknown/no_match", "unknown/match", "unknown/", "match/", "unknown/"}},
		{"limit", "limit-by-arg", "add", ActionRateLimited, "limit-by-arg", false,
			[]string{"unknown/no_match", "unknown/no_match", "unknown/limited", "no_match/", "unknown/"}},
		{"shadow", "shadow-args", "add", ActionAllow, "", true,
			[]string{"unknown/match", "unknown/no_match", "unknown/no_match", "no_match/", "unknown/no_match"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			ex := set.ExplainAssuming(partialInput("tools/call", c.tool), noBody, func(r string) bool { return r == c.assume })
			if ex.Decision.Action != c.action || ex.Decision.Rule != c.rule || (len(ex.Decision.Shadow) > 0) != c.shadow || !ex.Unknown {
				t.Fatalf("decision %+v (unknown %v)", ex.Decision, ex.Unknown)
			}
			if got := outcomes(ex); !slices.Equal(got, c.want) {
				t.Fatalf("outcomes %v, want %v", got, c.want)
			}
		})
	}
	// The assumed limit spent no token: with every field known, the bucket's one token is there.
	if ex := set.Explain(partialInput("tools/call", "add"), nil); ex.Decision.Action != ActionDeny || ex.Decision.Rule != "deny-args" {
		t.Fatalf("known: %+v", ex.Decision)
	}
	known := mustCompile(t, rules[2:3], WithClock(newFakeClock().now))
	known.ExplainAssuming(partialInput("tools/call", "add"), noBody, func(string) bool { return true })
	if ex := known.Explain(partialInput("tools/call", "add"), nil); ex.Rules[0].Outcome != OutcomeWithinLimit {
		t.Fatalf("an assumed limit spent a token: %+v", ex.Rules[0])
	}
}
