package level2

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"mcpintercept/exchange"
	"mcpintercept/level1"
	"mcpintercept/policy"
)

// Surface control through the real exchange pipeline: the draft lets a Level 2 intermediary
// "modify messages (inject metadata, filter capability lists, enforce content policies)" and
// "filter or block bidirectional messages (sampling, elicitation) per policy configuration"
// (Level 2 Requirements), never fabricating a response on the backend's behalf.

// surfaceHarness is newHarness with the Flow adjusted by mod (Post, ValidateArguments).
func surfaceHarness(t *testing.T, u *upstream, rules []policy.RuleSpec, sessions *Sessions, mod func(*Flow)) *harness {
	t.Helper()
	var set *policy.Set
	if rules != nil {
		var err error
		if set, err = policy.Compile(rules); err != nil {
			t.Fatal(err)
		}
	}
	h := &harness{}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	h.addr = ln.Addr().String()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				up, err := net.Dial("tcp", u.addr)
				if err != nil {
					c.Close()
					return
				}
				f := &Flow{Sessions: sessions, Conn: &policy.Conn{OrigDst: u.addr}, Record: func(r *Record) {
					h.mu.Lock()
					h.records = append(h.records, r)
					h.mu.Unlock()
				}}
				if set != nil {
					f.Rules = func() Evaluator { return set }
				}
				if mod != nil {
					mod(f)
				}
				stages := []exchange.Stage{level1.NewClassifier(level1.Guards{}), f.Stage()}
				exchange.Serve(context.Background(), c, up, stages, exchange.Options{}, nil)
			}()
		}
	}()
	return h
}

// eventually waits for cond (30 s, a hang guard; the caller checks what it found): records are
// written when an exchange is done, which can be just
// after the client read its response.
func eventually(t *testing.T, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		if cond() {
			return
		}
	}
}

var surfaceRules = []policy.RuleSpec{
	{Name: "deny-denied-tools", When: `mcp.method == "tools/call" && mcp.name.startsWith("denied_")`, Action: "deny"},
	{Name: "deny-secret-prompts", When: `mcp.method == "prompts/get" && mcp.name == "secret"`, Action: "deny"},
	{Name: "deny-etc", When: `mcp.method == "resources/read" && mcp.name.startsWith("file:///etc")`, Action: "deny"},
	// A call judged on an argument keeps its tool listed: the list cannot know the arguments.
	{Name: "deny-by-arg", When: `mcp.method == "tools/call" && mcp.arguments.path == "/x"`, Action: "deny"},
	// Probes spend no token: with burst 2 (one tools/call below, one after the lists), the lists
	// must leave the last call its budget.
	{Name: "call-rate", When: `mcp.method == "tools/call"`, Action: "rate_limit", RateLimit: &policy.RateLimit{Rate: 0.001, Burst: 2}},
}

// listServer answers a list request with canned results, as JSON or as one SSE event.
func listServer(results map[string]string, sse bool) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		var m struct {
			ID     json.RawMessage `json:"id"`
			Method string          `json:"method"`
		}
		json.Unmarshal(b, &m)
		res, ok := results[m.Method]
		if !ok {
			res = `{"content":[{"type":"text","text":"ran"}]}`
		}
		msg := fmt.Sprintf(`{"jsonrpc":"2.0","id":%s,"result":%s}`, m.ID, res)
		if sse {
			w.Header().Set("Content-Type", "text/event-stream")
			fmt.Fprintf(w, "event: message\ndata: %s\n\n", msg)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, msg)
	}
}

func req(id int, method, params string) string {
	return fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":%q,"params":%s}`, id, method, params)
}

// resultOf returns the result member of a JSON or single-event SSE response.
func resultOf(t *testing.T, body []byte) map[string]any {
	t.Helper()
	s := string(body)
	if i := strings.Index(s, "data: "); i >= 0 {
		s = s[i+6:]
		s = s[:strings.IndexByte(s, '\n')]
	}
	var m map[string]any
	if err := json.Unmarshal([]byte(s), &m); err != nil {
		t.Fatalf("response %q: %v", body, err)
	}
	r, _ := m["result"].(map[string]any)
	return r
}

