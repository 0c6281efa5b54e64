//go:build linux

package e2e

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// The shadow lab: the Go SDK server (stateless, plaintext) on 10.200.2.2:3026 behind a Level 2
// route whose rule set has a shadow deny on echo and an enforced deny on denied_*.
const shadowURL = "http://10.200.2.2:3026/mcp"

const shadowConfig = `mechanism: nftables-tproxy
listen: {port: 15001}
intercept:
  destinations: [10.200.2.0/24]
  ports: [3026]
admin: {listen: 127.0.0.1:9464}
routes:
  - name: shadow-level2
    match: {ports: [3026]}
    tls: plaintext
    level: 2
    development: true
    rule_set: dry-run
rule_sets:
  dry-run:
    - name: shadow-echo
      when: mcp.method == "tools/call" && mcp.name == "echo"
      action: deny
      mode: shadow
      reason: echo is being retired
    - name: deny-denied
      when: mcp.method == "tools/call" && mcp.name.startsWith("denied_")
      action: deny
`

// shadowCall calls tool with the Go SDK client; it returns the echoed text, or the JSON-RPC
// error's code and message.
func shadowCall(t *testing.T, tool, args string) (text string, code int64, msg string) {
	t.Helper()
	out, errOut, _ := run(t.Context(), nsClient, bin("mcpclient"), "-url", shadowURL, "-tool", tool, "-args", args)
	var r struct {
		Text  string `json:"text"`
		Error *struct {
			Code    int64  `json:"code"`
			Message string `json:"message"`
		} `json:"error"`
		TransportError string `json:"transport_error"`
	}
	if err := json.Unmarshal([]byte(strings.TrimSpace(out)), &r); err != nil {
		t.Fatalf("mcpclient output %q (%s): %v", out, errOut, err)
	}
	if r.TransportError != "" {
		t.Fatalf("mcpclient: %s", r.TransportError)
	}
	if r.Error != nil {
		return "", r.Error.Code, r.Error.Message
	}
	return r.Text, 0, ""
}

// TestShadowRules (issue 22, dry runs): a shadow deny rule on echo logs would_deny and the call
// reaches the server (its call log); an enforced deny in the same rule set still denies; the
// shadow metric counts the would-be denials; and `mcpintercept policy test` on this run's flow
// log reproduces every live decision.
func TestShadowRules(t *testing.T) {
	needLab(t)
	calls := filepath.Join(t.TempDir(), "calls.log")
	srv := startT(t, nsServer, bin("mcpserver"), "-stateless", "-listen", "10.200.2.2:3026", "-call-log", calls)
	if err := srv.waitFor("READY", 60*time.Second); err != nil {
		t.Fatal(err)
	}
	cfgPath := filepath.Join(t.TempDir(), "mcpintercept.yaml")
	if err := os.WriteFile(cfgPath, []byte(shadowConfig), 0o644); err != nil {
		t.Fatal(err)
	}
	a := startApplianceFile(t, "nftables-tproxy", cfgPath)

	texts := []string{"shadow-1", "shadow-2"}
	for _, text := range texts {
		got, code, msg := shadowCall(t, "echo", `{"text":"`+text+`"}`)
		if code != 0 || got != text {
			t.Fatalf("echo under a shadow deny: text %q, error %d %q; want it answered", got, code, msg)
		}
	}
	// The rule is named in error.data and in the record (checked below).
	if _, code, msg := shadowCall(t, "denied_delete", `{"path":"/tmp/x"}`); code == 0 || !strings.Contains(msg, "denied by mcpintercept policy") {
		t.Fatalf("denied_delete: error %d %q, want the enforced deny", code, msg)
	}
	if got := executedCalls(t, calls); strings.Join(got, ",") != strings.Join(texts, ",") {
		t.Fatalf("the server executed echo %v, want %v", got, texts)
	}
	if strings.Contains(srv.stderr.String(), "TOOLRUN denied_delete") {
		t.Fatal("the server ran denied_delete")
	}
	metrics := runT(t, 10*time.Second, nsAppliance, "curl", "-s", "http://127.0.0.1:9464/metrics")
	const series = `mcpintercept_shadow_decisions_total{rule="shadow-echo",rule_set="dry-run",would="deny"} 2`
	if !strings.Contains(metrics, series) {
		t.Errorf("metrics lack %s:\n%s", series, grepLines(metrics, "shadow"))
	}

	raw := a.stdout.String()
	recs := a.stopGracefully(t)
	var echoes, denials int
	for _, r := range recs {
		if r.MCPMethod != "tools/call" {
			continue
		}
		switch r.MCPName {
		case "echo":
			echoes++
			if r.Decision != "allow" || !strings.Contains(r.Reason, "would_deny by shadow-echo (shadow): echo is being retired") {
				t.Errorf("echo record %+v: want allowed, with would_deny in its reason", r)
			}
		case "denied_delete":
			denials++
			if r.Decision != "deny" || r.Rule != "deny-denied" || strings.Contains(r.Reason, "would_deny") {
				t.Errorf("denied_delete record %+v: want denied by deny-denied", r)
			}
		}
	}
	if echoes != len(texts) || denials != 1 {
		t.Fatalf("%d echo and %d denied_delete records, want %d and 1:\n%s", echoes, denials, len(texts), raw)
	}

	// The offline dry run over the same records agrees with every live decision.
	logPath := filepath.Join(t.TempDir(), "flows.jsonl")
	if err := os.WriteFile(logPath, []byte(raw), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, bin("mcpintercept"), "policy", "test", "--config", cfgPath, "--input", logPath, "-o", "json").Output()
	if err != nil {
		t.Fatalf("policy test: %v\n%s", err, out)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	var sum struct {
		Summary struct {
			Records, Agree, Disagree, Unknown, Skipped int
		}
	}
	if err := json.Unmarshal([]byte(lines[len(lines)-1]), &sum); err != nil {
		t.Fatalf("summary %q: %v", lines[len(lines)-1], err)
	}
	if s := sum.Summary; s.Records != len(recs) || s.Disagree != 0 || s.Unknown != 0 || s.Agree < len(texts)+1 {
		t.Fatalf("policy test summary %+v over %d records:\n%s", s, len(recs), out)
	}
	var replayedShadow, replayedDeny int
	for _, l := range lines[:len(lines)-1] {
		var r struct {
			Name     string `json:"mcp_name"`
			Verdict  string
			Replayed *struct {
				Decision, Rule string
				Shadow         []string
			}
		}
		if err := json.Unmarshal([]byte(l), &r); err != nil {
			t.Fatalf("policy test line %q: %v", l, err)
		}
		if r.Replayed == nil || r.Verdict != "agree" {
			continue
		}
		if r.Name == "echo" && r.Replayed.Decision == "allow" && strings.Join(r.Replayed.Shadow, ",") == "would_deny:shadow-echo" {
			replayedShadow++
		}
		if r.Name == "denied_delete" && r.Replayed.Decision == "deny" && r.Replayed.Rule == "deny-denied" {
			replayedDeny++
		}
	}
	if replayedShadow != len(texts) || replayedDeny != 1 {
		t.Fatalf("policy test reproduced %d shadow denials and %d denials, want %d and 1:\n%s", replayedShadow, replayedDeny, len(texts), out)
	}
}
