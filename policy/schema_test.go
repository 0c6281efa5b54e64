package policy

import (
	"errors"
	"fmt"
	"reflect"
	"slices"
	"testing"
)

func TestUnknownFieldIsCompileError(t *testing.T) {
	pos := Pos{File: "mcpintercept.yaml", Line: 12, Column: 11}
	for _, tt := range []struct {
		name, when, want string
	}{
		{"misspelt mcp field", `mcp.tool_name == "x"`, `mcpintercept.yaml:12:14: rule r: when: undefined field 'tool_name'`},
		{"constant key", `mcp["tool_name"] == "x"`, `mcpintercept.yaml:12:15: rule r: when: undefined field 'tool_name'`},
		{"presence test", `has(client.adress)`, `mcpintercept.yaml:12:14: rule r: when: undefined field 'adress'`},
		{"nested object", `mcp.error.cod == 1`, `mcpintercept.yaml:12:20: rule r: when: undefined field 'cod'`},
		{"second line", "mcp.method == \"x\" &&\n  conn.snii == \"y\"", `mcpintercept.yaml:13:17: rule r: when: undefined field 'snii'`},
		{"field of the wrong variable", `http.name == "x"`, `mcpintercept.yaml:12:15: rule r: when: undefined field 'name'`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Compile([]RuleSpec{{Name: "r", When: tt.when, Action: RuleDeny, Pos: pos}})
			var ces CompileErrors
			if !errors.As(err, &ces) || len(ces) != 1 || ces[0].Error() != tt.want {
				t.Fatalf("got %v, want %s", err, tt.want)
			}
		})
	}
}

func TestFieldTypesAreChecked(t *testing.T) {
	for _, when := range []string{
		`mcp.name > 3`,
		`client.port == "80"`,
		`http.headers["x"] == 1`,
		`mcp.error.code.startsWith("x")`,
	} {
		if _, err := Compile([]RuleSpec{{Name: "r", When: when, Action: RuleDeny}}); err == nil {
			t.Errorf("%s compiled; a type mismatch can never match", when)
		}
	}
}

func TestCheckLevel(t *testing.T) {
	pos := Pos{File: "f.yaml", Line: 3, Column: 13}
	for _, tt := range []struct {
		name  string
		spec  RuleSpec
		level Level
		want  []string // nil: no error
	}{
		{"header fields at Level 1", RuleSpec{When: `mcp.method == "tools/call" && http.path == "/mcp" && mcp.name != ""`}, LevelHeaders, nil},
		{"arguments at Level 1", RuleSpec{When: `mcp.method == "tools/call" && mcp.arguments.path == "/"`},
			LevelHeaders, []string{`f.yaml:3:43: rule r: mcp.arguments needs awareness level 2, the route has level 1`}},
		{"arguments at Level 2", RuleSpec{When: `mcp.arguments.path == "/"`}, LevelBody, nil},
		{"presence test counts", RuleSpec{When: `has(mcp.result)`},
			LevelHeaders, []string{`f.yaml:3:17: rule r: mcp.result needs awareness level 2, the route has level 1`}},
		{"http on an opaque route", RuleSpec{When: `client.address == "10.0.0.1" && http.path == "/"`},
			LevelConn, []string{`f.yaml:3:45: rule r: http.path needs awareness level 1, the route has level 0`}},
		{"computed key reads every field", RuleSpec{When: `mcp[http.method] == "x"`},
			LevelHeaders, []string{`f.yaml:3:13: rule r: mcp used as a whole reads every field, which needs awareness level 2; the route has level 1`}},
		{"computed key into headers is Level 1", RuleSpec{When: `http.headers[mcp.name] == "x"`}, LevelHeaders, nil},
		{"tool integrity at Level 1", RuleSpec{When: `mcp.method == "tools/call" && "tag" in mcp.tool_findings`},
			LevelHeaders, []string{`f.yaml:3:52: rule r: mcp.tool_findings needs awareness level 2, the route has level 1`}},
		{"tool integrity at Level 2", RuleSpec{When: `mcp.tool_changed || !mcp.tool_pinned || size(mcp.tool_findings) > 0`}, LevelBody, nil},
		{"rate limit key", RuleSpec{Action: RuleRateLimit, KeyPos: Pos{File: "f.yaml", Line: 4, Column: 20},
			RateLimit: &RateLimit{Key: `mcp.client_info.name`, Rate: 1, Burst: 1}},
			LevelHeaders, []string{`f.yaml:4:20: rule r: mcp.client_info needs awareness level 2, the route has level 1`}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			spec := tt.spec
			spec.Name, spec.Pos = "r", pos
			if spec.Action == "" {
				spec.Action = RuleDeny
			}
			s := mustCompile(t, []RuleSpec{spec})
			err := s.CheckLevel(tt.level)
			var got []string
			var ces CompileErrors
			if err != nil && !errors.As(err, &ces) {
				t.Fatalf("error %T is not CompileErrors", err)
			}
			for _, e := range ces {
				got = append(got, e.Error())
			}
			if !slices.Equal(got, tt.want) {
				t.Errorf("got %q\nwant %q", got, tt.want)
			}
			if wantLevel := max(tt.level, s.Needs().Level); (err == nil) != (s.Needs().Level <= tt.level) {
				t.Errorf("Needs().Level = %d disagrees with CheckLevel(%d) (%d)", s.Needs().Level, tt.level, wantLevel)
			}
		})
	}
}

