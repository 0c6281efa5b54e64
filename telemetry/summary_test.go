package telemetry

import (
	"bytes"
	"strings"
	"testing"
)

func TestLiveLineAndSummary(t *testing.T) {
	node := &Process{PID: 42, Comm: "node"}
	recs := []FlowRecord{
		{Level: 1, Process: node, MCPMethod: "tools/call", MCPName: "echo", OrigDst: "10.0.0.1:443", Status: 200, DurationMS: 10, Decision: "allow"},
		{Level: 1, Process: node, MCPMethod: "tools/call", MCPName: "echo", OrigDst: "10.0.0.1:443", Status: 200, DurationMS: 30, Decision: "allow"},
		{Level: 1, Process: node, MCPMethod: "tools/call", MCPName: "denied_delete", OrigDst: "10.0.0.1:443", Status: 403, Decision: "deny", Rule: "no-delete"},
		{Level: 0, Process: &Process{PID: 7, Comm: "curl"}, TLS: "passthrough", OrigDst: "10.0.0.2:22", Decision: "allow"},
	}
	tests := []struct{ name, want string }{
		{"request", "mcpintercept: node[42] tools/call echo -> 10.0.0.1:443 200 10ms allow"},
		{"denial names the rule", "mcpintercept: node[42] tools/call denied_delete -> 10.0.0.1:443 403 0ms deny (no-delete)"},
	}
	if got := LiveLine(recs[0]); got != tests[0].want {
		t.Errorf("%s: %q, want %q", tests[0].name, got, tests[0].want)
	}
	if got := LiveLine(recs[2]); got != tests[1].want {
		t.Errorf("%s: %q, want %q", tests[1].name, got, tests[1].want)
	}
	var s Summary
	for _, r := range recs {
		s.Add(r)
	}
	var b bytes.Buffer
	s.WriteTable(&b)
	out := b.String()
	for _, want := range []string{"echo", "denied_delete", "curl", "(connection passthrough)"} {
		if !strings.Contains(out, want) {
			t.Errorf("summary lacks %q:\n%s", want, out)
		}
	}
	// echo: 2 requests, average 20 ms.
	for _, l := range strings.Split(out, "\n") {
		if strings.Contains(l, " echo ") {
			f := strings.Fields(l)
			if f[3] != "2" || f[len(f)-1] != "20" {
				t.Errorf("echo row %q: want count 2, avg 20", l)
			}
		}
	}
}
