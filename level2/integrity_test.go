package level2

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"

	"mcpintercept/integrity"
	"mcpintercept/policy"
)

// Tool integrity in Level 2 (issue 20) with a scripted guard: what the lists show and what the
// calls get must follow the guard's verdicts, and the list filter and the call check must read
// the same verdict (a client never sees a tool it may not call, and vice versa).

// fakeGuard records what Level 2 asks of it and answers with scripted verdicts.
type fakeGuard struct {
	mu       sync.Mutex
	verdicts map[string]integrity.Verdict // by "kind/name"
	unknown  integrity.Verdict            // Lookup's answer for a name not in verdicts (ok false)
	events   []integrity.Event            // returned by every Observe
	observes []observed
	lookups  []looked
	forgets  []integrity.Server
}

type observed struct {
	srv    integrity.Server
	viewer string
	defs   []integrity.Def
	whole  bool
}

type looked struct {
	srv    integrity.Server
	viewer string
	kind   integrity.Kind
	name   string
}

func newFakeGuard() *fakeGuard { return &fakeGuard{verdicts: map[string]integrity.Verdict{}} }

func (g *fakeGuard) set(kind integrity.Kind, name string, v integrity.Verdict) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.verdicts[string(kind)+"/"+name] = v
}

func (g *fakeGuard) Observe(srv integrity.Server, viewer string, defs []integrity.Def, whole bool) ([]integrity.Verdict, []integrity.Event) {
	g.mu.Lock()
	defer g.mu.Unlock()
	cp := make([]integrity.Def, len(defs))
	vs := make([]integrity.Verdict, len(defs))
	for i, d := range defs {
		cp[i] = integrity.Def{Kind: d.Kind, Name: d.Name, Raw: append(json.RawMessage(nil), d.Raw...)}
		vs[i] = g.verdicts[string(d.Kind)+"/"+d.Name]
	}
	g.observes = append(g.observes, observed{srv, viewer, cp, whole})
	return vs, g.events
}

func (g *fakeGuard) Lookup(srv integrity.Server, viewer string, kind integrity.Kind, name string) (integrity.Verdict, bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.lookups = append(g.lookups, looked{srv, viewer, kind, name})
	v, ok := g.verdicts[string(kind)+"/"+name]
	if !ok {
		return g.unknown, false
	}
	return v, true
}

func (g *fakeGuard) Forget(srv integrity.Server) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.forgets = append(g.forgets, srv)
}

func (g *fakeGuard) snapshot() ([]observed, []looked, []integrity.Server) {
	g.mu.Lock()
	defer g.mu.Unlock()
	return slices.Clone(g.observes), slices.Clone(g.lookups), slices.Clone(g.forgets)
}

var rugPulled = integrity.Verdict{Hash: "sha256:bb", Pinned: true, Changed: true, Quarantined: true,
	Reason: "tool definition changed since it was pinned"}

// integrityHarness runs Level 2 with guard g (nil: none) in front of u, as the lab's client
// 10.200.1.2 reaching the server 10.200.2.2:3011 (the requests say Host: x).
func integrityHarness(t *testing.T, u *upstream, rules []policy.RuleSpec, g ToolGuard, mod func(*Flow)) *harness {
	t.Helper()
	return newHarnessWith(t, u, rules, Options{}, NewSessions(0), func(f *Flow) {
		f.Conn = &policy.Conn{OrigDst: "10.200.2.2:3011", OrigIP: "10.200.2.2", OrigPort: 3011, TLS: "plaintext"}
		f.Client = &policy.Client{Address: "10.200.1.2", Port: 40000}
		if g != nil {
			f.Tools = g
		}
		if mod != nil {
			mod(f)
		}
	})
}

// rpcError is the error member of a JSON-RPC error response.
type rpcError struct {
	Code    int        `json:"code"`
	Message string     `json:"message"`
	Data    denialData `json:"data"`
}

