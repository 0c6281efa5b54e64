package level2

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"mcpintercept/policy"
)

// TestLegacyStreamServerRequestTool: a server→client request on a 2024-11-05 GET stream (where
// every call's messages come) belongs to the session's pending call, so a rule on mcp.tool
// judges it as it does on a 2025-x POST stream. With calls of two different tools pending, which
// one it belongs to cannot be told: a rule reading mcp.tool is a rule error (denied by default),
// never the "no match" of an empty tool. On the code before streamTool, mcp.tool was empty
// there and every row but the control let the sampling request through.
func TestLegacyStreamServerRequestTool(t *testing.T) {
	rule := policy.RuleSpec{Name: "no-sampling-for-dangerous",
		When:   `mcp.direction == "server_to_client" && mcp.method == "sampling/createMessage" && mcp.tool == "dangerous"`,
		Action: "deny", Reason: "no sampling while dangerous runs"}
	for _, c := range []struct {
		name      string
		calls     []string
		delivered bool
		reason    string // in the sampling request's record
	}{
		{name: "one pending call of the tool", calls: []string{"dangerous"}, delivered: false, reason: "no sampling while dangerous runs"},
		{name: "one pending call of another tool (control)", calls: []string{"benign"}, delivered: true, reason: "no rule matched"},
		{name: "calls of two tools pending", calls: []string{"benign", "dangerous"}, delivered: false, reason: "cannot be established"},
	} {
		t.Run(c.name, func(t *testing.T) {
			var mu sync.Mutex
			arrived := 0
			all := make(chan struct{})
			u := newUpstream(t, func(w http.ResponseWriter, r *http.Request) {
				if r.Method == "GET" {
					w.Header().Set("Content-Type", "text/event-stream")
					io.WriteString(w, "event: endpoint\ndata: /messages?sessionId=T\n\n")
					w.(http.Flusher).Flush()
					<-all
					fmt.Fprintf(w, "event: message\ndata: %s\n\n", legacySampling)
					w.(http.Flusher).Flush()
					return
				}
				io.Copy(io.Discard, r.Body)
				mu.Lock()
				if arrived++; arrived == len(c.calls) {
					close(all)
				}
				mu.Unlock()
				w.WriteHeader(202)
			})
			h := newHarness(t, u, []policy.RuleSpec{rule}, Options{}, NewSessions(0))
			dial := func() net.Conn {
				conn, err := net.Dial("tcp", h.addr)
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { conn.Close() })
				conn.SetDeadline(time.Now().Add(10 * time.Second))
				return conn
			}
			g := dial()
			io.WriteString(g, "GET /sse HTTP/1.1\r\nHost: x\r\nAccept: text/event-stream\r\n\r\n")
			resp, err := http.ReadResponse(bufio.NewReader(g), nil)
			if err != nil {
				t.Fatal(err)
			}
			stream := bufio.NewReader(resp.Body)
			for {
				l, err := stream.ReadString('\n')
				if err != nil {
					t.Fatal(err)
				}
				if strings.HasPrefix(l, "data: /messages") {
					break
				}
			}
			for i, name := range c.calls {
				body := call(7+i, name, `{}`)
				p := dial()
				fmt.Fprintf(p, "POST /messages?sessionId=T HTTP/1.1\r\nHost: x\r\n%sContent-Length: %d\r\n\r\n%s", jsonHeaders, len(body), body)
				if r, err := http.ReadResponse(bufio.NewReader(p), nil); err != nil || r.StatusCode != 202 {
					t.Fatalf("POST: %v %v", r, err)
				}
			}
			b, _ := io.ReadAll(stream) // the server ends the stream after the sampling request
			delivered := strings.Contains(string(b), "sampling/createMessage")
			var rec *Record
			eventually(t, func() bool { rec = samplingRecord(h); return rec != nil })
			if delivered != c.delivered || !strings.Contains(rec.Reason, c.reason) {
				t.Fatalf("sampling request delivered %v (want %v); record %s %q (want %q in it)", delivered, c.delivered, rec.Decision, rec.Reason, c.reason)
			}
		})
	}
}