func TestNeeds(t *testing.T) {
	for _, tt := range []struct {
		when string
		want Needs
	}{
		{`client.address == "x"`, Needs{Level: LevelConn}},
		{`mcp.name == "x"`, Needs{Level: LevelHeaders}},
		{`http.headers["x-tenant"] == "a"`, Needs{Level: LevelHeaders, Headers: true}},
		{`"path" in mcp.arguments`, Needs{Level: LevelBody, Arguments: true, ArgumentPaths: [][]string{{"path"}}}},
		{`mcp.direction == "server_to_client" && string(mcp.result).contains("x")`, Needs{Level: LevelBody, Result: true, ServerMessages: true}},
		{`mcp.client_info.name == "x"`, Needs{Level: LevelBody, ClientInfo: true}},
		{`size(mcp) > 3`, Needs{Level: LevelBody, Arguments: true, Result: true, ClientInfo: true}},
		{`size(http) > 1`, Needs{Level: LevelHeaders, Headers: true}},
	} {
		s := mustCompile(t, []RuleSpec{{Name: "r", When: tt.when, Action: RuleDeny}})
		if got := s.Needs(); !reflect.DeepEqual(got, tt.want) {
			t.Errorf("%s: Needs() = %+v, want %+v", tt.when, got, tt.want)
		}
		if s.Reads("arguments") != tt.want.Arguments || s.Reads("result") != tt.want.Result {
			t.Errorf("%s: Reads disagrees with Needs", tt.when)
		}
	}
	red := mustCompile(t, []RuleSpec{{Name: "h", When: `mcp.method == "x"`, Action: RuleRedact, Redact: &Redact{Patterns: []string{`a+`}}}})
	if n := red.Needs(); len(n.Redactions) != 1 || n.Redactions[0].Rule != "h" {
		t.Errorf("Needs().Redactions = %v", n.Redactions)
	}
	var nilSet *Set
	if !reflect.DeepEqual(nilSet.Needs(), Needs{}) {
		t.Error("a nil Set needs something")
	}
}

// countingBody counts what Evaluate asked of it.
type countingBody struct {
	args, result, info int
}

func (b *countingBody) Arguments() map[string]any {
	b.args++
	return map[string]any{"path": "/etc/passwd", "n": int64(3)}
}

func (b *countingBody) Result() any { b.result++; return map[string]any{"content": "AKIA1"} }

