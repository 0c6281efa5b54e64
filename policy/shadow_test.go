package policy

import (
	"slices"
	"strings"
	"testing"
)

func msgInput(name string) *Input {
	return &Input{Vars: Vars{
		Client: &Client{Address: "10.200.1.2", Port: 40000},
		Conn:   &Conn{OrigDst: "10.200.2.2:8080", OrigIP: "10.200.2.2", OrigPort: 8080, TLS: "plaintext"},
		HTTP:   &Request{Method: "POST", Path: "/mcp", Headers: HeaderMap{"x-n": "abc"}},
		MCP:    &Message{Version: "2026-07-28", Method: "tools/call", Name: name},
	}}
}

func TestShadowDeny(t *testing.T) {
	s := mustCompile(t, []RuleSpec{
		{Name: "shadow-echo", When: `mcp.name == "echo"`, Action: RuleDeny, Mode: ModeShadow, Reason: "echo is going away"},
		{Name: "deny-delete", When: `mcp.name == "delete"`, Action: RuleDeny},
		{Name: "shadow-all", Action: RuleDeny, Mode: ModeShadow},
		{Name: "allow-rest", Action: RuleAllow},
	})
	tests := []struct {
		name, tool string
		want       Action
		wantRule   string
		shadow     []string
	}{
		{"shadow deny lets the call through", "echo", ActionAllow, "allow-rest", []string{"shadow-echo", "shadow-all"}},
		{"an enforced deny still denies", "delete", ActionDeny, "deny-delete", nil},
		{"a shadow past no enforced rule", "other", ActionAllow, "allow-rest", []string{"shadow-all"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := s.Evaluate(msgInput(tt.tool))
			if d.Action != tt.want || d.Rule != tt.wantRule {
				t.Fatalf("decision %s by %q, want %s by %q (%+v)", d.Action, d.Rule, tt.want, tt.wantRule, d)
			}
			var got []string
			for _, h := range d.Shadow {
				got = append(got, h.Rule)
				if h.Would != ActionDeny {
					t.Errorf("%s would %s, want deny", h.Rule, h.Would)
				}
				if !strings.Contains(d.Reason, "would_deny by "+h.Rule+" (shadow): ") {
					t.Errorf("reason %q does not name %s", d.Reason, h.Rule)
				}
			}
			if !slices.Equal(got, tt.shadow) {
				t.Errorf("shadow %v, want %v", got, tt.shadow)
			}
			if len(tt.shadow) == 0 && strings.Contains(d.Reason, "would_") {
				t.Errorf("reason %q names a shadow rule", d.Reason)
			}
		})
	}
	if d := s.Evaluate(msgInput("echo")); !strings.HasPrefix(d.Reason, "allowed by rule allow-rest; would_deny by shadow-echo (shadow): echo is going away") {
		t.Errorf("reason %q", d.Reason)
	}
}

// A shadow rate limit meters with buckets of its own: the enforced limit after it lets exactly as
// many requests through as it does alone.
func TestShadowRateLimitSpendsItsOwnTokens(t *testing.T) {
	enforced := RuleSpec{Name: "limit", When: `mcp.method == "tools/call"`, Action: RuleRateLimit,
		RateLimit: &RateLimit{Key: "client.address", Rate: 1e-6, Burst: 3}}
	shadow := RuleSpec{Name: "limit-shadow", When: `mcp.method == "tools/call"`, Action: RuleRateLimit, Mode: ModeShadow,
		RateLimit: &RateLimit{Key: "client.address", Rate: 1e-6, Burst: 1}}
	alone := mustCompile(t, []RuleSpec{enforced}, WithClock(newFakeClock().now))
	both := mustCompile(t, []RuleSpec{shadow, enforced}, WithClock(newFakeClock().now))
	for i := range 5 {
		a, b := alone.Evaluate(msgInput("echo")), both.Evaluate(msgInput("echo"))
		if a.Action != b.Action || a.Rule != b.Rule {
			t.Fatalf("request %d: alone %s by %q, with a shadow limit %s by %q", i, a.Action, a.Rule, b.Action, b.Rule)
		}
		wantShadow := i >= 1
		if got := len(b.Shadow) == 1 && b.Shadow[0].Would == ActionRateLimited && b.Shadow[0].Rule == "limit-shadow"; got != wantShadow {
			t.Errorf("request %d: shadow %+v, want a would_rate_limit: %v", i, b.Shadow, wantShadow)
		}
		if wantShadow && !strings.Contains(b.Reason, "would_rate_limit by limit-shadow (shadow): rate limit limit-shadow exceeded") {
			t.Errorf("request %d: reason %q", i, b.Reason)
		}
		if want := i >= 3; (a.Action == ActionRateLimited) != want {
			t.Errorf("request %d: %s, want rate limited %v", i, a.Action, want)
		}
	}
}

