package level2

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"mcpintercept/policy"
)

// The bypasses an outside review found in Level 2 (issue 16), one test each. Each failed before
// the fix. The rule behind them (DESIGN.md): Level 2 decodes strictly but *detects* leniently —
// whatever any supported peer would decode and act on is judged or refused. The peers' own
// decoders run over the same inputs in FuzzPeerDifferential.

// peerRules are the lab's Level 2 rules (examples/lab.yaml, rule set lab-level2) that the review
// attacked: deny denied_* tools, deny sampling for untrusted clients, redact canaries.
var peerRules = []policy.RuleSpec{
	{Name: "deny-denied-tools", When: `mcp.method == "tools/call" && mcp.name.startsWith("denied_")`, Action: "deny", Reason: "no"},
	{Name: "no-sampling-for-untrusted", When: `mcp.direction == "server_to_client" && mcp.method == "sampling/createMessage" && mcp.client_info.name.endsWith("-untrusted")`,
		Action: "deny", Reason: "untrusted"},
	{Name: "no-sampling", When: `mcp.direction == "server_to_client" && mcp.method == "sampling/createMessage" && !has(mcp.client_info)`,
		Action: "deny", Reason: "no client info"},
	{Name: "redact-canary", When: `mcp.direction == "server_to_client"`, Action: "redact",
		Redact: &policy.Redact{Patterns: []string{`CANARY-[0-9A-Za-z]+`}}},
}

const samplingRequest = `{"jsonrpc":"2.0","id":"s1","method":"sampling/createMessage","params":{"messages":[],"maxTokens":1}}`

// awaitRecord waits (a hang guard, not a timing assertion: records are written once the exchange
// is done, which is after the client read its answer) for a record that pred accepts.
func (h *harness) awaitRecord(t *testing.T, pred func(*Record) bool) *Record {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		for _, r := range h.recs() {
			if pred(r) {
				return r
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("no such record; have %+v", h.recs())
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func isSampling(r *Record) bool {
	return r.Direction == ServerToClient && r.Method == "sampling/createMessage"
}

// Case 1: a server request in a JSON body, alone or in a batch, denied by policy, is dropped
// there as it is in a stream (and the server answered); the client never gets it.
func TestServerRequestInJSONBody(t *testing.T) {
	for _, c := range []struct{ name, body string }{
		{"alone", samplingRequest},
		{"in a batch", `[` + samplingRequest + `,{"jsonrpc":"2.0","id":1,"result":{"content":[]}}]`},
		{"padded", "\u00a0" + samplingRequest},
	} {
		t.Run(c.name, func(t *testing.T) {
			u := newUpstream(t, func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", "application/json")
				io.WriteString(w, c.body)
			})
			h := newHarness(t, u, peerRules, Options{}, NewSessions(0))
			r := post(t, h.addr, jsonHeaders, call(1, "echo", `{}`))
			if bytes.Contains(r.body, []byte("sampling/createMessage")) {
				t.Fatalf("the denied server request reached the client: %s", r.body)
			}
			if strings.HasPrefix(c.name, "in a batch") {
				if !bytes.Contains(r.body, []byte(`"id":1`)) {
					t.Errorf("the batch lost the real response: %s", r.body)
				}
			} else {
				denial(t, r, "1", CodeDenied, "level2")
			}
			rec := h.awaitRecord(t, isSampling)
			if rec.Decision != policy.ActionDeny {
				t.Errorf("sampling record %+v", rec)
			}
		})
	}
}

// Case 3: SSE values that the Go SDK client trims (bytes.TrimSpace) are judged.
func TestSSEValuesPeersTrim(t *testing.T) {
	for _, pad := range []string{"\v", "\f", "\u00a0", "\u2028", "\ufeff", "\u0085", " \t"} {
		t.Run(fmt.Sprintf("%q", pad), func(t *testing.T) {
			u := newUpstream(t, func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", "text/event-stream")
				fmt.Fprintf(w, "event: message\ndata: %s%s\n\n", pad, samplingRequest)
				fmt.Fprintf(w, "data: %s{\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{\"t\":\"CANARY-abc\"}}\n\n", pad)
			})
			h := newHarness(t, u, peerRules, Options{}, NewSessions(0))
			r := post(t, h.addr, jsonHeaders, call(1, "echo", `{}`))
			if bytes.Contains(r.body, []byte("sampling/createMessage")) || bytes.Contains(r.body, []byte("CANARY-abc")) {
				t.Fatalf("an unjudged event reached the client: %q", r.body)
			}
			h.awaitRecord(t, isSampling)
		})
	}
}

// Case 3 (framing): a bare CR ends a line for the WHATWG parser but not for the Go SDK's, which
// reads `data:\r{…}` as one data line: such a stream is refused.
func TestSSEBareCRRefused(t *testing.T) {
	u := newUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		io.WriteString(w, "data:\r"+samplingRequest+"\n\n")
	})
	h := newHarness(t, u, peerRules, Options{}, NewSessions(0))
	c := dialHarness(t, h.addr)
	body := call(1, "echo", `{}`)
	fmt.Fprintf(c, "POST /mcp HTTP/1.1\r\nHost: x\r\n%sContent-Length: %d\r\n\r\n%s", jsonHeaders, len(body), body)
	got, _ := io.ReadAll(c)
	if bytes.Contains(got, []byte("sampling/createMessage")) {
		t.Fatalf("the client got the event: %q", got)
	}
	h.awaitRecord(t, func(r *Record) bool { return strings.Contains(r.Reason, "bare CR") })
}