func errorOf(t *testing.T, body []byte) rpcError {
	t.Helper()
	s := string(body)
	if i := strings.Index(s, "data: "); i >= 0 {
		s = s[i+6:]
		s = s[:strings.IndexByte(s, '\n')]
	}
	var m struct {
		Error *rpcError `json:"error"`
	}
	if err := json.Unmarshal([]byte(s), &m); err != nil || m.Error == nil {
		t.Fatalf("response %q is not a JSON-RPC error (%v)", body, err)
	}
	return *m.Error
}

const threeTools = `{"tools":[{"name":"echo","description":"says it back","inputSchema":{"type":"object"}},` +
	`{"name":"rugpull","description":"now with <IMPORTANT> instructions","inputSchema":{"type":"object"}},` +
	`{"name":"denied_x","inputSchema":{"type":"object"}}]}`

// A quarantined tool is hidden from tools/list (JSON and SSE, with and without a rule set) and
// its call refused with -31006 naming the appliance, the server never seeing it; the guard was
// asked about the list once, with the entries as the server sent them, and about the call.
func TestToolIntegrityQuarantine(t *testing.T) {
	for _, sse := range []bool{false, true} {
		for _, withRules := range []bool{false, true} {
			t.Run(fmt.Sprintf("sse=%v/rules=%v", sse, withRules), func(t *testing.T) {
				g := newFakeGuard()
				g.set(integrity.KindTool, "rugpull", rugPulled)
				g.set(integrity.KindTool, "echo", integrity.Verdict{Pinned: true})
				g.set(integrity.KindPrompt, "greet", integrity.Verdict{Quarantined: true, Reason: "prompt definition changed since it was pinned"})
				u := newUpstream(t, listServer(map[string]string{"tools/list": threeTools, "prompts/list": `{"prompts":[{"name":"greet"},{"name":"ok"}]}`}, sse))
				var rules []policy.RuleSpec
				want := []string{"echo", "denied_x"}
				if withRules {
					rules, want = surfaceRules, []string{"echo"}
				}
				h := integrityHarness(t, u, rules, g, nil)

				r := post(t, h.addr, jsonHeaders, req(1, "tools/list", `{}`))
				if got := names(resultOf(t, r.body)["tools"], "name"); !slices.Equal(got, want) {
					t.Fatalf("tools %v, want %v (%s)", got, want, r.body)
				}
				obs, _, _ := g.snapshot()
				if len(obs) != 1 {
					t.Fatalf("Observe called %d times for one list", len(obs))
				}
				o := obs[0]
				if o.srv.Key != "x:3011/mcp" || o.viewer != "10.200.1.2" || !o.whole {
					t.Fatalf("Observe(%+v, %q, whole %v)", o.srv, o.viewer, o.whole)
				}
				var defNames []string
				for _, d := range o.defs {
					if d.Kind != integrity.KindTool {
						t.Fatalf("def %q of kind %q", d.Name, d.Kind)
					}
					defNames = append(defNames, d.Name)
				}
				if !slices.Equal(defNames, []string{"echo", "rugpull", "denied_x"}) {
					t.Fatalf("defs %v", defNames)
				}
				if want := `{"name":"rugpull","description":"now with <IMPORTANT> instructions","inputSchema":{"type":"object"}}`; string(o.defs[1].Raw) != want {
					t.Fatalf("Raw %s, want the entry as sent", o.defs[1].Raw)
				}
				lr := h.awaitRecord(t, func(r *Record) bool { return r.Method == "tools/list" && r.Direction == ClientToServer })
				if !strings.Contains(lr.Reason, "rugpull") || !strings.Contains(lr.Reason, "1 quarantined by tool integrity") || !strings.Contains(lr.Reason, ruleIntegrity) {
					t.Fatalf("list record reason %q", lr.Reason)
				}

				r = post(t, h.addr, jsonHeaders, req(2, "prompts/list", `{}`))
				if got := names(resultOf(t, r.body)["prompts"], "name"); !slices.Equal(got, []string{"ok"}) {
					t.Fatalf("prompts %v (%s)", got, r.body)
				}

				before := u.calls.Load()
				r = post(t, h.addr, jsonHeaders, call(3, "rugpull", `{}`))
				if r.status != 200 {
					t.Fatalf("status %d", r.status)
				}
				denial(t, r, "3", CodeQuarantined, ruleIntegrity)
				e := errorOf(t, r.body)
				if e.Message != "tool quarantined by mcpintercept" || e.Data.Reason != rugPulled.Reason {
					t.Fatalf("error %+v", e)
				}
				r = post(t, h.addr, jsonHeaders, `{"jsonrpc":"2.0","id":4,"method":"prompts/get","params":{"name":"greet"}}`)
				denial(t, r, "4", CodeQuarantined, ruleIntegrity)
				if e := errorOf(t, r.body); e.Message != "prompt quarantined by mcpintercept" {
					t.Fatalf("prompt error %+v", e)
				}
				if u.calls.Load() != before {
					t.Fatal("the server saw a quarantined call")
				}
				cr := h.awaitRecord(t, func(r *Record) bool { return r.Method == "tools/call" && r.Name == "rugpull" })
				if cr.Decision != policy.ActionDeny || cr.Rule != ruleIntegrity || cr.Reason != rugPulled.Reason {
					t.Fatalf("call record %+v", cr)
				}

				r = post(t, h.addr, jsonHeaders, call(5, "echo", `{}`))
				if resultOf(t, r.body) == nil || u.calls.Load() != before+1 {
					t.Fatalf("echo call: %s", r.body)
				}
				_, lks, _ := g.snapshot()
				wantLookups := []looked{
					{integrity.Server{Key: "x:3011/mcp"}, "10.200.1.2", integrity.KindTool, "rugpull"},
					{integrity.Server{Key: "x:3011/mcp"}, "10.200.1.2", integrity.KindPrompt, "greet"},
					{integrity.Server{Key: "x:3011/mcp"}, "10.200.1.2", integrity.KindTool, "echo"},
				}
				if !slices.Equal(lks, wantLookups) {
					t.Fatalf("lookups %+v\nwant %+v", lks, wantLookups)
				}
			})
		}
	}
}