func names(list any, key string) []string {
	var out []string
	for _, e := range list.([]any) {
		out = append(out, e.(map[string]any)[key].(string))
	}
	return out
}

func TestListFilter(t *testing.T) {
	results := map[string]string{
		"tools/list":               `{"tools":[{"name":"echo","inputSchema":{"type":"object"}},{"name":"denied_delete","inputSchema":{"type":"object"}},{"name":"read","inputSchema":{"type":"object"}}],"nextCursor":"page2"}`,
		"prompts/list":             `{"prompts":[{"name":"greet"},{"name":"secret"}]}`,
		"resources/list":           `{"resources":[{"uri":"file:///etc/passwd","name":"p"},{"uri":"file:///tmp/a","name":"a"}],"ttlMs":60000,"cacheScope":"public"}`,
		"resources/templates/list": `{"resourceTemplates":[{"uriTemplate":"file:///etc/{x}","name":"t"},{"uriTemplate":"file:///home/{x}","name":"h"}]}`,
		"server/discover":          `{"supportedVersions":["2026-07-28"],"capabilities":{"tools":{}},"tools":[{"name":"denied_x"},{"name":"echo"}]}`,
		// A tools/call result that happens to hold a tools array: not a list, left alone.
		"tools/call": `{"content":[],"tools":[{"name":"denied_delete"}]}`,
	}
	for _, sse := range []bool{false, true} {
		u := newUpstream(t, listServer(results, sse))
		h := surfaceHarness(t, u, surfaceRules, NewSessions(0), nil)
		for _, c := range []struct {
			name, method, params, member, key, version string
			want                                       []string
			scope                                      string // cacheScope wanted ("" absent)
		}{
			{"tools", "tools/list", `{}`, "tools", "name", "", []string{"echo", "read"}, ""},
			{"tools at 2026-07-28 marked private", "tools/list", `{}`, "tools", "name", "2026-07-28", []string{"echo", "read"}, "private"},
			{"prompts", "prompts/list", `{}`, "prompts", "name", "", []string{"greet"}, ""},
			{"resources: public page becomes private", "resources/list", `{}`, "resources", "uri", "", []string{"file:///tmp/a"}, "private"},
			{"templates", "resources/templates/list", `{}`, "resourceTemplates", "uriTemplate", "", []string{"file:///home/{x}"}, ""},
			{"server/discover", "server/discover", `{}`, "tools", "name", "2026-07-28", []string{"echo"}, "private"},
			{"tools/call result untouched", "tools/call", `{"name":"echo","arguments":{}}`, "tools", "name", "", []string{"denied_delete"}, ""},
		} {
			t.Run(fmt.Sprintf("%s/sse=%v", c.name, sse), func(t *testing.T) {
				hdr := jsonHeaders
				if c.version != "" {
					hdr += "MCP-Protocol-Version: " + c.version + "\r\n"
				}
				r := post(t, h.addr, hdr, req(5, c.method, c.params))
				res := resultOf(t, r.body)
				if got := names(res[c.member], c.key); strings.Join(got, ",") != strings.Join(c.want, ",") {
					t.Fatalf("%s: %v, want %v (%s)", c.member, got, c.want, r.body)
				}
				if got, _ := res["cacheScope"].(string); got != c.scope {
					t.Fatalf("cacheScope %q, want %q", got, c.scope)
				}
				if c.method == "tools/list" && res["nextCursor"] != "page2" {
					t.Fatalf("nextCursor lost: %s", r.body)
				}
				if c.method == "resources/list" && res["ttlMs"] != float64(60000) {
					t.Fatalf("ttlMs changed: %s", r.body)
				}
			})
		}
		// The probes spent no rate-limit token: the one call of the budget still passes.
		r := post(t, h.addr, jsonHeaders, call(9, "echo", `{}`))
		if res := resultOf(t, r.body); res == nil {
			t.Fatalf("sse=%v: the call after the lists was refused: %s", sse, r.body)
		}
		var noted bool
		eventually(t, func() bool {
			for _, rec := range h.recs() {
				if rec.Method == "tools/list" && strings.Contains(rec.Reason, "hid 1 of 3 entries (denied_delete) by deny-denied-tools") {
					noted = true
				}
			}
			return noted
		})
		if !noted {
			t.Fatalf("no record says what tools/list hid: %+v", h.recs())
		}
	}

	// Without rules nothing is rewritten: the bytes are the server's.
	u := newUpstream(t, listServer(results, false))
	h := surfaceHarness(t, u, nil, nil, nil)
	r := post(t, h.addr, jsonHeaders, req(5, "tools/list", `{}`))
	if want := fmt.Sprintf(`{"jsonrpc":"2.0","id":5,"result":%s}`, results["tools/list"]); string(r.body) != want {
		t.Fatalf("allow-all list changed:\n%s\nwant\n%s", r.body, want)
	}
}