// Case 4: a second endpoint event whose data is a JSON-RPC request is judged: the Go SDK's legacy
// SSE client decodes every event after the first.
func TestEndpointEventCarryingARequest(t *testing.T) {
	u := newUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		io.WriteString(w, "event: endpoint\ndata: /messages?sessionId=e1\n\n")
		io.WriteString(w, "event: endpoint\ndata: "+samplingRequest+"\n\n")
	})
	h := newHarness(t, u, peerRules, Options{}, NewSessions(0))
	c := dialHarness(t, h.addr)
	io.WriteString(c, "GET /sse HTTP/1.1\r\nHost: x\r\nAccept: text/event-stream\r\n\r\n")
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatal(err)
	}
	got, _ := io.ReadAll(resp.Body)
	if !bytes.Contains(got, []byte("/messages?sessionId=e1")) || bytes.Contains(got, []byte("sampling/createMessage")) {
		t.Fatalf("stream as the client got it: %q", got)
	}
	h.awaitRecord(t, isSampling)
}

// Case 5: a request whose Content-Type a server trims (NBSP, Unicode spaces) or only mentions
// JSON, and whose body starts with a BOM, is judged like any JSON-RPC body.
func TestRequestTypeAndBOMPeersTrim(t *testing.T) {
	denied := `{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"denied_delete"}}`
	for _, c := range []struct{ name, ctype, body string }{
		{"nbsp byte and BOM", "\xa0application/json", "\ufeff" + denied},
		{"unicode nbsp", "\u00a0application/json", denied},
		{"BOM, no type", "", "\ufeff" + denied},
		{"mentions json", "text/plain; x=application/json", denied},
		{"vertical tab", "application/json", "\v" + denied},
	} {
		t.Run(c.name, func(t *testing.T) {
			u := newUpstream(t, echoServer)
			h := newHarness(t, u, peerRules, Options{}, NewSessions(0))
			hdr := "Accept: application/json, text/event-stream\r\n"
			if c.ctype != "" {
				hdr += "Content-Type: " + c.ctype + "\r\n"
			}
			r := post(t, h.addr, hdr, c.body)
			if u.calls.Load() != 0 {
				t.Fatalf("the denied call reached the server (answer %d %s)", r.status, r.body)
			}
			denial(t, r, "7", CodeDenied, "deny-denied-tools")
		})
	}
	t.Run("repeated type", func(t *testing.T) {
		u := newUpstream(t, echoServer)
		h := newHarness(t, u, peerRules, Options{}, NewSessions(0))
		r := post(t, h.addr, "Content-Type: text/plain\r\nContent-Type: application/json\r\n", call(1, "echo", `{}`))
		if r.status != 400 || u.calls.Load() != 0 {
			t.Fatalf("repeated Content-Type: %d %s", r.status, r.body)
		}
	})
}