// A rule on the guard's findings hides a tool from the list exactly when it refuses its call;
// so do rules on tool_changed and tool_pinned. Both read one verdict.
func TestToolIntegrityListAndCallAgree(t *testing.T) {
	g := newFakeGuard()
	g.set(integrity.KindTool, "plain", integrity.Verdict{Pinned: true})
	g.set(integrity.KindTool, "zw", integrity.Verdict{Pinned: true, Findings: []string{"zero_width"}})
	g.set(integrity.KindTool, "tagged", integrity.Verdict{Pinned: true, Findings: []string{"ansi", "tag"}})
	g.set(integrity.KindTool, "unpinned", integrity.Verdict{})
	g.set(integrity.KindTool, "pattern", integrity.Verdict{Pinned: true, Findings: []string{"pattern:important"}})
	all := []string{"plain", "zw", "tagged", "unpinned", "pattern", "never_listed"}
	var entries []string
	for _, n := range all[:5] {
		entries = append(entries, fmt.Sprintf(`{"name":%q,"inputSchema":{"type":"object"}}`, n))
	}
	u := newUpstream(t, listServer(map[string]string{"tools/list": `{"tools":[` + strings.Join(entries, ",") + `]}`}, false))
	rules := []policy.RuleSpec{
		{Name: "no-hidden-text", When: `mcp.method == "tools/call" && ("zero_width" in mcp.tool_findings || "tag" in mcp.tool_findings)`, Action: "deny"},
		{Name: "pinned-only", When: `mcp.method == "tools/call" && !mcp.tool_pinned && mcp.name != "never_listed"`, Action: "deny"},
	}
	h := integrityHarness(t, u, rules, g, nil)
	r := post(t, h.addr, jsonHeaders, req(1, "tools/list", `{}`))
	listed := names(resultOf(t, r.body)["tools"], "name")
	if !slices.Equal(listed, []string{"plain", "pattern"}) {
		t.Fatalf("listed %v", listed)
	}
	for i, n := range all[:5] {
		before := u.calls.Load()
		r := post(t, h.addr, jsonHeaders, call(10+i, n, `{}`))
		called := u.calls.Load() != before
		if called != slices.Contains(listed, n) {
			t.Errorf("tool %s: listed %v, but its call reached the server %v (%s)", n, slices.Contains(listed, n), called, r.body)
		}
		if !called && errorOf(t, r.body).Code != CodeDenied {
			t.Errorf("tool %s refused with %s", n, r.body)
		}
	}
	// Unknown to the guard (learn: not quarantined): the variables are present, empty.
	before := u.calls.Load()
	post(t, h.addr, jsonHeaders, call(20, "never_listed", `{}`))
	if u.calls.Load() != before+1 {
		t.Fatal("a tool unknown to a learn guard was refused")
	}
}

