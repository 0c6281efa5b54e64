package level2

import (
	"bytes"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"mcpintercept/policy"
)

// Issue 29 item 5: a redact rule on tools/call covers every message the server sends on the
// call's stream — its log and progress notifications and the sampling request it makes while
// answering — not only the result. Each message is still judged and written as it arrives.

// labRedact is the lab's rule (examples/lab.yaml, rule set lab-level2).
var labRedact = policy.RuleSpec{Name: "redact-canary", When: `mcp.direction == "server_to_client" && mcp.method == "tools/call"`,
	Action: "redact", Redact: &policy.Redact{Patterns: []string{`CANARY-[0-9A-Za-z]+`}, Marker: "[REDACTED]"}}

// callStream answers every POST with an event stream: a log notification, a progress
// notification and a sampling request that all carry a canary, then the result with one.
func callStream(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "text/event-stream")
	for _, m := range []string{
		`{"jsonrpc":"2.0","method":"notifications/message","params":{"level":"info","logger":"tool","data":"log CANARY-log1"}}`,
		`{"jsonrpc":"2.0","method":"notifications/progress","params":{"progressToken":"p","progress":1,"total":2,"message":"progress CANARY-prog1"}}`,
		`{"jsonrpc":"2.0","id":"s1","method":"sampling/createMessage","params":{"messages":[{"role":"user","content":{"type":"text","text":"sampling CANARY-samp1"}}],"maxTokens":5}}`,
		`{"jsonrpc":"2.0","method":"notifications/message","params":{"level":"info","data":{"nested":["CANARY-log2"]}}}`,
		`{"jsonrpc":"2.0","id":1,"result":{"content":[{"type":"text","text":"done CANARY-res1"}]}}`,
	} {
		fmt.Fprintf(w, "event: message\ndata: %s\n\n", m)
		w.(http.Flusher).Flush()
	}
}

func TestRedactCoversTheCallsStream(t *testing.T) {
	for _, c := range []struct {
		name      string
		body      string
		redacted  bool // every canary hidden
		redaction int  // records naming the rule
	}{
		{"tools/call stream", call(1, "leaky", `{}`), true, 5},
		// The rule is on tools/call: another request's stream is left as the server sent it.
		{"tools/list stream", `{"jsonrpc":"2.0","id":1,"method":"tools/list"}`, false, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			u := newUpstream(t, callStream)
			h := newHarness(t, u, []policy.RuleSpec{labRedact}, Options{}, NewSessions(0))
			r := post(t, h.addr, jsonHeaders, c.body)
			if r.status != 200 {
				t.Fatalf("status %d: %s", r.status, r.body)
			}
			leaks := canaryRE.FindAll(r.body, -1)
			if c.redacted && len(leaks) > 0 {
				t.Errorf("%d canaries reached the client on the call's stream: %q\n%s", len(leaks), leaks, r.body)
			}
			if !c.redacted && len(leaks) != 5 {
				t.Errorf("%d canaries reached the client, want the 5 sent:\n%s", len(leaks), r.body)
			}
			// Every message still reaches the client, each in its own event.
			if n := bytes.Count(r.body, []byte("\n\n")); n != 5 {
				t.Errorf("%d events, want 5:\n%s", n, r.body)
			}
			if c.redacted && bytes.Count(r.body, []byte("[REDACTED]")) != 5 {
				t.Errorf("want 5 markers:\n%s", r.body)
			}
			h.awaitRecord(t, func(r *Record) bool { return r.Direction == ClientToServer })
			n := 0
			for _, rec := range h.recs() {
				if strings.Contains(rec.Reason, "redacted by rule redact-canary") {
					n++
				}
				if canaryRE.MatchString(rec.Reason + rec.Err) {
					t.Errorf("a record carries the canary: %+v", rec)
				}
			}
			if n != c.redaction {
				t.Errorf("%d records say redact-canary redacted something, want %d: %+v", n, c.redaction, h.recs())
			}
		})
	}
}