// fakePost records what Level 2 sent the server on the client's behalf.
type fakePost struct {
	mu      sync.Mutex
	target  string
	headers []exchange.Header
	body    []byte
	done    chan struct{}
}

func newFakePost() *fakePost { return &fakePost{done: make(chan struct{}, 4)} }

func (p *fakePost) post(_ context.Context, target string, headers []exchange.Header, body []byte) error {
	p.mu.Lock()
	p.target, p.headers, p.body = target, headers, append([]byte(nil), body...)
	p.mu.Unlock()
	p.done <- struct{}{}
	return nil
}

func (p *fakePost) sent() []byte {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.body
}

func (p *fakePost) header(name string) string {
	p.mu.Lock()
	defer p.mu.Unlock()
	if name == ":target" {
		return p.target
	}
	for _, h := range p.headers {
		if strings.EqualFold(h.Name, name) {
			return h.Value
		}
	}
	return ""
}

// serverRequestServer answers a tools/call with an SSE stream that first sends the server
// request, then (after waitFor, when set) the result.
func serverRequestServer(serverReq string, waitFor chan struct{}) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		var m struct {
			ID json.RawMessage `json:"id"`
		}
		json.Unmarshal(b, &m)
		w.Header().Set("Content-Type", "text/event-stream")
		fmt.Fprintf(w, "id: 1\ndata: %s\n\n", serverReq)
		w.(http.Flusher).Flush()
		if waitFor != nil {
			select {
			case <-waitFor:
			case <-time.After(5 * time.Second):
			}
		}
		fmt.Fprintf(w, "id: 2\ndata: {\"jsonrpc\":\"2.0\",\"id\":%s,\"result\":{\"content\":[{\"type\":\"text\",\"text\":\"done\"}]}}\n\n", m.ID)
	}
}