// On a route without tool_pins the variables are still present on calls, prompts/get and list
// probes (empty, false), so rules stay valid everywhere; absent on other messages.
func TestToolIntegrityVariablesWithoutGuard(t *testing.T) {
	u := newUpstream(t, listServer(map[string]string{
		"tools/list":               `{"tools":[{"name":"a"},{"name":"b"}]}`,
		"prompts/list":             `{"prompts":[{"name":"p"}]}`,
		"resources/list":           `{"resources":[{"uri":"file:///r","name":"r"}]}`,
		"resources/templates/list": `{"resourceTemplates":[{"uriTemplate":"file:///{x}","name":"t"}]}`,
	}, false))
	rules := []policy.RuleSpec{
		{Name: "unpinned-b", When: `mcp.method == "tools/call" && !mcp.tool_pinned && !mcp.tool_changed && size(mcp.tool_findings) == 0 && mcp.name == "b"`, Action: "deny"},
		{Name: "prompt-vars", When: `mcp.method == "prompts/get" && has(mcp.tool_pinned)`, Action: "deny"},
		// A template entry is a definition (its probe carries the variables); a resource is not.
		{Name: "resource-vars", When: `mcp.method == "resources/read" && has(mcp.tool_findings)`, Action: "deny"},
		{Name: "responses-have-none", When: `mcp.direction == "server_to_client" && has(mcp.tool_findings)`, Action: "deny"},
	}
	h := integrityHarness(t, u, rules, nil, nil)
	for _, c := range []struct {
		method, member, key string
		want                []string
	}{
		{"tools/list", "tools", "name", []string{"a"}},
		{"prompts/list", "prompts", "name", nil},
		{"resources/list", "resources", "uri", []string{"file:///r"}},
		{"resources/templates/list", "resourceTemplates", "uriTemplate", nil},
	} {
		r := post(t, h.addr, jsonHeaders, req(1, c.method, `{}`))
		res := resultOf(t, r.body)
		if res == nil {
			t.Fatalf("%s: %s (a response rule read a tool variable)", c.method, r.body)
		}
		if got := names(res[c.member], c.key); !slices.Equal(got, c.want) {
			t.Errorf("%s: %v, want %v", c.method, got, c.want)
		}
	}
	denial(t, post(t, h.addr, jsonHeaders, call(2, "b", `{}`)), "2", CodeDenied, "unpinned-b")
	denial(t, post(t, h.addr, jsonHeaders, `{"jsonrpc":"2.0","id":3,"method":"prompts/get","params":{"name":"p"}}`), "3", CodeDenied, "prompt-vars")
	if r := post(t, h.addr, jsonHeaders, call(4, "a", `{}`)); resultOf(t, r.body) == nil {
		t.Fatalf("call a: %s", r.body)
	}
	if r := post(t, h.addr, jsonHeaders, `{"jsonrpc":"2.0","id":5,"method":"resources/read","params":{"uri":"file:///r"}}`); resultOf(t, r.body) == nil {
		t.Fatalf("resources/read: %s", r.body)
	}
}

