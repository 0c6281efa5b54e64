package policy

import (
	"errors"
	"slices"
	"strings"
	"testing"
)

// fedCall is a tools/call on a federation's aggregate endpoint: the client asked for
// "files.read", the route table sends it to downstream "files", which lists the tool as "read".
func fedCall() Vars {
	return Vars{
		MCP:        &Message{Method: "tools/call", Name: "files.read", Direction: "client_to_server", Kind: "request"},
		Downstream: &Downstream{ID: "files", Tool: "read"},
	}
}

// The downstream variable: a rule reads which downstream a call goes to, mcp.name staying the
// aggregate name; outside a federation (Vars.Downstream nil) every field is absent, so a rule on
// it does not match and has() is false.
func TestDownstreamVariable(t *testing.T) {
	plain := Vars{MCP: &Message{Method: "tools/call", Name: "files.read", Direction: "client_to_server", Kind: "request"}}
	noTool := fedCall()
	noTool.Downstream = &Downstream{ID: "files"}
	other := fedCall()
	other.MCP.Name, other.Downstream = "git.read", &Downstream{ID: "git", Tool: "read"}
	for _, tt := range []struct {
		name       string
		when       string
		vars       Vars
		match      bool
		wantAbsent []string
	}{
		{"federation call", `mcp.name == "files.read" && downstream.id == "files" && downstream.tool == "read"`, fedCall(), true, nil},
		{"another downstream", `mcp.name == "files.read" && downstream.id == "files" && downstream.tool == "read"`, other, false, nil},
		{"id alone", `downstream.id == "files"`, fedCall(), true, nil},
		{"id outside federation", `downstream.id == "files"`, plain, false, []string{"downstream.id"}},
		{"tool outside federation", `downstream.tool == "read"`, plain, false, []string{"downstream.tool"}},
		{"negation outside federation", `downstream.id != "files"`, plain, false, []string{"downstream.id"}},
		{"has id", `has(downstream.id)`, fedCall(), true, nil},
		{"has id outside federation", `has(downstream.id)`, plain, false, nil},
		{"not has id outside federation", `!has(downstream.id)`, plain, true, nil},
		{"has tool outside federation", `has(downstream.tool)`, plain, false, nil},
		{"empty tool is absent", `downstream.tool == ""`, noTool, false, []string{"downstream.tool"}},
		{"has empty tool", `has(downstream.tool)`, noTool, false, nil},
		{"constant key", `downstream["id"] == "files"`, fedCall(), true, nil},
		{"constant key outside federation", `downstream["id"] == "files"`, plain, false, []string{"downstream.id"}},
		{"computed key", `downstream[mcp.name.split(".")[0] == "files" ? "tool" : "id"] == "read"`, fedCall(), true, nil},
		{"membership", `"tool" in downstream`, fedCall(), true, nil},
		{"membership outside federation", `"id" in downstream`, plain, false, nil},
		{"size", `size(downstream) == 2`, fedCall(), true, nil},
		{"size outside federation", `size(downstream) == 0`, plain, true, nil},
		{"name is not split", `mcp.name == downstream.id + "." + downstream.tool`, fedCall(), true, nil},
	} {
		t.Run(tt.name, func(t *testing.T) {
			set := mustCompile(t, []RuleSpec{{Name: "r", Action: RuleDeny, When: tt.when}})
			d := set.Evaluate(&Input{Vars: tt.vars})
			if len(d.Errors) > 0 {
				t.Fatalf("errors: %v", d.Errors)
			}
			if got := d.Rule == "r"; got != tt.match {
				t.Errorf("matched %v, want %v (%s: %s)", got, tt.match, d.Action, d.Reason)
			}
			if !slices.Equal(d.Absent, tt.wantAbsent) {
				t.Errorf("absent %v, want %v", d.Absent, tt.wantAbsent)
			}
		})
	}
}

// A rate limit keyed by downstream.id meters each downstream apart (the string fast path), and a
// call outside a federation goes to the rule's absent bucket.
func TestDownstreamRateLimitKey(t *testing.T) {
	set := mustCompile(t, []RuleSpec{{Name: "per-downstream", Action: RuleRateLimit, When: `mcp.method == "tools/call"`,
		RateLimit: &RateLimit{Key: `downstream.id`, Rate: 1e-9, Burst: 1}}})
	for _, tt := range []struct {
		name string
		ds   *Downstream
		want Action
	}{
		{"files first", &Downstream{ID: "files", Tool: "read"}, ActionAllow},
		{"files again", &Downstream{ID: "files", Tool: "write"}, ActionRateLimited},
		{"git first", &Downstream{ID: "git", Tool: "read"}, ActionAllow},
		{"outside federation", nil, ActionAllow},
		{"outside federation again", nil, ActionRateLimited},
	} {
		t.Run(tt.name, func(t *testing.T) {
			d := set.Evaluate(&Input{Vars: Vars{MCP: &Message{Method: "tools/call"}, Downstream: tt.ds}})
			if d.Action != tt.want {
				t.Errorf("got %s (%s), want %s", d.Action, d.Reason, tt.want)
			}
			if wantAbsent := tt.ds == nil; wantAbsent != slices.Contains(d.Absent, "downstream.id") {
				t.Errorf("absent %v", d.Absent)
			}
		})
	}
}