// Case 6: numeric ids correlate by value (the Go SDK answers a request id 1.0 with 1; a server may
// answer 1 with 1.0), so response rules apply; a non-integer id is refused both ways.
func TestNumericIDsByValue(t *testing.T) {
	for _, c := range []struct{ name, reqID, respID string }{
		{"client 1.0, server 1", "1.0", "1"},
		{"client 1, server 1.0", "1", "1.0"},
		{"client 1, server 1e0", "1", "1e0"},
		{"client 10E-1, server 1", "10E-1", "1"},
	} {
		t.Run(c.name, func(t *testing.T) {
			u := newUpstream(t, func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", "application/json")
				fmt.Fprintf(w, `{"jsonrpc":"2.0","id":%s,"result":{"tools":[{"name":"echo"},{"name":"denied_delete"}],"x":"CANARY-zz"}}`, c.respID)
			})
			h := newHarness(t, u, peerRules, Options{}, NewSessions(0))
			r := post(t, h.addr, jsonHeaders, `{"jsonrpc":"2.0","id":`+c.reqID+`,"method":"tools/list"}`)
			if bytes.Contains(r.body, []byte("denied_delete")) || bytes.Contains(r.body, []byte("CANARY-zz")) {
				t.Fatalf("the response was not correlated, rules skipped: %s", r.body)
			}
		})
	}
	for _, id := range []string{"1.5", "9007199254740993", "1e400", "-0.1"} {
		t.Run("refused "+id, func(t *testing.T) {
			u := newUpstream(t, echoServer)
			h := newHarness(t, u, peerRules, Options{}, NewSessions(0))
			r := post(t, h.addr, jsonHeaders, `{"jsonrpc":"2.0","id":`+id+`,"method":"tools/list"}`)
			if r.status != 400 || u.calls.Load() != 0 {
				t.Fatalf("id %s: %d %s", id, r.status, r.body)
			}
			u2 := newUpstream(t, func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", "application/json")
				fmt.Fprintf(w, `{"jsonrpc":"2.0","id":%s,"result":{"x":"CANARY-zz"}}`, id)
			})
			h2 := newHarness(t, u2, peerRules, Options{}, NewSessions(0))
			r = post(t, h2.addr, jsonHeaders, `{"jsonrpc":"2.0","id":1,"method":"tools/list"}`)
			if bytes.Contains(r.body, []byte("CANARY-zz")) || !bytes.Contains(r.body, []byte(Intermediary)) {
				t.Fatalf("server id %s reached the client: %s", id, r.body)
			}
		})
	}
}