// A 2025-03-26 batch: two list responses in one body are each observed and filtered; a batch
// call naming a quarantined tool is refused whole, the server seeing none of it.
func TestToolIntegrityBatch(t *testing.T) {
	g := newFakeGuard()
	g.set(integrity.KindTool, "rugpull", rugPulled)
	g.set(integrity.KindPrompt, "bad", integrity.Verdict{Quarantined: true, Reason: "prompt not pinned (tool_pins: enforce): approve it"})
	u := newUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `[{"jsonrpc":"2.0","id":1,"result":`+threeTools+`},{"jsonrpc":"2.0","id":2,"result":{"prompts":[{"name":"bad"},{"name":"good"}]}}]`)
	})
	h := integrityHarness(t, u, nil, g, nil)
	hdr := jsonHeaders + "MCP-Protocol-Version: 2025-03-26\r\n"
	r := post(t, h.addr, hdr, `[`+req(1, "tools/list", `{}`)+`,`+req(2, "prompts/list", `{}`)+`]`)
	var batch []struct {
		ID     int            `json:"id"`
		Result map[string]any `json:"result"`
	}
	if err := json.Unmarshal(r.body, &batch); err != nil || len(batch) != 2 {
		t.Fatalf("batch response %s: %v", r.body, err)
	}
	if got := names(batch[0].Result["tools"], "name"); !slices.Equal(got, []string{"echo", "denied_x"}) {
		t.Fatalf("tools %v", got)
	}
	if got := names(batch[1].Result["prompts"], "name"); !slices.Equal(got, []string{"good"}) {
		t.Fatalf("prompts %v", got)
	}
	if obs, _, _ := g.snapshot(); len(obs) != 2 || obs[0].defs[0].Kind != integrity.KindTool || obs[1].defs[0].Kind != integrity.KindPrompt {
		t.Fatalf("observes %+v", obs)
	}
	before := u.calls.Load()
	r = post(t, h.addr, hdr, `[`+call(3, "echo", `{}`)+`,`+call(4, "rugpull", `{}`)+`]`)
	var errs []struct {
		ID    int      `json:"id"`
		Error rpcError `json:"error"`
	}
	if err := json.Unmarshal(r.body, &errs); err != nil || len(errs) != 2 {
		t.Fatalf("batch refusal %s: %v", r.body, err)
	}
	for _, e := range errs {
		if e.Error.Code != CodeQuarantined || e.Error.Data.Rule != ruleIntegrity || e.Error.Data.Intermediary != Intermediary {
			t.Fatalf("batch refusal %s", r.body)
		}
	}
	if u.calls.Load() != before {
		t.Fatal("the server saw a batch with a quarantined call")
	}
}

// The guard's events become records: server_to_client, kind tool_integrity, the list method,
// the definition's name (a template's scrubbed of credentials), deny when quarantined, rule
// tool-integrity or tool-divergence, the detail as reason.
func TestToolIntegrityEventsRecorded(t *testing.T) {
	g := newFakeGuard()
	g.events = []integrity.Event{
		{Kind: integrity.EventChanged, DefKind: integrity.KindTool, Name: "echo", Quarantined: true,
			Detail: "tool echo changed since it was pinned: description (sha256:ab… → sha256:cd…)"},
		{Kind: integrity.EventDivergence, DefKind: integrity.KindTool, Name: "read", Viewers: []string{"a", "b"},
			Detail: "tool read diverged between clients: a sha256:01… b sha256:02…"},
		{Kind: integrity.EventPinned, DefKind: integrity.KindTemplate, Name: "https://user:secret@h.example/{x}",
			Detail: "template pinned\x1b[31m sha256:ef…"},
	}
	u := newUpstream(t, listServer(map[string]string{"tools/list": `{"tools":[{"name":"echo"}]}`}, true))
	h := integrityHarness(t, u, nil, g, nil)
	post(t, h.addr, jsonHeaders, req(1, "tools/list", `{}`))
	var evs []*Record
	h.awaitRecord(t, func(r *Record) bool {
		evs = evs[:0]
		for _, r := range h.recs() {
			if r.Kind == kindToolIntegrity {
				evs = append(evs, r)
			}
		}
		return len(evs) == 3
	})
	want := []struct {
		name, rule, reason string
		decision           policy.Action
	}{
		{"echo", ruleIntegrity, g.events[0].Detail, policy.ActionDeny},
		{"read", ruleDivergence, g.events[1].Detail, policy.ActionAllow},
		{"https://h.example/{x}", ruleIntegrity, "template pinned [31m sha256:ef…", policy.ActionAllow},
	}
	for i, w := range want {
		r := evs[i]
		if r.Direction != ServerToClient || r.Method != "tools/list" || r.Name != w.name || r.Rule != w.rule ||
			r.Reason != w.reason || r.Decision != w.decision || r.Path != "/mcp" {
			t.Errorf("event record %d: %+v, want %+v", i, r, w)
		}
	}
	for _, r := range h.recs() {
		if strings.Contains(r.Name+r.Reason, "secret") {
			t.Fatalf("a record carries a credential: %+v", r)
		}
	}
}