func TestServerRequestsUnderPolicy(t *testing.T) {
	rules := []policy.RuleSpec{
		{Name: "no-sampling", When: `mcp.direction == "server_to_client" && mcp.method == "sampling/createMessage" && mcp.tool == "summarize"`, Action: "deny"},
		{Name: "no-url-elicitation", When: `mcp.direction == "server_to_client" && mcp.method == "elicitation/create" && mcp.mode == "url"`, Action: "deny"},
	}
	const sampling = `{"jsonrpc":"2.0","id":0,"method":"sampling/createMessage","params":{"messages":[],"maxTokens":10}}`
	const urlElicit = `{"jsonrpc":"2.0","id":"e1","method":"elicitation/create","params":{"mode":"url","url":"https://x","message":"m","elicitationId":"1"}}`
	const formElicit = `{"jsonrpc":"2.0","id":"e2","method":"elicitation/create","params":{"message":"m","requestedSchema":{"type":"object"}}}`
	for _, c := range []struct {
		name, tool, serverReq, wantID, kind string
		blocked                             bool
	}{
		{"sampling blocked for this tool", "summarize", sampling, "0", "sampling", true},
		{"sampling allowed for another tool", "echo", sampling, "", "sampling", false},
		{"url elicitation blocked", "echo", urlElicit, `"e1"`, "elicitation (url)", true},
		{"form elicitation allowed", "echo", formElicit, "", "elicitation (form)", false},
	} {
		t.Run(c.name, func(t *testing.T) {
			fp := newFakePost()
			u := newUpstream(t, serverRequestServer(c.serverReq, fp.done))
			h := surfaceHarness(t, u, rules, NewSessions(0), func(f *Flow) { f.Post = fp.post })
			hdr := jsonHeaders + "Mcp-Session-Id: sess-1\r\nMCP-Protocol-Version: 2025-11-25\r\nAuthorization: Bearer tok\r\n"
			if !c.blocked {
				go func() { time.Sleep(200 * time.Millisecond); fp.done <- struct{}{} }()
			}
			r := post(t, h.addr, hdr, call(3, c.tool, `{}`))
			sawReq := strings.Contains(string(r.body), c.serverReq)
			if c.blocked == sawReq || !strings.Contains(string(r.body), `"text":"done"`) {
				t.Fatalf("client stream (blocked %v):\n%s", c.blocked, r.body)
			}
			var recs []*Record
			var rec *Record
			eventually(t, func() bool {
				recs = h.recs()
				for _, x := range recs {
					if x.Direction == ServerToClient && x.Kind == "request" {
						rec = x
					}
				}
				return rec != nil && len(recs) >= 2
			})
			if rec == nil || rec.Name != c.tool || !strings.HasPrefix(rec.Reason, c.kind+" request from the server") {
				t.Fatalf("record of the server request: %+v", rec)
			}
			if !c.blocked {
				if body := fp.sent(); rec.Decision != policy.ActionAllow || body != nil {
					t.Fatalf("allowed request: record %+v, post %s", rec, body)
				}
				return
			}
			if rec.Decision != policy.ActionDeny || rec.Err != "" {
				t.Fatalf("blocked request record: %+v", rec)
			}
			var m struct {
				ID    json.RawMessage
				Error struct {
					Code int
					Data denialData
				}
			}
			if err := json.Unmarshal(fp.sent(), &m); err != nil || string(m.ID) != c.wantID || m.Error.Code != CodeDenied || m.Error.Data.Intermediary != Intermediary {
				t.Fatalf("answer to the server %s: %v", fp.sent(), err)
			}
			if fp.header(":target") != "/mcp" || fp.header("Mcp-Session-Id") != "sess-1" || fp.header("Authorization") != "Bearer tok" ||
				fp.header("MCP-Protocol-Version") != "2025-11-25" || fp.header("Host") != "x" {
				t.Fatalf("answer went to %q with headers %+v", fp.header(":target"), fp.header("Host"))
			}
			for _, x := range recs {
				if strings.Contains(x.Reason, "tok") || strings.Contains(x.Err, "tok") {
					t.Fatalf("a record holds the credential: %+v", x)
				}
			}
		})
	}
}

