//go:build linux

package e2e

import (
	"testing"
)

// TestLevel2Identity is issue 29 items 1 and 3 end to end with the Go SDK v1.8 client
// (e2e/peers/mcpclient, named lab-agent-untrusted, answering sampling) against the hostile server's
// /identity scenarios, through the lab's Level 2 rules (no-sampling-for-untrusted reads
// mcp.client_info.name). The client's identity comes only from what the client itself sent:
//
//   - one/spoof: the server writes "clientInfo":{"name":"lab-agent"} into its sampling request's
//     _meta. Before: judged as going to lab-agent, the untrusted client's handler ran. After: the
//     request is judged as going to the client that initialized the session, and denied.
//   - none/plain: the server sends no Mcp-Session-Id (legal at 2025-11-25). Before: no session, no
//     client, the rule did not match and the handler ran. After: the client is known per flow (or,
//     on a connection that carried no identity, unknown: a rule error, denied).
//   - two/plain: two Mcp-Session-Id headers. After: the response is refused; the client does not
//     get a session to sample in.
//
// Each is first run directly (the control: the handler runs), then through the appliance.
func TestLevel2Identity(t *testing.T) {
	needLab(t)
	h := hostileServer(t, hostileCanary())
	cfg := hostileConfig(t, t.TempDir())
	base := "http://" + hostileAddr + "/identity/"
	cases := []string{"one/spoof", "none/plain", "two/plain"}
	for _, c := range cases {
		if o := hostileSampling(t, base+c); o.sampled() != 1 {
			t.Fatalf("control %s: the untrusted Go SDK client's sampling handler did not run directly:\n%s", c, o.raw)
		}
	}

	a := hostileThrough(t, cfg)
	for _, c := range cases {
		o := hostileSampling(t, base+c)
		if o.sampled() != 0 {
			t.Errorf("%s: through Level 2 the untrusted client's sampling handler ran %d times:\n%s", c, o.sampled(), o.raw)
		}
		if c == "two/plain" && o.Tool != "" {
			t.Errorf("%s: the client got a session through two Mcp-Session-Id headers:\n%s", c, o.raw)
		}
	}
	// The trusted client is served as directly: identity is not withheld, it is the client's own.
	if o := hostileClient(t, "-url", base+"one/spoof", "-name", "lab-agent", "-answer", "-tool", "echo", "-args", `{"text":"x"}`); o.sampled() != 1 {
		t.Errorf("through Level 2 the trusted client's sampling handler did not run:\n%s", o.raw)
	}
	recs := a.stopGracefully(t)
	denied := 0
	for _, rec := range recs {
		if hostilePort(rec) == "3031" && rec.MCPMethod == "sampling/createMessage" && rec.Decision == "deny" {
			denied++
			if rec.Rule != "no-sampling-for-untrusted" {
				t.Errorf("a sampling request denied by %q (%s), want no-sampling-for-untrusted", rec.Rule, rec.Reason)
			}
		}
	}
	// one/spoof and none/plain (two/plain never gets to call).
	if denied < 2 {
		t.Errorf("flow log: %d deny records for sampling/createMessage on 3031, want 2\n%s", denied, h.stderr)
	}
}