// Case 8: an error message that the client sees redacted is redacted in the record too.
func TestRedactedErrorMessageNotRecorded(t *testing.T) {
	u := newUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"jsonrpc":"2.0","id":1,"error":{"code":-32000,"message":"bad key CANARY-e77"}}`)
	})
	h := newHarness(t, u, peerRules, Options{}, NewSessions(0))
	r := post(t, h.addr, jsonHeaders, call(1, "echo", `{}`))
	if bytes.Contains(r.body, []byte("CANARY-e77")) {
		t.Fatalf("the client saw the canary: %s", r.body)
	}
	rec := h.awaitRecord(t, func(r *Record) bool {
		return r.Direction == ClientToServer && r.Method == "tools/call" && r.Status != 0
	})
	for _, r := range h.recs() {
		if strings.Contains(fmt.Sprintf("%+v", *r), "CANARY-e77") {
			t.Fatalf("a record holds the redacted value: %+v", *r)
		}
	}
	if !strings.Contains(rec.Err, "[REDACTED]") {
		t.Errorf("record err %q", rec.Err)
	}
}

// Case 10: http.path is the path at Level 2 as at Level 1, whatever the target's form.
func TestHTTPPathAbsoluteForm(t *testing.T) {
	u := newUpstream(t, echoServer)
	rules := []policy.RuleSpec{{Name: "no-admin", When: `http.path == "/admin"`, Action: "deny"}}
	h := newHarness(t, u, rules, Options{}, NewSessions(0))
	c := dialHarness(t, h.addr)
	body := call(1, "echo", `{}`)
	fmt.Fprintf(c, "POST http://x/admin HTTP/1.1\r\nHost: x\r\n%sContent-Length: %d\r\n\r\n%s", jsonHeaders, len(body), body)
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	if u.calls.Load() != 0 {
		t.Fatalf("absolute-form /admin reached the server: %d %s", resp.StatusCode, b)
	}
}

// Case 13: a 2024-11-05 client's initialize clientInfo judges what the server asks of it on the
// GET stream (that transport never sends Mcp-Session-Id; its session is the endpoint URL's).
func TestLegacyClientInfo(t *testing.T) {
	// The TypeScript SDK's endpoint (an absolute path, sessionId) and the Go SDK's (relative to the
	// stream, sessionid), and one whose parameter has another name.
	for _, c := range []struct{ endpoint, post string }{
		{"/messages?sessionId=L1", "/messages?sessionId=L1"},
		{"?sessionid=L2", "/sse?sessionid=L2"},
		{"/m?session=L3", "/m?session=L3"},
	} {
		t.Run(c.endpoint, func(t *testing.T) { legacyClientInfo(t, c.endpoint, c.post) })
	}
}

func legacyClientInfo(t *testing.T, endpoint, post string) {
	initialized := make(chan struct{})
	u := newUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		if r.Method == "GET" {
			w.Header().Set("Content-Type", "text/event-stream")
			io.WriteString(w, "event: endpoint\ndata: "+endpoint+"\n\n")
			w.(http.Flusher).Flush()
			select {
			case <-initialized:
			case <-r.Context().Done():
				return
			}
			io.WriteString(w, "event: message\ndata: "+samplingRequest+"\n\n")
			return
		}
		w.WriteHeader(202)
		close(initialized)
	})
	h := newHarness(t, u, peerRules[:2], Options{}, NewSessions(0))
	g := dialHarness(t, h.addr)
	io.WriteString(g, "GET /sse HTTP/1.1\r\nHost: x\r\nAccept: text/event-stream\r\n\r\n")
	resp, err := http.ReadResponse(bufio.NewReader(g), nil)
	if err != nil {
		t.Fatal(err)
	}
	sr := bufio.NewReader(resp.Body)
	for {
		l, err := sr.ReadString('\n')
		if err != nil {
			t.Fatal(err)
		}
		if strings.HasPrefix(l, "data: "+endpoint) {
			break
		}
	}
	c, err := net.Dial("tcp", h.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	body := `{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2024-11-05","capabilities":{"sampling":{}},"clientInfo":{"name":"lab-agent-untrusted","version":"1"}}}`
	fmt.Fprintf(c, "POST "+post+" HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", len(body), body)
	if r, err := http.ReadResponse(bufio.NewReader(c), nil); err != nil || r.StatusCode != 202 {
		t.Fatalf("legacy POST: %v %v", r, err)
	}
	rec := h.awaitRecord(t, isSampling)
	if rec.Decision != policy.ActionDeny || rec.Rule != "no-sampling-for-untrusted" {
		t.Fatalf("sampling on a legacy stream: %+v", rec)
	}
}

