package level2

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"mcpintercept/exchange"
	"mcpintercept/level1"
	"mcpintercept/policy"
)

// Level 2 through the real exchange pipeline on loopback: a client connection, the stages, and a
// Go net/http server standing in for an MCP server. The draft's Level 2 "MUST parse JSON-RPC
// message bodies" and "MAY modify messages"; with a single backend it "MUST NOT fabricate
// responses": every refusal here is a JSON-RPC error whose data names the appliance.

type upstream struct {
	addr  string
	calls atomic.Int64 // requests that reached the server
	last  atomic.Value // []byte: the last request body the server read
}

// newUpstream serves h on loopback; every request is counted before h runs.
func newUpstream(t *testing.T, h http.HandlerFunc) *upstream {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	u := &upstream{addr: ln.Addr().String()}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		u.calls.Add(1)
		b, _ := io.ReadAll(r.Body)
		u.last.Store(b)
		r.Body = io.NopCloser(bytes.NewReader(b))
		h(w, r)
	})}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return u
}

// echoServer answers a JSON-RPC request with a result naming its method (JSON), or 202 for a
// notification.
func echoServer(w http.ResponseWriter, r *http.Request) {
	b, _ := io.ReadAll(r.Body)
	var m struct {
		ID     json.RawMessage `json:"id"`
		Method string          `json:"method"`
	}
	json.Unmarshal(b, &m)
	if m.ID == nil {
		w.WriteHeader(202)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	fmt.Fprintf(w, `{"jsonrpc":"2.0","id":%s,"result":{"content":[{"type":"text","text":"ran %s"}]}}`, m.ID, m.Method)
}

type harness struct {
	addr    string
	mu      sync.Mutex
	records []*Record
}

func (h *harness) recs() []*Record {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]*Record(nil), h.records...)
}

// newHarness runs the Level 2 stage list (classifier + Level 2) in front of u with rules.
func newHarness(t *testing.T, u *upstream, rules []policy.RuleSpec, opt Options, sessions *Sessions) *harness {
	t.Helper()
	return newHarnessWith(t, u, rules, opt, sessions, nil)
}

// newHarnessWith is newHarness with each connection's Flow adjusted by adjust (nil: none).
func newHarnessWith(t *testing.T, u *upstream, rules []policy.RuleSpec, opt Options, sessions *Sessions, adjust func(*Flow)) *harness {
	t.Helper()
	return newHarnessStages(t, u, rules, opt, sessions, adjust)
}

// newHarnessStages is newHarnessWith with more stages after Level 2 (a new instance of each per
// connection).
func newHarnessStages(t *testing.T, u *upstream, rules []policy.RuleSpec, opt Options, sessions *Sessions, adjust func(*Flow), after ...func() exchange.Stage) *harness {
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
				f := &Flow{Options: opt, Sessions: sessions, Record: func(r *Record) {
					h.mu.Lock()
					h.records = append(h.records, r)
					h.mu.Unlock()
				}}
				if set != nil {
					f.Rules = func() Evaluator { return set }
				}
				if adjust != nil {
					adjust(f)
				}
				stages := []exchange.Stage{level1.NewClassifier(level1.Guards{}), f.Stage()}
				for _, a := range after {
					stages = append(stages, a())
				}
				exchange.Serve(context.Background(), c, up, stages, exchange.Options{}, nil)
			}()
		}
	}()
	return h
}

type response struct {
	status int
	header http.Header
	body   []byte
}

func post(t *testing.T, addr, headers, body string) response {
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
		t.Fatalf("read response: %v", err)
	}
	b, _ := io.ReadAll(resp.Body)
	return response{resp.StatusCode, resp.Header, b}
}

const jsonHeaders = "Content-Type: application/json\r\nAccept: application/json, text/event-stream\r\n"

func call(id int, tool, args string) string {
	return fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":%q,"arguments":%s}}`, id, tool, args)
}

var denyRules = []policy.RuleSpec{
	{Name: "no-delete", When: `mcp.method == "tools/call" && mcp.name.startsWith("denied_")`, Action: "deny", Reason: "no deleting"},
	{Name: "no-etc", When: `mcp.method == "tools/call" && has(mcp.arguments.path) && mcp.arguments.path.startsWith("/etc")`, Action: "deny", Reason: "not /etc"},
}

