package policy

import (
	"strings"
	"testing"
)

// A redact rule hides, it does not decide: evaluation goes on past it; a probe (what would a call
// to this listed tool get?) spends no rate-limit token and collects no redaction.
func TestRedactAndProbe(t *testing.T) {
	clock := newFakeClock()
	s := mustCompile(t, []RuleSpec{
		{Name: "hide-token", When: `mcp.method == "tools/call"`, Action: RuleRedact, Redact: &Redact{Paths: []string{"$.params.arguments.token"}}},
		{Name: "rate", When: `mcp.method == "tools/call"`, Action: RuleRateLimit, RateLimit: &RateLimit{Rate: 0.001, Burst: 1}},
		{Name: "deny-denied", When: `mcp.name.startsWith("denied_")`, Action: RuleDeny},
	}, WithClock(clock.now))
	probe := toolCall("echo")
	probe.Probe = true
	for range 5 {
		if d := s.Evaluate(probe); d.Action != ActionAllow || len(d.Redactions) != 0 {
			t.Fatalf("probe: %+v", d)
		}
	}
	probe.MCP["name"] = "denied_x"
	if d := s.Evaluate(probe); d.Action != ActionDeny || d.Rule != "deny-denied" {
		t.Fatalf("probe of a denied tool: %+v", d)
	}
	d := s.Evaluate(toolCall("echo"))
	if d.Action != ActionAllow || len(d.Redactions) != 1 || d.Redactions[0].Rule != "hide-token" || d.Redactions[0].Marker != DefaultMarker {
		t.Fatalf("call after probes (the one token must be left): %+v", d)
	}
	if d := s.Evaluate(toolCall("denied_y")); d.Action != ActionRateLimited {
		t.Fatalf("second call: %+v", d)
	}
}

func TestRedactCompileErrors(t *testing.T) {
	for _, c := range []struct {
		name string
		spec RuleSpec
		want string
	}{
		{"no block", RuleSpec{Name: "r", Action: RuleRedact}, "needs a redact block"},
		{"empty", RuleSpec{Name: "r", Action: RuleRedact, Redact: &Redact{}}, "at least one of paths and patterns"},
		{"bad path", RuleSpec{Name: "r", Action: RuleRedact, Redact: &Redact{Paths: []string{"result.x"}}}, "must start with $"},
		{"envelope", RuleSpec{Name: "r", Action: RuleRedact, Redact: &Redact{Paths: []string{"$.id"}}}, "envelope"},
		{"bad regexp", RuleSpec{Name: "r", Action: RuleRedact, Redact: &Redact{Patterns: []string{"("}}}, "redact patterns"},
		{"empty match", RuleSpec{Name: "r", Action: RuleRedact, Redact: &Redact{Patterns: []string{"a*"}}}, "matches the empty string"},
		{"block on deny", RuleSpec{Name: "r", Action: RuleDeny, Redact: &Redact{Patterns: []string{"a"}}}, "redact block given"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := Compile([]RuleSpec{c.spec})
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("error %v, want %q", err, c.want)
			}
		})
	}
}

func TestPathMatch(t *testing.T) {
	loc := func(segs ...any) []PathSeg {
		var out []PathSeg
		for _, s := range segs {
			switch v := s.(type) {
			case string:
				out = append(out, PathSeg{Key: v, Index: -1})
			case int:
				out = append(out, PathSeg{Index: v})
			}
		}
		return out
	}
	for _, c := range []struct {
		path string
		loc  []PathSeg
		want bool
	}{
		{"$.result.content[*].text", loc("result", "content", 3, "text"), true},
		{"$.result.content[*].text", loc("result", "content", 3, "type"), false},
		{"$.result.content[1]", loc("result", "content", 1, "text"), true},
		{"$.result.content[1]", loc("result", "content", 2, "text"), false},
		{"$..password", loc("params", "arguments", "db", "password"), true},
		{"$..password", loc("params", "arguments", "passwords"), false},
		{`$.params["a.b"]`, loc("params", "a.b"), true},
		{"$.params.*.token", loc("params", "arguments", "token"), true},
		{"$..[0]", loc("result", "x", 0), true},
	} {
		p, err := ParsePath(c.path)
		if err != nil {
			t.Fatalf("%s: %v", c.path, err)
		}
		if got := p.Match(c.loc); got != c.want {
			t.Errorf("%s on %s: %v, want %v", c.path, FormatPath(c.loc), got, c.want)
		}
	}
}
