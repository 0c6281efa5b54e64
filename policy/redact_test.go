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

// A path key matches every spelling a case-insensitive peer reads as that key: encoding/json
// fills a field tagged "pin" from "PIN" and one tagged "secret" from "ſecret" (U+017F).
func TestPathMatchFolds(t *testing.T) {
	p, err := ParsePath("$..secret")
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"secret", "SECRET", "Secret", "ſecret", "SECRET"} {
		if !p.Match([]PathSeg{{Key: "params", Index: -1}, {Key: k, Index: -1}}) {
			t.Errorf("$..secret does not select %q", k)
		}
	}
	for _, k := range []string{"secrets", "sécret", "ѕecret"} { // the last one has a Cyrillic dze
		if p.Match([]PathSeg{{Key: "params", Index: -1}, {Key: k, Index: -1}}) {
			t.Errorf("$..secret selects %q", k)
		}
	}
}

func TestRedactMarkerMatchesPattern(t *testing.T) {
	_, err := Compile([]RuleSpec{{Name: "r", Action: RuleRedact, Redact: &Redact{Patterns: []string{`RED`}}}})
	if err == nil || !strings.Contains(err.Error(), "matches the marker") {
		t.Fatalf("error %v, want one about the marker", err)
	}
}

// TestArgumentPaths: every constant key chain a rule reads under mcp.arguments is listed, in the
// forms CEL allows, so that Level 2 can refuse case variants of exactly those keys.
func TestArgumentPaths(t *testing.T) {
	for _, c := range []struct {
		when string
		want [][]string
	}{
		{`mcp.method == "tools/call"`, nil},
		{`mcp.arguments.path.startsWith("/etc")`, [][]string{{"path"}}},
		{`mcp["arguments"]["path"] == "/"`, [][]string{{"path"}}},
		{`has(mcp.arguments.admin)`, [][]string{{"admin"}}},
		{`"path" in mcp.arguments`, [][]string{{"path"}}},
		{`"b" in mcp.arguments.a`, [][]string{{"a"}, {"a", "b"}}},
		{`mcp.arguments.a.b == 1`, [][]string{{"a"}, {"a", "b"}}},
		{`mcp.arguments.files[0].path == "/"`, [][]string{{"files"}, {"files", "path"}}},
		{`mcp.arguments.x == 1 || mcp.arguments.x == 2`, [][]string{{"x"}}},
		{`mcp.arguments[mcp.name] == "y"`, nil},
		{`mcp.name == "arguments"`, nil},
		{`{"arguments": {"path": "x"}}.arguments.path == "x"`, nil},
	} {
		set, err := Compile([]RuleSpec{{Name: "r", When: c.when, Action: RuleDeny}})
		if err != nil {
			t.Fatalf("%s: %v", c.when, err)
		}
		got := set.ArgumentPaths()
		if !equalPaths(got, c.want) {
			t.Errorf("%s: ArgumentPaths() = %q, want %q", c.when, got, c.want)
		}
	}
	set := mustCompile(t, []RuleSpec{
		{Name: "a", When: `mcp.arguments.path == "/"`, Action: RuleDeny},
		{Name: "b", When: `mcp.arguments.path == "/x"`, Action: RuleRedact, Redact: &Redact{Paths: []string{"$..x"}}},
		{Name: "c", Action: RuleRateLimit, RateLimit: &RateLimit{Key: `mcp.arguments.user`, Rate: 1, Burst: 1}},
	})
	if got := set.ArgumentPaths(); !equalPaths(got, [][]string{{"path"}, {"user"}}) {
		t.Errorf("union over rules: %q", got)
	}
}

func equalPaths(a, b [][]string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if strings.Join(a[i], "\x00") != strings.Join(b[i], "\x00") {
			return false
		}
	}
	return true
}

func TestRedactionsAll(t *testing.T) {
	s := mustCompile(t, []RuleSpec{
		{Name: "a", When: `mcp.method == "x"`, Action: RuleRedact, Redact: &Redact{Patterns: []string{`CANARY-[a-z]+`}}},
		{Name: "d", Action: RuleDeny, When: `mcp.method == "y"`},
		{Name: "b", Action: RuleRedact, Redact: &Redact{Paths: []string{"$..pin"}, Marker: "*"}},
	})
	got := s.Redactions()
	if len(got) != 2 || got[0].Rule != "a" || got[1].Rule != "b" || got[1].Marker != "*" {
		t.Fatalf("%+v", got)
	}
	if (*Set)(nil).Redactions() != nil {
		t.Fatal("nil set")
	}
}