// denial checks the body is the documented JSON-RPC error: the request's id, a code outside the
// reserved range, error.data naming the appliance and the rule.
func denial(t *testing.T, r response, wantID string, wantCode int, wantRule string) {
	t.Helper()
	var m struct {
		ID    json.RawMessage `json:"id"`
		Error struct {
			Code int        `json:"code"`
			Data denialData `json:"data"`
		} `json:"error"`
	}
	if err := json.Unmarshal(r.body, &m); err != nil {
		t.Fatalf("refusal body %q is not JSON-RPC: %v", r.body, err)
	}
	if string(m.ID) != wantID || m.Error.Code != wantCode || m.Error.Data.Intermediary != Intermediary || m.Error.Data.Rule != wantRule {
		t.Fatalf("refusal %s: want id %s, code %d, rule %q, data naming %s", r.body, wantID, wantCode, wantRule, Intermediary)
	}
}

func TestDenyByToolAndArgumentWithoutMCPHeaders(t *testing.T) {
	u := newUpstream(t, echoServer)
	h := newHarness(t, u, denyRules, Options{}, nil)
	for _, c := range []struct {
		name, body, id, rule string
	}{
		{"by tool", call(7, "denied_delete", `{"path":"/tmp"}`), "7", "no-delete"},
		{"by argument", call(8, "read_file", `{"path":"/etc/shadow"}`), "8", "no-etc"},
		{"string id echoed exactly", strings.Replace(call(1, "denied_x", `{}`), `"id":1`, `"id":"a\u0062"`, 1), `"a\u0062"`, "no-delete"},
	} {
		t.Run(c.name, func(t *testing.T) {
			before := u.calls.Load()
			r := post(t, h.addr, jsonHeaders, c.body)
			if r.status != 200 {
				t.Fatalf("status %d, want 200 (a 2026-07-28 client reads a bare 4xx as an old server)", r.status)
			}
			denial(t, r, c.id, CodeDenied, c.rule)
			if u.calls.Load() != before {
				t.Fatal("the server saw a denied request")
			}
		})
	}
	// An allowed call goes through, and its response comes back unchanged.
	r := post(t, h.addr, jsonHeaders, call(9, "echo", `{"text":"hi"}`))
	if r.status != 200 || !bytes.Contains(r.body, []byte(`"ran tools/call"`)) {
		t.Fatalf("allowed call: %d %s", r.status, r.body)
	}
	if got := u.last.Load().([]byte); string(got) != call(9, "echo", `{"text":"hi"}`) {
		t.Fatalf("the server got %q, not the client's bytes", got)
	}
	// Records are written when an exchange ends, just after the client has its response: wait.
	var recs []*Record
	var denied, allowed int
	for deadline := time.Now().Add(3 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		recs, denied, allowed = h.recs(), 0, 0
		for _, r := range recs {
			if r.Method == "tools/call" && r.Decision == policy.ActionDeny && (r.Name == "denied_delete" || r.Name == "read_file" || r.Name == "denied_x") {
				denied++
			}
			if r.Method == "tools/call" && r.Name == "echo" && r.Decision == policy.ActionAllow && r.Status == 200 && r.ID == "9" {
				allowed++
			}
		}
		if denied == 3 && allowed == 1 {
			break
		}
	}
	if denied != 3 || allowed != 1 {
		t.Fatalf("records: %d denied, %d allowed (want 3, 1): %+v", denied, allowed, recs)
	}
}