// notifications/tools/list_changed (and the prompts and resources ones) make the guard forget
// what the server's definitions were seen as; other notifications do not.
func TestToolIntegrityListChangedForgets(t *testing.T) {
	g := newFakeGuard()
	u := newUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		for _, m := range []string{"notifications/tools/list_changed", "notifications/message", "notifications/prompts/list_changed", "notifications/resources/list_changed"} {
			fmt.Fprintf(w, "event: message\ndata: {\"jsonrpc\":\"2.0\",\"method\":%q,\"params\":{}}\n\n", m)
		}
		io.WriteString(w, "event: message\ndata: {\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{\"content\":[]}}\n\n")
	})
	h := integrityHarness(t, u, nil, g, nil)
	post(t, h.addr, jsonHeaders, call(1, "echo", `{}`))
	_, _, fg := g.snapshot()
	if len(fg) != 3 {
		t.Fatalf("Forget called %d times, want 3", len(fg))
	}
	for _, s := range fg {
		if s.Key != "x:3011/mcp" {
			t.Fatalf("Forget(%+v)", s)
		}
	}
}

// whole: a first page (no cursor) that is also the last (no nextCursor, or an empty or null one).
func TestToolIntegrityWhole(t *testing.T) {
	for _, c := range []struct {
		name, params, result string
		whole                bool
	}{
		{"one page", `{}`, `{"tools":[{"name":"a"}]}`, true},
		{"first of several", `{}`, `{"tools":[{"name":"a"}],"nextCursor":"p2"}`, false},
		{"a later page", `{"cursor":"p2"}`, `{"tools":[{"name":"a"}]}`, false},
		{"empty nextCursor", `{}`, `{"tools":[{"name":"a"}],"nextCursor":""}`, true},
		{"null nextCursor", `{}`, `{"tools":[{"name":"a"}],"nextCursor":null}`, true},
		{"an empty list", `{}`, `{"tools":[]}`, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			g := newFakeGuard()
			u := newUpstream(t, listServer(map[string]string{"tools/list": c.result}, false))
			h := integrityHarness(t, u, nil, g, nil)
			post(t, h.addr, jsonHeaders, req(1, "tools/list", c.params))
			obs, _, _ := g.snapshot()
			if len(obs) != 1 || obs[0].whole != c.whole {
				t.Fatalf("observes %+v, want one with whole %v", obs, c.whole)
			}
		})
	}
}

