package policy

import (
	"errors"
	"strings"
	"testing"

	"cel.dev/cel-go/common/ast"
)

// FuzzCompile feeds arbitrary text to Compile, as `when` and as a rate limit key: whatever a
// configuration file holds, Compile and Evaluate must return, never panic, and every error must
// name its rule and point at or after the position the expression starts at.
func FuzzCompile(f *testing.F) {
	for _, seed := range []string{
		`mcp.method == "tools/call" && mcp.name.startsWith("denied_")`,
		`client.address`,
		`cidr_contains("10.0.0.0/8", client.address)`,
		`prefix(client.address, 32, 64)`,
		`mcp.arguments.a[0].b == "x" || has(mcp.arguments.c) || "k" in mcp.arguments.d`,
		`mcp["arguments"]["p"].startsWith("/etc")`,
	} {
		f.Add(seed)
	}
	start := Pos{File: "fuzz.yaml", Line: 7, Column: 11}
	f.Fuzz(func(t *testing.T, expr string) {
		rules := []RuleSpec{
			{Name: "when", When: expr, Action: RuleDeny, Pos: start},
			{Name: "key", Action: RuleRateLimit, Pos: start, KeyPos: start,
				RateLimit: &RateLimit{Key: expr, Rate: 1, Burst: 1}},
		}
		s, err := Compile(rules)
		if err != nil {
			var ces CompileErrors
			if !errors.As(err, &ces) || len(ces) == 0 {
				t.Fatalf("error is not CompileErrors: %T %v", err, err)
			}
			lines := strings.Count(expr, "\n")
			for _, e := range ces {
				if e.Rule != "when" && e.Rule != "key" {
					t.Errorf("error names rule %q: %v", e.Rule, e)
				}
				if e.Pos.File != start.File || e.Pos.Line < start.Line || e.Pos.Line > start.Line+lines || e.Pos.Column < start.Column {
					t.Errorf("position %v outside the expression (%d lines from %v): %v", e.Pos, lines+1, start, e)
				}
				if e.Msg == "" {
					t.Errorf("empty message: %v", e)
				}
			}
			return
		}
		if s.Len() != 2 {
			t.Fatalf("Len = %d", s.Len())
		}
		// A rule that reads argument keys reads the arguments: Level 2 must build them.
		if ap := s.ArgumentPaths(); len(ap) > 0 && !s.Reads("arguments") {
			t.Fatalf("ArgumentPaths %q, yet Reads(arguments) is false", ap)
		}
		// Nested comprehensions are exponential in their depth, which is a property of the
		// rule, not a bug; evaluate only rules that cannot take long.
		if !cheap(expr) {
			return
		}
		for _, in := range []*Input{nil, {}, toolCall("denied_x"), {MCP: map[string]any{"method": 1, "name": nil}}} {
			d := s.Evaluate(in)
			switch d.Action {
			case ActionAllow, ActionDeny, ActionRateLimited:
			default:
				t.Fatalf("action %q", d.Action)
			}
			if d.Action != ActionAllow && d.Rule == "" {
				t.Fatalf("%s names no rule: %+v", d.Action, d)
			}
			for _, e := range d.Errors {
				if e.Err == "" || len(e.Err) > maxErrLen || strings.ContainsAny(e.Err, "\r\n") {
					t.Fatalf("bad error message %q", e.Err)
				}
			}
			// Failing open, an error never denies: a deny comes from the deny rule matching.
			if in != nil {
				open := *in
				open.FailOpen = true
				if d := s.Evaluate(&open); d.Action == ActionDeny && d.Reason != "denied by rule when" {
					t.Fatalf("fail-open deny: %+v", d)
				}
			}
		}
	})
}

func cheap(expr string) bool {
	env, err := celEnv()
	if err != nil {
		return false
	}
	a, iss := env.Compile(expr)
	if iss.Err() != nil {
		return false
	}
	n := 0
	ast.PostOrderVisit(a.NativeRep().Expr(), ast.NewExprVisitor(func(e ast.Expr) {
		if e.Kind() == ast.ComprehensionKind {
			n++
		}
	}))
	return n <= 2 && len(expr) < 4096
}