// TestSmugglingRefused: a body whose meaning depends on the parser (duplicate or case-variant
// keys, the go-sdk #805 differential), or that no parser should guess at, never reaches the
// server; the client gets a JSON-RPC error naming the appliance.
func TestSmugglingRefused(t *testing.T) {
	u := newUpstream(t, echoServer)
	h := newHarness(t, u, denyRules, Options{}, nil)
	for _, c := range []struct{ name, body string }{
		{"duplicate name", `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"echo","name":"denied_delete"}}`},
		{"duplicate method", `{"jsonrpc":"2.0","id":1,"method":"ping","method":"tools/call","params":{"name":"denied_delete"}}`},
		{"case-variant Method", `{"jsonrpc":"2.0","id":1,"method":"ping","Method":"tools/call","params":{"name":"denied_delete"}}`},
		{"case-variant Name", `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"echo","Name":"denied_delete"}}`},
		{"deep nesting", `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"echo","arguments":` + strings.Repeat(`{"a":`, 100) + `1` + strings.Repeat(`}`, 100) + `}}`},
		{"truncated", `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"echo"`},
		{"invalid utf-8", "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"tools/call\",\"params\":{\"name\":\"denied\xff\"}}"},
		{"batch at 2025-11-25", `[` + call(1, "echo", `{}`) + `]`},
	} {
		t.Run(c.name, func(t *testing.T) {
			before := u.calls.Load()
			hdr := jsonHeaders + "MCP-Protocol-Version: 2025-11-25\r\n"
			r := post(t, h.addr, hdr, c.body)
			if r.status != 400 {
				t.Fatalf("status %d %s, want 400", r.status, r.body)
			}
			denial(t, r, "null", CodeUnreadable, "level2")
			if u.calls.Load() != before {
				t.Fatal("the server saw the body")
			}
		})
	}
	// A body that parses as JSON-RPC is inspected whatever its Content-Type says.
	r := post(t, h.addr, "Content-Type: text/plain\r\n", call(3, "denied_delete", `{}`))
	denial(t, r, "3", CodeDenied, "no-delete")
	// ;charset= is JSON.
	r = post(t, h.addr, "Content-Type: application/json; charset=utf-8\r\n", call(4, "denied_delete", `{}`))
	denial(t, r, "4", CodeDenied, "no-delete")
}

// TestBatchOnlyAt20250326: batches pass (and are judged as a whole) only where the version has
// them.
func TestBatchOnlyAt20250326(t *testing.T) {
	u := newUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `[{"jsonrpc":"2.0","id":1,"result":{}},{"jsonrpc":"2.0","id":2,"result":{}}]`)
	})
	h := newHarness(t, u, denyRules, Options{}, nil)
	ok := `[` + call(1, "echo", `{}`) + `,` + call(2, "add", `{}`) + `]`
	if r := post(t, h.addr, jsonHeaders+"MCP-Protocol-Version: 2025-03-26\r\n", ok); r.status != 200 || u.calls.Load() != 1 {
		t.Fatalf("batch at 2025-03-26: %d %s (server calls %d)", r.status, r.body, u.calls.Load())
	}
	bad := `[` + call(1, "echo", `{}`) + `,` + call(2, "denied_delete", `{}`) + `]`
	r := post(t, h.addr, jsonHeaders+"MCP-Protocol-Version: 2025-03-26\r\n", bad)
	var errs []struct {
		ID    int `json:"id"`
		Error struct {
			Code int `json:"code"`
		} `json:"error"`
	}
	if err := json.Unmarshal(r.body, &errs); err != nil || len(errs) != 2 || errs[0].ID != 1 || errs[1].ID != 2 || errs[1].Error.Code != CodeDenied {
		t.Fatalf("batch with a denied call: %d %s (%v)", r.status, r.body, err)
	}
	if u.calls.Load() != 1 {
		t.Fatal("the server saw a batch holding a denied call")
	}
}

// TestHeaderMismatch is SEP-2243: "a mismatch is refused with HTTP 400 and JSON-RPC error -32020".
func TestHeaderMismatch(t *testing.T) {
	u := newUpstream(t, echoServer)
	h := newHarness(t, u, nil, Options{}, nil)
	meta := `"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28"}`
	body := `{"jsonrpc":"2.0","id":5,"method":"tools/call","params":{"name":"delete_repo","arguments":{},` + meta + `}}`
	for _, c := range []struct{ name, headers string }{
		{"forged Mcp-Name", "Mcp-Method: tools/call\r\nMcp-Name: read_file\r\n"},
		{"forged Mcp-Method", "Mcp-Method: tools/list\r\n"},
		{"forged base64 name", "Mcp-Method: tools/call\r\nMcp-Name: =?base64?cmVhZF9maWxl?=\r\n"},
		{"version differs from _meta", "MCP-Protocol-Version: 2025-11-25\r\nMcp-Method: tools/call\r\nMcp-Name: delete_repo\r\n"},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := post(t, h.addr, jsonHeaders+c.headers, body)
			if r.status != 400 {
				t.Fatalf("status %d %s, want 400", r.status, r.body)
			}
			denial(t, r, "5", CodeHeaderMismatch, "header-mismatch")
		})
	}
	if u.calls.Load() != 0 {
		t.Fatal("the server saw a mismatched request")
	}
	// Matching headers (the name base64-encoded) pass.
	r := post(t, h.addr, jsonHeaders+"MCP-Protocol-Version: 2026-07-28\r\nMcp-Method: tools/call\r\nMcp-Name: =?base64?ZGVsZXRlX3JlcG8=?=\r\n", body)
	if r.status != 200 || u.calls.Load() != 1 {
		t.Fatalf("matching headers: %d %s", r.status, r.body)
	}
}

