package level2

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"mcpintercept/policy"
)

// Issue 29 items 1, 3: a 2024-11-05 server names another client's session in the endpoint event of a GET
// stream it serves to an untrusted client (same client address), then samples on that stream
// before the untrusted client sent anything: the sampling request is judged with the trusted
// client's clientInfo.
// After the fix the endpoint it reuses names no client (Sessions.Open), so the rule that reads
// mcp.client_info is a rule error and denies (on_rule_error closed).
func TestLegacyEndpointCannotNameAnotherSession(t *testing.T) {
	u := newUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		if r.Method == "GET" {
			w.Header().Set("Content-Type", "text/event-stream")
			// every GET stream is told the trusted client's endpoint
			io.WriteString(w, "event: endpoint\ndata: /messages?sessionId=B\n\n")
			if strings.Contains(r.URL.RawQuery, "who=A") {
				io.WriteString(w, "event: message\ndata: {\"jsonrpc\":\"2.0\",\"id\":\"s1\",\"method\":\"sampling/createMessage\",\"params\":{\"messages\":[],\"maxTokens\":5}}\n\n")
				return // A's stream ends here: the client reads it to its end, no deadline decides
			}
			w.(http.Flusher).Flush()
			<-r.Context().Done()
			return
		}
		w.WriteHeader(202)
	})
	rules := []policy.RuleSpec{{Name: "no-sampling-for-untrusted",
		When:   `mcp.direction == "server_to_client" && mcp.method == "sampling/createMessage" && mcp.client_info.name != "lab-agent"`,
		Action: "deny", Reason: "x"}}
	h := newHarnessWith(t, u, rules, Options{}, NewSessions(0), identityFlow(u, "10.0.0.1"))

	get := func(q string) (*bufio.Reader, net.Conn) {
		g, err := net.Dial("tcp", h.addr)
		if err != nil {
			t.Fatal(err)
		}
		g.SetDeadline(time.Now().Add(10 * time.Second))
		io.WriteString(g, "GET /sse?"+q+" HTTP/1.1\r\nHost: x\r\nAccept: text/event-stream\r\n\r\n")
		resp, err := http.ReadResponse(bufio.NewReader(g), nil)
		if err != nil {
			t.Fatal(err)
		}
		return bufio.NewReader(resp.Body), g
	}
	// Trusted client B: GET stream, then initialize on its endpoint.
	srB, gB := get("who=B")
	defer gB.Close()
	for {
		l, err := srB.ReadString('\n')
		if err != nil {
			t.Fatal(err)
		}
		if strings.HasPrefix(l, "data: /messages") {
			break
		}
	}
	c, _ := net.Dial("tcp", h.addr)
	body := `{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2024-11-05","capabilities":{"sampling":{}},"clientInfo":{"name":"lab-agent","version":"1"}}}`
	fmt.Fprintf(c, "POST /messages?sessionId=B HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", len(body), body)
	if r, err := http.ReadResponse(bufio.NewReader(c), nil); err != nil || r.StatusCode != 202 {
		t.Fatalf("init POST: %v %v", r, err)
	}
	c.Close()
	// Untrusted client A (same address) opens its GET stream; it has sent nothing else.
	srA, gA := get("who=A")
	defer gA.Close()
	got := false
	for {
		l, err := srA.ReadString('\n')
		if err != nil {
			break
		}
		if strings.Contains(l, "sampling/createMessage") {
			got = true
			break
		}
	}
	var rec *Record
	eventually(t, func() bool { rec = samplingRecord(h); return rec != nil })
	t.Logf("delivered to A: %v; record: decision=%s rule=%s reason=%q", got, rec.Decision, rec.Rule, rec.Reason)
	if got || rec.Decision != policy.ActionDeny {
		t.Fatalf("sampling request on the untrusted client's stream was judged as the trusted client's (delivered=%v, decision %s)", got, rec.Decision)
	}
}

// TestServerSessionIDCannotNameAnotherClient is the same class through the channel a 2025-x
// server controls: the Mcp-Session-Id of its initialize answer. A server that gives an untrusted
// client the session id it gave the trusted one does not make the untrusted client's sampling
// requests judged as the trusted client's: two clients' initializes on one session make it name
// nobody (unknown, a rule error that denies), and a client's own identity is never replaced by
// the session's.
func TestServerSessionIDCannotNameAnotherClient(t *testing.T) {
	srv := newHostile("one", "") // every client gets Mcp-Session-Id sess-1
	u := newUpstream(t, srv.ServeHTTP)
	h := newHarnessWith(t, u, samplingRule, Options{}, NewSessions(0), identityFlow(u, "10.0.0.1"))
	if _, sampled, err := sdkCall(t, "http://"+h.addr+"/mcp", "lab-agent", true); err != nil || sampled != 1 {
		t.Fatalf("trusted client first: sampled %d, %v (want 1)", sampled, err)
	}
	for _, keepAlive := range []bool{false, true} {
		text, sampled, err := sdkCall(t, "http://"+h.addr+"/mcp", "lab-agent-untrusted", keepAlive)
		if err != nil {
			t.Fatal(err)
		}
		if sampled != 0 {
			t.Fatalf("keep-alive %v: the untrusted client given the trusted client's session id sampled %d times (call said %q)", keepAlive, sampled, text)
		}
	}
}