// TestInputRequired: 2026-07-28 multi round-trip requests. A capability policy refuses is
// withheld from the request; an input request policy refuses turns the input_required result
// into an error for the client; a retry (inputResponses, requestState) is judged again and its
// requestState goes to the server untouched.
func TestInputRequired(t *testing.T) {
	rules := []policy.RuleSpec{
		{Name: "no-sampling", When: `mcp.direction == "server_to_client" && mcp.method == "sampling/createMessage"`, Action: "deny"},
		{Name: "no-roots-for-deploy", When: `mcp.direction == "server_to_client" && mcp.method == "roots/list" && mcp.tool == "deploy"`, Action: "deny"},
	}
	inputRequired := `{"resultType":"input_required","inputRequests":{"ask":{"method":"elicitation/create","params":{"message":"m","requestedSchema":{"type":"object"}}},"llm":{"method":"sampling/createMessage","params":{"messages":[],"maxTokens":5}}},"requestState":"opaque-1"}`
	okInput := `{"resultType":"input_required","inputRequests":{"ask":{"method":"elicitation/create","params":{"message":"m","requestedSchema":{"type":"object"}}}},"requestState":"opaque-2"}`
	var result string
	u := newUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		var m struct{ ID json.RawMessage }
		json.Unmarshal(b, &m)
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"jsonrpc":"2.0","id":%s,"result":%s}`, m.ID, result)
	})
	h := surfaceHarness(t, u, rules, NewSessions(0), nil)
	meta := `"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{"sampling":{},"elicitation":{"form":{},"url":{}},"roots":{"listChanged":true}}}`
	hdr := jsonHeaders + "MCP-Protocol-Version: 2026-07-28\r\n"

	// Sampling is refused for every tool: the capability never reaches the server.
	result = okInput
	r := post(t, h.addr, hdr, `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"echo","arguments":{},`+meta+`}}`)
	sent := string(u.last.Load().([]byte))
	if strings.Contains(sent, `"sampling"`) || !strings.Contains(sent, `"elicitation":{"form":{},"url":{}}`) || !strings.Contains(sent, `"roots":{"listChanged":true}`) {
		t.Fatalf("capabilities sent to the server: %s", sent)
	}
	if res := resultOf(t, r.body); res["requestState"] != "opaque-2" {
		t.Fatalf("allowed input_required result changed: %s", r.body)
	}
	// roots too, for deploy only.
	post(t, h.addr, hdr, `{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"deploy","arguments":{},`+meta+`}}`)
	if sent := string(u.last.Load().([]byte)); strings.Contains(sent, `"roots"`) || strings.Contains(sent, `"sampling"`) {
		t.Fatalf("deploy capabilities sent: %s", sent)
	}
	// A server that asks anyway: the client gets an error naming the appliance.
	result = inputRequired
	r = post(t, h.addr, hdr, `{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"echo","arguments":{},`+meta+`}}`)
	denial(t, r, "3", CodeDenied, "no-sampling")
	// The retry is judged again; its requestState and inputResponses go out as the client sent them.
	result = `{"content":[{"type":"text","text":"done"}]}`
	retry := `{"jsonrpc":"2.0","id":4,"method":"tools/call","params":{"name":"echo","arguments":{},"inputResponses":{"ask":{"action":"accept","content":{}}},"requestState":"opaque-2",` + meta + `}}`
	r = post(t, h.addr, hdr, retry)
	sent = string(u.last.Load().([]byte))
	if !strings.Contains(sent, `"inputResponses":{"ask":{"action":"accept","content":{}}},"requestState":"opaque-2"`) || strings.Contains(sent, `"sampling"`) {
		t.Fatalf("retry sent as %s", sent)
	}
	var inputRecs, blockedInput int
	eventually(t, func() bool {
		inputRecs, blockedInput = 0, 0
		for _, rec := range h.recs() {
			if rec.Kind == "input_request" {
				inputRecs++
				if rec.Decision == policy.ActionDeny && rec.Method == "sampling/createMessage" && rec.Name == "echo" {
					blockedInput++
				}
			}
		}
		return inputRecs >= 4
	})
	if inputRecs != 4 || blockedInput != 1 {
		t.Fatalf("input request records: %d (want 4), blocked %d (want 1): %+v", inputRecs, blockedInput, h.recs())
	}
}

func TestRedaction(t *testing.T) {
	const canary = "CANARY-7f3a9b21"
	rules := []policy.RuleSpec{
		{Name: "hide-token-arg", When: `mcp.method == "tools/call"`, Action: "redact",
			Redact: &policy.Redact{Paths: []string{"$.params.arguments.token"}}},
		{Name: "hide-canary", When: `mcp.direction == "server_to_client"`, Action: "redact",
			Redact: &policy.Redact{Patterns: []string{`CANARY-[0-9a-f]+`}, Marker: "[hidden]"}},
	}
	for _, sse := range []bool{false, true} {
		t.Run(fmt.Sprintf("sse=%v", sse), func(t *testing.T) {
			var gotHeader string
			u := newUpstream(t, func(w http.ResponseWriter, r *http.Request) {
				gotHeader = r.Header.Get("Mcp-Param-Token")
				b, _ := io.ReadAll(r.Body)
				var m struct{ ID json.RawMessage }
				json.Unmarshal(b, &m)
				msg := fmt.Sprintf(`{"jsonrpc":"2.0","id":%s,"result":{"content":[{"type":"text","text":"key=%s and %s"}],"isError":false}}`, m.ID, canary, canary)
				if sse {
					w.Header().Set("Content-Type", "text/event-stream")
					fmt.Fprintf(w, "data: %s\n\n", msg)
					return
				}
				w.Header().Set("Content-Type", "application/json")
				io.WriteString(w, msg)
			})
			h := surfaceHarness(t, u, rules, nil, nil)
			r := post(t, h.addr, jsonHeaders+"Mcp-Param-Token: "+canary+"\r\n", call(1, "echo", `{"text":"hi","token":"`+canary+`"}`))
			if strings.Contains(string(r.body), canary) || !strings.Contains(string(r.body), `"text":"key=[hidden] and [hidden]"`) {
				t.Fatalf("client got %s", r.body)
			}
			sent := string(u.last.Load().([]byte))
			if sent != call(1, "echo", `{"text":"hi","token":"[REDACTED]"}`) {
				t.Fatalf("server got %s", sent)
			}
			if gotHeader != "[REDACTED]" {
				t.Fatalf("Mcp-Param-Token went out as %q", gotHeader)
			}
			var req, resp bool
			eventually(t, func() bool { return len(h.recs()) >= 1 })
			for _, rec := range h.recs() {
				if b, _ := json.Marshal(rec); strings.Contains(string(b), canary) {
					t.Fatalf("a record holds the canary: %s", b)
				}
				if strings.Contains(rec.Reason, "redacted by rule hide-token-arg at $.params.arguments.token") {
					req = true
				}
				if strings.Contains(rec.Reason, "redacted by rule hide-canary at $.result.content[0].text") {
					resp = true
				}
			}
			if !req || !resp {
				t.Fatalf("records do not say what was redacted: %+v", h.recs())
			}
		})
	}
}