// A downstream field named in Vars.Unknown fails the rule, has() included, as every unknown field.
func TestDownstreamUnknown(t *testing.T) {
	for _, when := range []string{`downstream.id == "files"`, `has(downstream.id)`, `!has(downstream.id)`, `downstream["id"] == "files"`} {
		t.Run(when, func(t *testing.T) {
			set := mustCompile(t, []RuleSpec{{Name: "r", Action: RuleDeny, When: when}})
			v := fedCall()
			v.Unknown = []string{"downstream.id"}
			d := set.Evaluate(&Input{Vars: v})
			if d.Action != ActionDeny || len(d.Errors) != 1 || !strings.Contains(d.Errors[0].Err, "downstream.id cannot be established") {
				t.Errorf("got %s, errors %v; want a failed rule denying closed", d.Action, d.Errors)
			}
		})
	}
}

// downstream.* needs Level 2: a route that cannot see the body cannot route by tool.
func TestDownstreamLevel(t *testing.T) {
	pos := Pos{File: "f.yaml", Line: 3, Column: 13}
	for _, tt := range []struct {
		name  string
		when  string
		level Level
		want  string // "": no error
	}{
		{"id at Level 2", `downstream.id == "files"`, LevelBody, ""},
		{"tool at Level 2", `has(downstream.tool)`, LevelBody, ""},
		{"id at Level 1", `downstream.id == "files"`, LevelHeaders, `f.yaml:3:13: rule r: downstream.id needs awareness level 2, the route has level 1`},
		{"tool at Level 0", `downstream.tool == "read"`, LevelConn, `f.yaml:3:13: rule r: downstream.tool needs awareness level 2, the route has level 0`},
		{"whole at Level 1", `size(downstream) > 0`, LevelHeaders, `f.yaml:3:18: rule r: downstream used as a whole reads every field, which needs awareness level 2; the route has level 1`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			set := mustCompile(t, []RuleSpec{{Name: "r", Action: RuleDeny, When: tt.when, Pos: pos}})
			if got := set.Needs().Level; got != LevelBody {
				t.Errorf("Needs().Level %d, want %d", got, LevelBody)
			}
			err := set.CheckLevel(tt.level)
			var ces CompileErrors
			switch {
			case tt.want == "" && err != nil:
				t.Errorf("CheckLevel(%d): %v", tt.level, err)
			case tt.want != "" && (!errors.As(err, &ces) || len(ces) != 1 || ces[0].Error() != tt.want):
				t.Errorf("CheckLevel(%d): %v, want %s", tt.level, err, tt.want)
			}
		})
	}
}

func TestDownstreamSchema(t *testing.T) {
	for _, when := range []string{`downstream.name == "x"`, `downstream.id == 1`, `downstream.tool.size() == "x"`, `downstream["server"] == "x"`} {
		if _, err := Compile([]RuleSpec{{Name: "r", Action: RuleDeny, When: when}}); err == nil {
			t.Errorf("%s compiled", when)
		}
	}
	want := map[string]struct {
		prov Provenance
		note string
	}{
		"downstream.id":   {ProvAppliance, "route table"},
		"downstream.tool": {ProvServer, "tools/list"},
	}
	for _, f := range Fields() {
		w, ok := want[f.Path]
		if !ok {
			continue
		}
		delete(want, f.Path)
		if f.Prov != w.prov || f.Level != LevelBody || f.Type != "string" || !strings.Contains(f.Note, w.note) {
			t.Errorf("%s: %+v, want provenance %s, level 2, string, note naming %q", f.Path, f, w.prov, w.note)
		}
		if row := "| `" + f.Path + "` | 2 | " + string(w.prov) + " |"; !strings.Contains(ProvenanceMarkdown(), row) {
			t.Errorf("ProvenanceMarkdown has no row %q", row)
		}
	}
	for p := range want {
		t.Errorf("Fields() lists no %s", p)
	}
}

// Explain names downstream.* as a field the input may not supply (an offline replay of records
// that carry no route), and evaluates it when known.
func TestDownstreamExplain(t *testing.T) {
	set := mustCompile(t, []RuleSpec{{Name: "r", Action: RuleDeny, When: `downstream.id == "files"`}})
	noDownstream := func(f string) bool { return !strings.HasPrefix(f, "downstream") }
	ex := set.Explain(&Input{Vars: fedCall()}, noDownstream)
	if len(ex.Rules) != 1 || ex.Rules[0].Outcome != OutcomeUnknown || !slices.Equal(ex.Rules[0].Unknown, []string{"downstream.id"}) || !ex.Unknown {
		t.Errorf("unknown route: %+v", ex)
	}
	ex = set.Explain(&Input{Vars: fedCall()}, nil)
	if len(ex.Rules) != 1 || ex.Rules[0].Outcome != OutcomeMatch || ex.Decision.Action != ActionDeny {
		t.Errorf("known route: %+v", ex)
	}
}