// server/discover (2026-07-28): its tools, prompts and resource templates are judged in one
// Observe, in that order; resources define nothing and are not handed over.
func TestToolIntegrityDiscover(t *testing.T) {
	g := newFakeGuard()
	g.set(integrity.KindPrompt, "p1", integrity.Verdict{Quarantined: true})
	g.set(integrity.KindTemplate, "file:///a/{x}", integrity.Verdict{Quarantined: true})
	res := `{"supportedVersions":["2026-07-28"],"capabilities":{"tools":{}},"resourceTemplates":[{"uriTemplate":"file:///a/{x}"},{"uriTemplate":"file:///b/{x}"}],` +
		`"resources":[{"uri":"file:///r"}],"prompts":[{"name":"p1"},{"name":"p2"}],"tools":[{"name":"t1"}]}`
	u := newUpstream(t, listServer(map[string]string{"server/discover": res}, false))
	h := integrityHarness(t, u, nil, g, nil)
	r := post(t, h.addr, jsonHeaders+"MCP-Protocol-Version: 2026-07-28\r\n", req(1, "server/discover", `{}`))
	out := resultOf(t, r.body)
	if got := names(out["prompts"], "name"); !slices.Equal(got, []string{"p2"}) {
		t.Fatalf("prompts %v", got)
	}
	if got := names(out["resourceTemplates"], "uriTemplate"); !slices.Equal(got, []string{"file:///b/{x}"}) {
		t.Fatalf("templates %v", got)
	}
	if got := names(out["resources"], "uri"); !slices.Equal(got, []string{"file:///r"}) || out["cacheScope"] != "private" {
		t.Fatalf("resources %v, cacheScope %v", got, out["cacheScope"])
	}
	obs, _, _ := g.snapshot()
	if len(obs) != 1 {
		t.Fatalf("%d observes", len(obs))
	}
	var got []string
	for _, d := range obs[0].defs {
		got = append(got, string(d.Kind)+" "+d.Name)
	}
	if want := []string{"tool t1", "prompt p1", "prompt p2", "template file:///a/{x}", "template file:///b/{x}"}; !slices.Equal(got, want) {
		t.Fatalf("defs %v, want %v", got, want)
	}
}

// A quarantined call's refusal is audited as a denial by tool-integrity (refuseWith's path).
func TestToolIntegrityAudited(t *testing.T) {
	g := newFakeGuard()
	g.set(integrity.KindTool, "rugpull", rugPulled)
	a := newFakeAuditor()
	u := newUpstream(t, echoServer)
	h := integrityHarness(t, u, nil, g, func(f *Flow) { f.Audit = a })
	denial(t, post(t, h.addr, jsonHeaders, call(1, "rugpull", `{}`)), "1", CodeQuarantined, ruleIntegrity)
	recs := a.all()
	if len(recs) != 1 || recs[0].Rule != ruleIntegrity || recs[0].Outcome != "denied" || recs[0].Reason != rugPulled.Reason {
		t.Fatalf("audit records %+v", recs)
	}
}

// The server identity of a request: SNI over Host over the destination address, the original
// port, the path without query and trailing slash, lower case, IPv6 in brackets.
func TestServerKey(t *testing.T) {
	v4 := &policy.Conn{OrigDst: "10.200.2.2:3011", OrigIP: "10.200.2.2", OrigPort: 3011}
	tlsSNI := &policy.Conn{OrigDst: "10.200.2.2:443", OrigIP: "10.200.2.2", OrigPort: 443, Hello: true, SNI: "MCP.Example.COM."}
	noSNI := &policy.Conn{OrigDst: "10.200.2.2:443", OrigIP: "10.200.2.2", OrigPort: 443, Hello: true}
	v6 := &policy.Conn{OrigDst: "[fd00:200:2::2]:3011", OrigIP: "fd00:200:2::2", OrigPort: 3011}
	mapped := &policy.Conn{OrigDst: "[::ffff:10.0.0.1]:80", OrigIP: "::ffff:10.0.0.1", OrigPort: 80}
	dstOnly := &policy.Conn{OrigDst: "10.200.2.2:8080"}
	for _, c := range []struct {
		name   string
		conn   *policy.Conn
		host   string
		target string
		want   string
	}{
		{"host header", v4, "Server.Lab:3011", "/mcp", "server.lab:3011/mcp"},
		{"host port is not the key's", v4, "server.lab:9999", "/mcp", "server.lab:3011/mcp"},
		{"no host: destination", v4, "", "/mcp", "10.200.2.2:3011/mcp"},
		{"sni over host", tlsSNI, "other.example", "/mcp/", "mcp.example.com:443/mcp"},
		{"hello without sni: host", noSNI, "a.example", "/mcp", "a.example:443/mcp"},
		{"query left out", v4, "x", "/mcp?session=1", "x:3011/mcp"},
		{"trailing slashes", v4, "x", "/a/b//", "x:3011/a/b"},
		{"root stays root", v4, "x", "/", "x:3011/"},
		{"root with query", v4, "x", "/?a=b", "x:3011/"},
		{"no path", v4, "x", "*", "x:3011/*"},
		{"absolute form", v4, "x", "http://x:3011/mcp/?q", "x:3011/mcp"},
		{"ipv6 destination", v6, "", "/mcp", "[fd00:200:2::2]:3011/mcp"},
		{"ipv6 host header", v6, "[FD00:200:2:0::2]:3011", "/mcp", "[fd00:200:2::2]:3011/mcp"},
		{"ipv6 host without brackets", v6, "fd00:200:2::2", "/mcp", "[fd00:200:2::2]:3011/mcp"},
		{"ipv4-mapped destination", mapped, "", "/", "10.0.0.1:80/"},
		{"ipv4 host header", v4, "10.200.2.2:3011", "/mcp", "10.200.2.2:3011/mcp"},
		{"destination without OrigIP", dstOnly, "", "/mcp", "10.200.2.2:8080/mcp"},
		{"case of the path kept", v4, "x", "/MCP", "x:3011/MCP"},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got := serverKey(c.conn, c.host, c.target); got != c.want {
				t.Errorf("serverKey(%+v, %q, %q) = %q, want %q", c.conn, c.host, c.target, got, c.want)
			}
		})
	}
}