// Case 14: an empty answer (202 or 200 typed JSON, chunked or not) carries no message and passes
// unchanged.
func TestEmptyJSONAnswerPasses(t *testing.T) {
	for _, status := range []int{202, 200} {
		t.Run(fmt.Sprint(status), func(t *testing.T) {
			u := newUpstream(t, func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", "application/json")
				w.WriteHeader(status)
				w.(http.Flusher).Flush() // chunked, as tmcp answers every legacy POST
			})
			h := newHarness(t, u, peerRules, Options{}, NewSessions(0))
			r := post(t, h.addr, jsonHeaders, `{"jsonrpc":"2.0","method":"notifications/initialized"}`)
			if r.status != status || len(r.body) != 0 {
				t.Fatalf("got %d %q, want %d and an empty body", r.status, r.body, status)
			}
		})
	}
}

// Case 11: an argument key that a server decoding with encoding/json reads as one a rule reads
// (PATH for path, optſ for opts) is refused at every depth, not only down to params.
func TestCaseVariantArgumentKeysRefused(t *testing.T) {
	rules := append([]policy.RuleSpec{{Name: "no-deep-etc", When: `mcp.method == "tools/call" && has(mcp.arguments.opts) && has(mcp.arguments.opts.path) && mcp.arguments.opts.path.startsWith("/etc")`, Action: "deny"}}, denyRules...)
	for _, args := range []string{`{"PATH":"/etc/passwd"}`, `{"opt\u017f":{"path":"/etc/passwd"}}`, `{"opts":{"Path":"/etc/passwd"}}`, `{"opts":{"PATH":"/etc"}}`} {
		t.Run(args, func(t *testing.T) {
			u := newUpstream(t, echoServer)
			h := newHarness(t, u, rules, Options{}, NewSessions(0))
			r := post(t, h.addr, jsonHeaders, call(1, "read", args))
			if u.calls.Load() != 0 {
				t.Fatalf("the call reached the server: %d %s", r.status, r.body)
			}
			if r.status != 400 || !bytes.Contains(r.body, []byte(Intermediary)) {
				t.Fatalf("refusal %d %s", r.status, r.body)
			}
		})
	}
	u := newUpstream(t, echoServer)
	h := newHarness(t, u, rules, Options{}, NewSessions(0))
	if r := post(t, h.addr, jsonHeaders, call(1, "read", `{"path":"/tmp/x","Other":1}`)); r.status != 200 || u.calls.Load() != 1 {
		t.Fatalf("an exact key and a key no rule reads must pass: %d %s", r.status, r.body)
	}
}

// Case 6 (TypeScript): the TypeScript SDK matches a response to its request by Number(id), so
// "1", " 1 ", "0x1" and "1e0" answer request 1 there; Level 2 correlates them so, and a response
// it cannot pair with an outstanding request of this client is dropped, never passed on to be
// matched by the client to a request whose response rules it would skip.
func TestResponseIDsAsTheClientMatchesThem(t *testing.T) {
	for _, respID := range []string{`"1"`, `" 1 "`, `"0x1"`, `"1e0"`, `"+1"`, `2`, `"x"`} {
		t.Run(respID, func(t *testing.T) {
			u := newUpstream(t, func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", "application/json")
				fmt.Fprintf(w, `{"jsonrpc":"2.0","id":%s,"result":{"tools":[{"name":"echo"},{"name":"denied_delete"}],"x":"CANARY-zz"}}`, respID)
			})
			h := newHarness(t, u, peerRules, Options{}, NewSessions(0))
			r := post(t, h.addr, jsonHeaders, `{"jsonrpc":"2.0","id":1,"method":"tools/list"}`)
			if bytes.Contains(r.body, []byte("denied_delete")) || bytes.Contains(r.body, []byte("CANARY-zz")) {
				t.Fatalf("a response skipped its request's rules: %s", r.body)
			}
		})
	}
}

// dialHarness connects to the harness, closed when the test ends; its deadline is a hang guard.
func dialHarness(t *testing.T, addr string) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	c.SetDeadline(time.Now().Add(30 * time.Second))
	return c
}