// TestGzipBody: a gzip'd request is decoded for inspection (a deny still applies) and, allowed,
// forwarded as the client encoded it.
func TestGzipBody(t *testing.T) {
	u := newUpstream(t, echoServer)
	h := newHarness(t, u, denyRules, Options{}, nil)
	gz := func(s string) string {
		var b bytes.Buffer
		w := gzip.NewWriter(&b)
		io.WriteString(w, s)
		w.Close()
		return b.String()
	}
	r := post(t, h.addr, jsonHeaders+"Content-Encoding: gzip\r\n", gz(call(1, "denied_delete", `{}`)))
	denial(t, r, "1", CodeDenied, "no-delete")
	body := gz(call(2, "echo", `{}`))
	r = post(t, h.addr, jsonHeaders+"Content-Encoding: gzip\r\n", body)
	// (The test server does not decode gzip: it answers 202, which does not matter here.)
	if u.calls.Load() != 1 || string(u.last.Load().([]byte)) != body {
		t.Fatalf("allowed gzip'd call: %d %s; the server must get the client's gzip bytes", r.status, r.body)
	}
	r = post(t, h.addr, jsonHeaders+"Content-Encoding: compress\r\n", "xx")
	if r.status != 415 || u.calls.Load() != 1 {
		t.Fatalf("unknown encoding: %d %s, want 415 and nothing forwarded", r.status, r.body)
	}
}

// TestOversizedAndRateLimited: 413 with a JSON-RPC body over max_body; a rate limit is a JSON-RPC
// error with Retry-After.
func TestOversizedAndRateLimited(t *testing.T) {
	u := newUpstream(t, echoServer)
	rules := []policy.RuleSpec{{Name: "slow", When: `mcp.method == "tools/call"`, Action: "rate_limit", RateLimit: &policy.RateLimit{Rate: 0.001, Burst: 1}}}
	h := newHarness(t, u, rules, Options{MaxBody: 2048}, nil)
	big := call(1, "echo", `{"text":"`+strings.Repeat("x", 4096)+`"}`)
	r := post(t, h.addr, jsonHeaders, big)
	if r.status != 413 || !bytes.Contains(r.body, []byte(Intermediary)) {
		t.Fatalf("oversized: %d %s", r.status, r.body)
	}
	if r := post(t, h.addr, jsonHeaders, call(2, "echo", `{}`)); r.status != 200 || u.calls.Load() != 1 {
		t.Fatalf("first call: %d %s", r.status, r.body)
	}
	r = post(t, h.addr, jsonHeaders, call(3, "echo", `{}`))
	denial(t, r, "3", CodeRateLimited, "slow")
	if r.header.Get("Retry-After") == "" || u.calls.Load() != 1 {
		t.Fatalf("rate limited: Retry-After %q, server calls %d", r.header.Get("Retry-After"), u.calls.Load())
	}
}