func TestValidateArguments(t *testing.T) {
	tools := `{"tools":[{"name":"add","inputSchema":{"type":"object","properties":{"a":{"type":"number"},"b":{"type":"number"}},"required":["a","b"]}},` +
		`{"name":"echo","inputSchema":{"type":"object","properties":{"text":{"type":"string"}},"additionalProperties":false}}]}`
	u := newUpstream(t, listServer(map[string]string{"tools/list": tools}, false))
	sessions := NewSessions(0)
	h := surfaceHarness(t, u, nil, sessions, func(f *Flow) { f.ValidateArguments = true })
	sess := func(id string) string { return jsonHeaders + "Mcp-Session-Id: " + id + "\r\n" }

	// Before the session listed its tools nothing is known: the call goes through.
	before := u.calls.Load()
	post(t, h.addr, sess("s1"), call(1, "add", `{"a":"two","b":3}`))
	if u.calls.Load() != before+1 {
		t.Fatal("a call with no known schema was refused")
	}
	post(t, h.addr, sess("s1"), req(2, "tools/list", `{}`))
	for _, c := range []struct {
		name, tool, args, path string
		ok                     bool
	}{
		{"wrong type", "add", `{"a":"two","b":3}`, "arguments.a: type is string, want", false},
		{"missing", "add", `{"a":1}`, "arguments: required", false},
		{"extra argument", "echo", `{"text":"x","other":1}`, "unexpected additional properties", false},
		{"valid", "add", `{"a":2,"b":3}`, "", true},
		{"unknown tool", "nope", `{"a":"x"}`, "", true},
	} {
		t.Run(c.name, func(t *testing.T) {
			before := u.calls.Load()
			r := post(t, h.addr, sess("s1"), call(3, c.tool, c.args))
			if c.ok {
				if u.calls.Load() != before+1 {
					t.Fatalf("valid call refused: %s", r.body)
				}
				return
			}
			denial(t, r, "3", CodeInvalidParams, ruleValidate)
			if u.calls.Load() != before {
				t.Fatal("the server saw invalid arguments")
			}
			if !strings.Contains(string(r.body), c.path) || strings.Contains(string(r.body), "two") {
				t.Fatalf("error %s: want %q and no argument value", r.body, c.path)
			}
		})
	}
	// Another session has not listed its tools: its calls are not checked against s1's list.
	before = u.calls.Load()
	post(t, h.addr, sess("s2"), call(4, "add", `{"a":"two","b":3}`))
	if u.calls.Load() != before+1 {
		t.Fatal("s2 was checked against s1's schemas")
	}
}

// rawSSE reads a whole SSE response to a POST (helper for streams the harness closes).
func rawSSE(t *testing.T, addr, headers, body string) string {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	fmt.Fprintf(c, "POST /mcp HTTP/1.1\r\nHost: x\r\n%sContent-Length: %d\r\n\r\n%s", headers, len(body), body)
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}