func (b *countingBody) ClientInfo() map[string]any {
	b.info++
	return map[string]any{"name": "agent", "version": "1"}
}

type countingHeaders struct{ n int }

func (h *countingHeaders) HeaderMap() map[string]string {
	h.n++
	return map[string]string{"x-tenant": "blocked"}
}

func TestLazyValuesBuiltOnlyWhenRead(t *testing.T) {
	for _, tt := range []struct {
		name  string
		rules []RuleSpec
		want  countingBody
		hdrs  int
	}{
		{"no rule reads the body", []RuleSpec{{Name: "a", When: `mcp.name == "x"`, Action: RuleDeny}}, countingBody{}, 0},
		{"two rules read the arguments: decoded once", []RuleSpec{
			{Name: "a", When: `"path" in mcp.arguments && mcp.arguments.path == "/"`, Action: RuleDeny},
			{Name: "b", When: `mcp.arguments.n > 5`, Action: RuleDeny},
		}, countingBody{args: 1}, 0},
		{"headers and client info", []RuleSpec{
			{Name: "a", When: `http.headers["x-tenant"] == "ok" || mcp.client_info.name == "x"`, Action: RuleDeny},
		}, countingBody{info: 1}, 1},
		{"a whole variable reads everything", []RuleSpec{{Name: "a", When: `size(mcp) == 0`, Action: RuleDeny}},
			countingBody{args: 1, result: 1, info: 1}, 0},
	} {
		t.Run(tt.name, func(t *testing.T) {
			s := mustCompile(t, tt.rules)
			body, hdrs := &countingBody{}, &countingHeaders{}
			in := &Input{Vars: Vars{
				HTTP: &Request{Method: "POST", Path: "/mcp", Headers: hdrs},
				MCP:  &Message{Method: "tools/call", Name: "read", Body: body},
			}}
			for range 2 {
				*body, hdrs.n = countingBody{}, 0
				s.Evaluate(in)
				if *body != tt.want || hdrs.n != tt.hdrs {
					t.Fatalf("asked %+v and headers %d times, want %+v and %d", *body, hdrs.n, tt.want, tt.hdrs)
				}
			}
		})
	}
}

// typedAndMaps is one request in both forms of Input.
func typedAndMaps() (typed, maps *Input) {
	typed = &Input{Vars: Vars{
		Client: &Client{Address: "10.200.1.2", Port: 40000, Process: &Process{PID: 42, UID: 1000, GID: 1000, Comm: "agent", Exe: "/usr/bin/agent", Cgroup: 7}},
		Conn:   &Conn{OrigDst: "10.200.2.2:8443", OrigIP: "10.200.2.2", OrigPort: 8443, Mechanism: "nftables-tproxy", TLS: "terminate", Hello: true},
		HTTP:   &Request{Method: "POST", Path: "/mcp", Headers: HeaderMap{"x-tenant": "a", "x-n": "7"}},
		MCP: &Message{Version: "2025-06-18", Method: "tools/call", Name: "read_file", ID: "3", Direction: "client_to_server",
			Kind: "request", Body: &countingBody{}, Tools: &ToolIntegrity{Findings: []string{"pattern:important", "zero_width"}, Pinned: true}},
	}}
	maps = &Input{
		Client: map[string]any{"address": "10.200.1.2", "port": int64(40000), "pid": int64(42), "uid": int64(1000),
			"gid": int64(1000), "comm": "agent", "exe": "/usr/bin/agent", "cgroup": int64(7)},
		Conn: map[string]any{"orig_dst": "10.200.2.2:8443", "orig_ip": "10.200.2.2", "orig_port": int64(8443),
			"mechanism": "nftables-tproxy", "tls": "terminate", "sni": ""},
		HTTP: map[string]any{"method": "POST", "path": "/mcp", "headers": map[string]string{"x-tenant": "a", "x-n": "7"}},
		MCP: map[string]any{"version": "2025-06-18", "method": "tools/call", "name": "read_file", "id": "3",
			"direction": "client_to_server", "kind": "request",
			"arguments":     map[string]any{"path": "/etc/passwd", "n": int64(3)},
			"result":        map[string]any{"content": "AKIA1"},
			"client_info":   map[string]any{"name": "agent", "version": "1"},
			"tool_findings": []string{"pattern:important", "zero_width"}, "tool_pinned": true, "tool_changed": false},
	}
	return typed, maps
}