// TestSSEEventsOneByOne: progress notifications reach the client one by one before the result
// (the server sends the next only after the client saw the previous), each recorded; the result
// is correlated with its request.
func TestSSEEventsOneByOne(t *testing.T) {
	seen := make(chan struct{}, 8)
	u := newUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		fl := w.(http.Flusher)
		for i := 1; i <= 3; i++ {
			fmt.Fprintf(w, "event: message\r\ndata: {\"jsonrpc\":\"2.0\",\"method\":\"notifications/progress\",\"params\":{\"progressToken\":1,\"progress\":%d}}\r\n\r\n", i)
			fl.Flush()
			select {
			case <-seen:
			case <-time.After(5 * time.Second):
				return
			}
		}
		io.WriteString(w, ": keepalive\n\n")
		io.WriteString(w, "event: message\ndata: {\"jsonrpc\":\"2.0\",\"id\":4,\"result\":{\"content\":[]}}\n\n")
	})
	h := newHarness(t, u, denyRules, Options{}, nil)
	c, err := net.Dial("tcp", h.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	body := call(4, "progress", `{"steps":3}`)
	fmt.Fprintf(c, "POST /mcp HTTP/1.1\r\nHost: x\r\n%sContent-Length: %d\r\n\r\n%s", jsonHeaders, len(body), body)
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(resp.Body)
	progress := 0
	for {
		line, err := br.ReadString('\n')
		if err != nil {
			break
		}
		if strings.Contains(line, "notifications/progress") {
			progress++
			seen <- struct{}{} // only now does the server send the next
		}
		if strings.Contains(line, `"id":4`) {
			break
		}
	}
	if progress != 3 {
		t.Fatalf("%d progress notifications arrived before the result, want 3", progress)
	}
	deadline := time.Now().Add(30 * time.Second) // a hang guard: records follow the exchange's end
	for time.Now().Before(deadline) {
		var notes, results int
		for _, r := range h.recs() {
			if r.Direction == ServerToClient && r.Method == "notifications/progress" {
				notes++
			}
			if r.Direction == ClientToServer && r.Method == "tools/call" && r.Name == "progress" && r.ID == "4" {
				results++
			}
		}
		if notes == 3 && results == 1 {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("records: %+v", h.recs())
}

// TestLegacySSECorrelation: 2024-11-05 HTTP+SSE — the POST is answered 202 and its response comes
// on the GET stream, another connection; the record of the response names the tool.
func TestLegacySSECorrelation(t *testing.T) {
	post202 := make(chan struct{})
	u := newUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		if r.Method == "GET" {
			w.Header().Set("Content-Type", "text/event-stream")
			io.WriteString(w, "event: endpoint\ndata: /messages?sessionId=abc123\n\n")
			w.(http.Flusher).Flush()
			<-post202
			io.WriteString(w, "event: message\ndata: {\"jsonrpc\":\"2.0\",\"id\":11,\"result\":{\"content\":[]}}\n\n")
			return
		}
		w.WriteHeader(202)
		close(post202)
	})
	h := newHarness(t, u, denyRules, Options{}, NewSessions(0))
	g, err := net.Dial("tcp", h.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	g.SetDeadline(time.Now().Add(10 * time.Second))
	io.WriteString(g, "GET /sse HTTP/1.1\r\nHost: x\r\nAccept: text/event-stream\r\n\r\n")
	gr := bufio.NewReader(g)
	resp, err := http.ReadResponse(gr, nil)
	if err != nil {
		t.Fatal(err)
	}
	sr := bufio.NewReader(resp.Body)
	for {
		l, err := sr.ReadString('\n')
		if err != nil {
			t.Fatal(err)
		}
		if strings.HasPrefix(l, "data: /messages") {
			break
		}
	}
	// The POST on another connection.
	c, err := net.Dial("tcp", h.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	body := call(11, "echo", `{}`)
	fmt.Fprintf(c, "POST /messages?sessionId=abc123 HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", len(body), body)
	if r, err := http.ReadResponse(bufio.NewReader(c), nil); err != nil || r.StatusCode != 202 {
		t.Fatalf("legacy POST: %v %v", r, err)
	}
	for {
		l, err := sr.ReadString('\n')
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(l, `"id":11`) {
			break
		}
	}
	deadline := time.Now().Add(30 * time.Second) // a hang guard: records follow the exchange's end
	for time.Now().Before(deadline) {
		for _, r := range h.recs() {
			if r.Direction == ServerToClient && r.Kind == "response" && r.ID == "11" && r.Method == "tools/call" && r.Name == "echo" {
				return
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("no correlated response record: %+v", h.recs())
	// A denied legacy POST is refused on the POST itself (403 with the JSON-RPC error).
}

// TestLegacyDenied: a denied 2024-11-05 POST gets 403 with the JSON-RPC error (its client reads
// only the POST's status; a 200 would leave it waiting on the stream).
func TestLegacyDenied(t *testing.T) {
	u := newUpstream(t, echoServer)
	h := newHarness(t, u, denyRules, Options{}, NewSessions(0))
	r := post(t, h.addr, "Content-Type: application/json\r\n", call(1, "denied_delete", `{}`))
	if r.status != 200 {
		t.Fatalf("streamable POST: %d", r.status)
	}
	c, _ := net.Dial("tcp", h.addr)
	defer c.Close()
	body := call(2, "denied_delete", `{}`)
	fmt.Fprintf(c, "POST /messages?sessionId=zz HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", len(body), body)
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil || resp.StatusCode != 403 {
		t.Fatalf("legacy denied POST: %v %v", resp, err)
	}
	if u.calls.Load() != 0 {
		t.Fatal("the server saw a denied call")
	}
}

// TestResponsePolicy: a rule written for results (mcp.direction) replaces a result with an error
// naming the appliance — never a made-up result — and request rules leave results alone.
func TestResponsePolicy(t *testing.T) {
	u := newUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"jsonrpc":"2.0","id":1,"result":{"content":[{"type":"text","text":"AKIA-SECRET-KEY"}]}}`)
	})
	rules := append([]policy.RuleSpec{{Name: "no-keys-out", When: `mcp.direction == "server_to_client" && has(mcp.result) && string(mcp.result).contains("AKIA")`, Action: "deny", Reason: "credential in a result"}}, denyRules...)
	h := newHarness(t, u, rules, Options{}, nil)
	r := post(t, h.addr, jsonHeaders, call(1, "echo", `{}`))
	if bytes.Contains(r.body, []byte("AKIA")) {
		t.Fatalf("the result reached the client: %s", r.body)
	}
	denial(t, r, "1", CodeDenied, "no-keys-out")
}

// TestServerSmugglingRefused: the strict decoder applies to what the server sends too. A response
// body or an SSE event with a duplicate key (which a lenient client would still read, taking the
// last value) never reaches the client: the body becomes an error naming the appliance, the event
// is dropped. A response whose type is JSON-like but not application/json is inspected as well.
func TestServerSmugglingRefused(t *testing.T) {
	const dup = `{"jsonrpc":"2.0","id":1,"result":{"content":[{"type":"text","text":"AKIA-SECRET"}]},"result":{"content":[]}}`
	for _, c := range []struct{ name, ctype, body string }{
		{"json body", "application/json", dup},
		{"json-rpc type", "application/json-rpc", dup},
		{"no type", "", dup},
		{"sse event", "text/event-stream", "event: message\ndata: " + dup + "\n\n"},
	} {
		t.Run(c.name, func(t *testing.T) {
			u := newUpstream(t, func(w http.ResponseWriter, r *http.Request) {
				if c.ctype != "" {
					w.Header().Set("Content-Type", c.ctype)
				} else {
					w.Header()["Content-Type"] = nil
				}
				io.WriteString(w, c.body)
			})
			h := newHarness(t, u, nil, Options{}, nil)
			r := post(t, h.addr, jsonHeaders, call(1, "echo", `{}`))
			if bytes.Contains(r.body, []byte("AKIA")) {
				t.Fatalf("a response the strict decoder refuses reached the client: %d %s", r.status, r.body)
			}
		})
	}
}

// TestRequestClaimsRefused: a repeated Mcp-* header and a body in a charset other than UTF-8 are
// refused before the server sees them.
func TestRequestClaimsRefused(t *testing.T) {
	u := newUpstream(t, echoServer)
	h := newHarness(t, u, nil, Options{}, nil)
	if r := post(t, h.addr, jsonHeaders+"Mcp-Method: tools/call\r\nMcp-Name: echo\r\nMcp-Name: denied_delete\r\n", call(1, "echo", `{}`)); r.status != 400 {
		t.Errorf("repeated Mcp-Name: %d %s, want 400", r.status, r.body)
	}
	if r := post(t, h.addr, "Content-Type: application/json; charset=utf-16\r\n", call(2, "echo", `{}`)); r.status != 415 {
		t.Errorf("utf-16 body: %d %s, want 415", r.status, r.body)
	}
	if u.calls.Load() != 0 {
		t.Fatal("the server saw a refused request")
	}
}