// A list probe (would a call to this tool be denied?) ignores shadow rules: a dry run must not
// hide a tool from tools/list.
func TestProbeIgnoresShadowRules(t *testing.T) {
	s := mustCompile(t, []RuleSpec{{Name: "shadow-echo", When: `mcp.name == "echo"`, Action: RuleDeny, Mode: ModeShadow}})
	in := msgInput("echo")
	in.Probe = true
	if d := s.Evaluate(in); d.Action != ActionAllow || len(d.Shadow) != 0 || strings.Contains(d.Reason, "would_") {
		t.Errorf("probe: %+v", d)
	}
	if d := s.Evaluate(msgInput("echo")); len(d.Shadow) != 1 {
		t.Errorf("the same message sent: %+v, want a would_deny", d)
	}
}

// A shadow rule that fails to evaluate would have denied (fail closed); as a shadow it says so
// and the request goes on to the other rules.
func TestShadowRuleError(t *testing.T) {
	s := mustCompile(t, []RuleSpec{{Name: "n", When: `int(http.headers["x-n"]) > 3`, Action: RuleDeny, Mode: ModeShadow}})
	d := s.Evaluate(msgInput("echo"))
	if d.Action != ActionAllow || len(d.Errors) != 1 || len(d.Shadow) != 1 || d.Shadow[0].Would != ActionDeny ||
		!strings.HasPrefix(d.Shadow[0].Reason, "rule n failed to evaluate: ") {
		t.Errorf("%+v", d)
	}
	in := msgInput("echo")
	in.FailOpen = true
	if d := s.Evaluate(in); d.Action != ActionAllow || len(d.Shadow) != 0 || len(d.Errors) != 1 {
		t.Errorf("fail open: %+v", d)
	}
}

func TestShadowCompileErrors(t *testing.T) {
	for _, tt := range []struct {
		name string
		spec RuleSpec
		msg  string
	}{
		{"shadow allow", RuleSpec{Name: "a", Action: RuleAllow, Mode: ModeShadow}, `mode "shadow" applies to deny and rate_limit rules only, not "allow"`},
		{"shadow redact", RuleSpec{Name: "a", Action: RuleRedact, Mode: ModeShadow, Redact: &Redact{Paths: []string{"$.params.arguments.x"}}}, `not "redact"`},
		{"unknown mode", RuleSpec{Name: "a", Action: RuleDeny, Mode: "audit"}, `unknown mode "audit"`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Compile([]RuleSpec{tt.spec})
			if err == nil || !strings.Contains(err.Error(), tt.msg) {
				t.Errorf("error %v, want %q", err, tt.msg)
			}
		})
	}
	if _, err := Compile([]RuleSpec{{Name: "a", Action: RuleDeny, Mode: ModeEnforce}}); err != nil {
		t.Errorf("mode enforce: %v", err)
	}
}

// Explain decides as Evaluate does, the rules past the decision included in its outcomes, and
// says which rules it could not evaluate.
func TestExplain(t *testing.T) {
	rules := []RuleSpec{
		{Name: "shadow-echo", When: `mcp.name == "echo"`, Action: RuleDeny, Mode: ModeShadow},
		{Name: "args", When: `mcp.arguments.path == "/etc"`, Action: RuleDeny},
		{Name: "limit", When: `mcp.method == "tools/call"`, Action: RuleRateLimit, RateLimit: &RateLimit{Key: "client.address", Rate: 1e-6, Burst: 2}},
		{Name: "deny-delete", When: `mcp.name == "delete"`, Action: RuleDeny},
		{Name: "allow", Action: RuleAllow},
		{Name: "after", When: `mcp.name == "echo"`, Action: RuleDeny},
	}
	live := mustCompile(t, rules, WithClock(newFakeClock().now))
	offline := mustCompile(t, rules, WithClock(newFakeClock().now))
	noArgs := func(f string) bool { return f != "mcp.arguments" && f != "mcp" }
	for i, tool := range []string{"echo", "delete", "echo", "other"} {
		d := live.Evaluate(msgInput(tool))
		ex := offline.Explain(msgInput(tool), noArgs)
		if ex.Decision.Action != d.Action || ex.Decision.Rule != d.Rule || ex.Decision.Reason != d.Reason {
			t.Errorf("%d %s: Explain %+v, Evaluate %+v", i, tool, ex.Decision, d)
		}
		if !ex.Unknown || len(ex.Rules) != len(rules) {
			t.Fatalf("%d: %+v", i, ex)
		}
		if o := ex.Rules[1]; o.Outcome != OutcomeUnknown || !slices.Equal(o.Unknown, []string{"mcp.arguments"}) {
			t.Errorf("%d: args rule %+v", i, o)
		}
		if o := ex.Rules[5]; (o.Outcome == OutcomeMatch) != (tool == "echo") || o.Decided {
			t.Errorf("%d: rule past the decision %+v", i, o)
		}
		decided := 0
		for _, o := range ex.Rules {
			if o.Decided {
				decided++
				if o.Rule != d.Rule {
					t.Errorf("%d: %s decided, Evaluate says %s", i, o.Rule, d.Rule)
				}
			}
		}
		if decided != 1 {
			t.Errorf("%d: %d rules decided", i, decided)
		}
	}
	// The third call of the limit's two-token bucket is limited in both.
	if ex := offline.Explain(msgInput("echo"), nil); ex.Decision.Action != ActionRateLimited || ex.Unknown || ex.Rules[2].Outcome != OutcomeLimited {
		t.Errorf("fourth call: %+v", ex)
	}
}