// TestTypedInputDecidesAsMaps: the typed facts and the map form of the same request get the same
// decision from every rule, absent fields and errors included.
func TestTypedInputDecidesAsMaps(t *testing.T) {
	whens := []string{
		`client.address == "10.200.1.2" && client.port == 40000`,
		`client.pid == 42 && client.uid == 1000 && client.gid == 1000 && client.cgroup == 7`,
		`client.comm == "agent" && client.exe.endsWith("/agent")`,
		`cidr_contains("10.200.2.0/24", conn.orig_ip) && conn.orig_port == 8443`,
		`conn.orig_dst == "10.200.2.2:8443" && conn.tls == "terminate" && conn.mechanism == "nftables-tproxy"`,
		`conn.sni == ""`, `has(conn.sni)`,
		`http.method == "POST" && http.path.startsWith("/m")`,
		`http.headers["x-tenant"] == "a"`, `int(http.headers["x-n"]) > 5`, `"x-tenant" in http.headers`,
		`http.headers["x-absent"] == "a"`, `size(http.headers) == 2`,
		`mcp.method == "tools/call" && mcp.name.startsWith("read_")`,
		`mcp.version < "2026-07-28"`, `mcp.id == "3" && mcp.kind == "request"`,
		`mcp.direction == "client_to_server"`,
		`mcp.session == "s1"`, `has(mcp.session)`, `mcp.tool == "x"`, `has(mcp.retry)`, `mcp.error.code == 1`,
		`mcp.arguments.path.startsWith("/etc")`, `"path" in mcp.arguments`, `mcp.arguments.n > 2`,
		`mcp.arguments.missing == 1`, `string(mcp.result).contains("AKIA")`,
		`mcp.client_info.name == "agent"`,
		`"zero_width" in mcp.tool_findings`, `"bidi" in mcp.tool_findings`, `size(mcp.tool_findings) == 2`,
		`mcp.tool_findings.exists(f, f.startsWith("pattern:"))`, `has(mcp.tool_findings)`,
		`mcp.tool_pinned && !mcp.tool_changed`, `mcp.tool_changed`, `has(mcp.tool_pinned)`,
		`mcp["name"] == "read_file"`, `mcp[http.method] == "x"`, `"name" in mcp`, `size(mcp) > 3`,
		`size(client) == 8`, `size(conn) == 6`, `client[conn.tls] == 1`,
		`mcp.name`, `int(mcp.name) > 1`,
	}
	for _, when := range whens {
		for _, action := range []string{RuleDeny, RuleRateLimit} {
			t.Run(fmt.Sprintf("%s/%s", action, when), func(t *testing.T) {
				spec := RuleSpec{Name: "r", Action: action, When: when}
				if action == RuleRateLimit {
					spec.RateLimit = &RateLimit{Key: `client.address + "/" + mcp.name`, Rate: 1e-9, Burst: 1}
				}
				compile := func() *Set {
					s, err := Compile([]RuleSpec{spec}, WithClock(newFakeClock().now))
					if err != nil && when != `mcp.name` {
						t.Fatalf("Compile: %v", err)
					}
					return s
				}
				st, sm := compile(), compile()
				if st == nil {
					return // `mcp.name` is a string: refused at compile time now
				}
				typed, maps := typedAndMaps()
				for i := range 2 {
					dt, dm := st.Evaluate(typed), sm.Evaluate(maps)
					if !reflect.DeepEqual(dt, dm) {
						t.Fatalf("evaluation %d:\n typed %+v\n maps  %+v", i, dt, dm)
					}
				}
			})
		}
	}
}