// Terminate: the server identity carries the upstream key; viewers name the session.
func TestToolIntegrityServerAndViewer(t *testing.T) {
	g := newFakeGuard()
	u := newUpstream(t, echoServer)
	h := integrityHarness(t, u, nil, g, func(f *Flow) { f.UpstreamSPKI = "sha256:0011" })
	post(t, h.addr, jsonHeaders+"Mcp-Session-Id: s-1\r\n", call(1, "echo", `{}`))
	_, lks, _ := g.snapshot()
	if len(lks) != 1 || lks[0].srv != (integrity.Server{Key: "x:3011/mcp", SPKI: "sha256:0011"}) || lks[0].viewer != "10.200.1.2 session "+hashKey("s-1") {
		t.Fatalf("lookups %+v", lks)
	}
}

// 2024-11-05: the lists come on the GET stream, the calls are POSTed to the endpoint it
// announced; both name the stream's server.
func TestToolIntegrityLegacyEndpoint(t *testing.T) {
	g := newFakeGuard()
	g.set(integrity.KindTool, "rugpull", rugPulled)
	u := newUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		if r.Method == "GET" {
			w.Header().Set("Content-Type", "text/event-stream")
			io.WriteString(w, "event: endpoint\ndata: /messages?sessionId=L1\n\n")
			w.(http.Flusher).Flush()
			<-r.Context().Done()
			return
		}
		w.WriteHeader(202)
	})
	h := integrityHarness(t, u, nil, g, nil)
	gc := dialHarness(t, h.addr)
	io.WriteString(gc, "GET /sse HTTP/1.1\r\nHost: x\r\nAccept: text/event-stream\r\n\r\n")
	buf := make([]byte, 4096)
	for got := ""; !strings.Contains(got, "sessionId=L1"); {
		n, err := gc.Read(buf)
		if err != nil {
			t.Fatal(err)
		}
		got += string(buf[:n])
	}
	c := dialHarness(t, h.addr)
	body := call(1, "rugpull", `{}`)
	fmt.Fprintf(c, "POST /messages?sessionId=L1 HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", len(body), body)
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != 403 {
		t.Fatalf("legacy quarantined call: status %d, want 403 (the answer is the POST's status)", resp.StatusCode)
	}
	_, lks, _ := g.snapshot()
	if len(lks) != 1 || lks[0].srv.Key != "x:3011/sse" || !strings.HasPrefix(lks[0].viewer, "10.200.1.2 session ") {
		t.Fatalf("lookups %+v", lks)
	}
}
