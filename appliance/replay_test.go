package appliance

import (
	"strings"
	"testing"
	"time"

	"mcpintercept/config"
	"mcpintercept/telemetry"
)

// TestRecordKind: a record's mcp.kind is known only where the record tells it. A response
// carries the method of the request it answers, so tools/call from the server is no request.
func TestRecordKind(t *testing.T) {
	for _, c := range []struct {
		method, id, dir string
		kind            string
		known           bool
	}{
		{"tools/call", "1", "client_to_server", "request", true},
		{"tools/call", "1", "server_to_client", "", false}, // its response or error
		{"sampling/createMessage", `"s-1"`, "server_to_client", "request", true},
		{"sampling/createMessage", `"s-1"`, "client_to_server", "", false}, // the client's answer
		{"ping", "7", "client_to_server", "", false},
		{"notifications/initialized", "", "client_to_server", "notification", true},
		{"", "3", "server_to_client", "", false},
	} {
		kind, known := recordKind(&telemetry.FlowRecord{Level: 2, MCPMethod: c.method, JSONRPCID: c.id, Direction: c.dir})
		if kind != c.kind || known != c.known {
			t.Errorf("%s %s %s: %q %v, want %q %v", c.method, c.id, c.dir, kind, known, c.kind, c.known)
		}
	}
}

// TestReplayUnknown: a rule whose outcome depends on the arguments is taken as the record says
// it went; the record then agrees only under that assumption (unknown), and a record that no
// outcome of it explains disagrees.
func TestReplayUnknown(t *testing.T) {
	cfg, err := config.Parse("c.yaml", []byte(`mechanism: nftables-tproxy
intercept: {destinations: [10.200.2.0/24], ports: [3024]}
routes:
  - {name: l2, match: {ports: [3024]}, tls: plaintext, level: 2, development: true, rule_set: s}
rule_sets:
  s:
    - name: deny-args
      when: mcp.method == "tools/call" && mcp.name == "echo" && mcp.arguments.text == "x"
      action: deny
    - name: deny-delete
      when: mcp.name == "delete"
      action: deny
`), config.Overrides{})
	if err != nil {
		t.Fatal(err)
	}
	rp, err := NewReplayer(cfg, "")
	if err != nil {
		t.Fatal(err)
	}
	at := time.Date(2026, 12, 2, 8, 0, 0, 0, time.UTC)
	replay := func(name, decision, rule string) ReplayResult {
		r := &telemetry.FlowRecord{Client: "10.200.1.2:40000", OrigDst: "10.200.2.2:3024", Level: 2, MCPMethod: "tools/call",
			MCPName: name, JSONRPCID: "1", Direction: "client_to_server", Decision: decision, Rule: rule}
		r.Time.Time = at
		return rp.Replay(1, r)
	}
	for _, c := range []struct {
		name, decision, rule, verdict, note string
	}{
		{"add", "allow", "", VerdictAgree, ""},                                  // decided by mcp.name: not unknown
		{"echo", "allow", "", VerdictUnknown, "deny-args did not match"},        // depends on the arguments
		{"echo", "deny", "deny-args", VerdictUnknown, "deny-args matched"},      // as recorded, if it matched
		{"delete", "allow", "", VerdictDisagree, ""},                            // deny-delete decides: a difference
		{"echo", "deny", "deny-delete", VerdictDisagree, "whatever the fields"}, // no outcome of deny-args gives it
	} {
		res := replay(c.name, c.decision, c.rule)
		if res.Verdict != c.verdict || !strings.Contains(res.Note, c.note) {
			t.Errorf("%s recorded %s by %q: %s (%s), want %s (%q)", c.name, c.decision, c.rule, res.Verdict, res.Note, c.verdict, c.note)
		}
	}
}

// TestReplayResponseRedaction: a request record that carries the redaction of its answer (Level 2
// writes it there) is not a decision of the request: skipped, not a disagreement (the lab's
// redact-canary over the demo's flow log).
func TestReplayResponseRedaction(t *testing.T) {
	rec := &telemetry.FlowRecord{Level: 2, Direction: telemetry.ClientToServer, MCPMethod: "tools/call", MCPName: "echo",
		JSONRPCID: "1", Decision: "allow", Rule: "redact-canary", Reason: "redacted by rule redact-canary at $.result.content[0].text"}
	if note := NotJudged(rec, nil); !strings.Contains(note, "redaction of the server's answer") {
		t.Fatalf("NotJudged = %q", note)
	}
	rec.Reason = "no rule matched"
	rec.Rule = ""
	if note := NotJudged(rec, nil); note != "" {
		t.Fatalf("an ordinary request record is not judged: %q", note)
	}
}