func TestAbsentTypedFields(t *testing.T) {
	s := mustCompile(t, []RuleSpec{
		{Name: "m", When: `mcp.method == "tools/call"`, Action: RuleDeny},
		{Name: "p", When: `client.pid == 1`, Action: RuleDeny},
		{Name: "s", When: `conn.sni == "x"`, Action: RuleDeny},
		{Name: "h", When: `http.headers["x"] == "1"`, Action: RuleDeny},
		{Name: "k", Action: RuleRateLimit, RateLimit: &RateLimit{Key: "mcp.session", Rate: 1, Burst: 1}},
	})
	in := &Input{Vars: Vars{
		Client: &Client{Address: "10.0.0.1"},
		Conn:   &Conn{OrigDst: "10.0.0.2:80"},
		HTTP:   &Request{Method: "POST", Headers: HeaderMap{}},
		MCP:    &Message{Version: "2025-06-18"},
	}}
	d := s.Evaluate(in)
	want := []string{"mcp.method", "client.pid", "conn.sni", "http.headers.x", "mcp.session"}
	if d.Action != ActionAllow || !slices.Equal(d.Absent, want) || len(d.Errors) != 0 {
		t.Errorf("got %+v, want allow with Absent %q", d, want)
	}
	// No typed facts at all: every field absent, as with empty maps (the absent bucket of k,
	// spent above, now limits).
	want = []string{"mcp.method", "client.pid", "conn.sni", "http.headers", "mcp.session"}
	if d := s.Evaluate(&Input{}); !slices.Equal(d.Absent, want) || len(d.Errors) != 0 {
		t.Errorf("empty input: %+v, want Absent %q", d, want)
	}
}

// The tool-integrity fields: absent without a verdict (Level 1, or a message that names no
// definition), present with an empty list and false when the route pins nothing, and read
// from the verdict otherwise.
func TestToolIntegrityFields(t *testing.T) {
	s := mustCompile(t, []RuleSpec{
		{Name: "hidden", When: `"zero_width" in mcp.tool_findings || "tag" in mcp.tool_findings`, Action: RuleDeny},
		{Name: "changed", When: `mcp.tool_changed`, Action: RuleDeny},
		{Name: "unpinned", When: `has(mcp.tool_pinned) && !mcp.tool_pinned && size(mcp.tool_findings) > 0`, Action: RuleDeny},
	})
	for _, tt := range []struct {
		name   string
		tools  *ToolIntegrity
		rule   string
		absent []string
	}{
		{"no verdict: absent", nil, "", []string{"mcp.tool_findings", "mcp.tool_changed"}}, // has() asks, it does not miss
		{"no tool_pins: present, empty", &ToolIntegrity{}, "", nil},
		{"zero-width finding", &ToolIntegrity{Findings: []string{"zero_width"}, Pinned: true}, "hidden", nil},
		{"changed", &ToolIntegrity{Pinned: true, Changed: true}, "changed", nil},
		{"unpinned with a pattern", &ToolIntegrity{Findings: []string{"pattern:important"}}, "unpinned", nil},
		{"pinned with a pattern", &ToolIntegrity{Findings: []string{"pattern:important"}, Pinned: true}, "", nil},
	} {
		t.Run(tt.name, func(t *testing.T) {
			d := s.Evaluate(&Input{Vars: Vars{MCP: &Message{Method: "tools/call", Name: "echo", Tools: tt.tools}}})
			if d.Rule != tt.rule || len(d.Errors) != 0 || !slices.Equal(d.Absent, tt.absent) {
				t.Errorf("got rule %q absent %q errors %v, want rule %q absent %q", d.Rule, d.Absent, d.Errors, tt.rule, tt.absent)
			}
		})
	}
}
