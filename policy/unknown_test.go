package policy

import (
	"strings"
	"testing"
)

// unknownBody serves a client_info the caller has (or nil).
type unknownBody struct{ ci map[string]any }

func (unknownBody) Arguments() map[string]any    { return nil }
func (unknownBody) Result() any                  { return nil }
func (b unknownBody) ClientInfo() map[string]any { return b.ci }

// TestUnknownIsARuleError: a field named in Vars.Unknown is not absent. Every way a rule can read
// it — a member, has(), !has(), an index, the whole variable, a rate limit key — fails the rule
// (deny with on_rule_error closed, skipped when open), while a rule that does not reach it decides
// as before.
func TestUnknownIsARuleError(t *testing.T) {
	for _, c := range []struct {
		name, when, key string
		want            Action // with FailOpen false
		wantErr         bool
	}{
		{name: "member", when: `mcp.client_info.name != "lab-agent"`, want: ActionDeny, wantErr: true},
		{name: "member equal", when: `mcp.client_info.name == "lab-agent-untrusted"`, want: ActionDeny, wantErr: true},
		{name: "has", when: `has(mcp.client_info)`, want: ActionDeny, wantErr: true},
		{name: "not has", when: `!has(mcp.client_info)`, want: ActionDeny, wantErr: true},
		{name: "index", when: `mcp["client_info"]["name"] == "x"`, want: ActionDeny, wantErr: true},
		{name: "short circuit", when: `mcp.method == "tools/call" && mcp.client_info.name == "x"`, want: ActionAllow},
		{name: "method reached", when: `mcp.method == "sampling/createMessage" && mcp.client_info.name == "x"`, want: ActionDeny, wantErr: true},
		{name: "other field", when: `mcp.method == "sampling/createMessage"`, want: ActionDeny},
		{name: "unknown string key", when: `true`, key: `mcp.version`, want: ActionDeny, wantErr: true},
	} {
		t.Run(c.name, func(t *testing.T) {
			spec := RuleSpec{Name: "r", When: c.when, Action: RuleDeny}
			if c.key != "" {
				spec = RuleSpec{Name: "r", When: c.when, Action: RuleRateLimit, RateLimit: &RateLimit{Rate: 0.001, Burst: 1, Key: c.key}}
			}
			set, err := Compile([]RuleSpec{spec})
			if err != nil {
				t.Fatal(err)
			}
			unknown := []string{"mcp.client_info"}
			if c.key != "" {
				unknown = []string{"mcp.version"}
			}
			for _, open := range []bool{false, true} {
				in := &Input{Vars: Vars{MCP: &Message{Method: "sampling/createMessage", Version: "2025-11-25", Direction: "server_to_client",
					Body: unknownBody{ci: map[string]any{"name": "lab-agent"}}}, Unknown: unknown}, FailOpen: open}
				d := set.Evaluate(in)
				want := c.want
				if open && c.wantErr {
					want = ActionAllow
				}
				if d.Action != want {
					t.Fatalf("open=%v: %s (%s), want %s", open, d.Action, d.Reason, want)
				}
				if c.wantErr != (len(d.Errors) > 0) {
					t.Fatalf("open=%v: errors %v, want error %v", open, d.Errors, c.wantErr)
				}
				if c.wantErr && !strings.Contains(d.Errors[0].Err, "cannot be established") {
					t.Fatalf("error %q does not say unknown", d.Errors[0].Err)
				}
				if len(d.Absent) > 0 {
					t.Fatalf("unknown reported absent: %v", d.Absent)
				}
			}
			// The same rule with the field known reads the value.
			in := &Input{Vars: Vars{MCP: &Message{Method: "sampling/createMessage", Version: "2025-11-25",
				Body: unknownBody{ci: map[string]any{"name": "lab-agent"}}}}}
			if d := set.Evaluate(in); len(d.Errors) > 0 {
				t.Fatalf("known field errored: %v", d.Errors)
			}
		})
	}
}

// TestEveryFieldHasProvenance: the table the README prints covers every field of every variable.
func TestEveryFieldHasProvenance(t *testing.T) {
	seen := map[string]bool{}
	for _, f := range Fields() {
		if f.Prov == "" {
			t.Errorf("%s: no provenance", f.Path)
		}
		seen[f.Path] = true
	}
	for p := range provenance {
		if !seen[p] {
			t.Errorf("provenance names %s, which is no field", p)
		}
	}
	md := ProvenanceMarkdown()
	for p := range seen {
		if !strings.Contains(md, "`"+p+"`") {
			t.Errorf("table lacks %s", p)
		}
	}
}
