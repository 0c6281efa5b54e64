//go:build linux

package e2e

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// Level 2 surface control end to end, with real peers and the lab's rules (examples/lab.yaml,
// rule set lab-level2). The draft lets a Level 2 intermediary "modify messages (inject metadata,
// filter capability lists, enforce content policies)" and "filter or block bidirectional
// messages (sampling, elicitation) per policy configuration" (Level 2 Requirements); with a
// single backend it still "MUST NOT fabricate JSON-RPC responses": the server itself handles the
// error the appliance answers a blocked request with.

// withoutDenied is a client's JSON report with every tool named denied_* left out of its tools
// list: what a client should see through Level 2 under the lab's deny-denied-tools rule, the
// advertised surface being what policy allows. TestLevel2 compares its direct runs through it.
func withoutDenied(t *testing.T, report string) string {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal([]byte(report), &m); err != nil {
		t.Fatalf("report %q: %v", report, err)
	}
	if tools, ok := m["tools"].([]any); ok {
		kept := []any{}
		for _, x := range tools {
			if s, _ := x.(string); !strings.HasPrefix(s, "denied_") {
				kept = append(kept, x)
			}
		}
		m["tools"] = kept
	}
	b, _ := json.Marshal(m)
	return string(b)
}

// canonical re-encodes a JSON report so that two equal reports compare equal as strings.
func canonical(t *testing.T, report string) string {
	t.Helper()
	var m any
	if err := json.Unmarshal([]byte(report), &m); err != nil {
		t.Fatalf("report %q: %v", report, err)
	}
	b, _ := json.Marshal(m)
	return string(b)
}

type samplingRun struct {
	Tools  []string `json:"tools"`
	Call   nodeCall `json:"call"`
	Served struct {
		Sampling, Elicitation int
	} `json:"served"`
}

// runSamplingClient runs e2e/node/sampling-client.mjs (sampling, elicitation and roots
// capabilities) in the client namespace.
func runSamplingClient(t *testing.T, url, name, tool, args string) (samplingRun, string, time.Duration) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, "ip", "netns", "exec", nsClient, "node", "sampling-client.mjs", url, "--name", name, "--call", tool, args)
	cmd.Dir = filepath.Join(repoRoot, "e2e", "node")
	var stderr syncBuf
	cmd.Stderr = &stderr
	start := time.Now()
	out, err := cmd.Output()
	took := time.Since(start)
	if err != nil {
		t.Fatalf("sampling client %s %s: %v (after %v)\n%s", url, tool, err, took, stderr.String())
	}
	var r samplingRun
	if err := json.Unmarshal(out, &r); err != nil {
		t.Fatalf("sampling client output %q: %v", out, err)
	}
	return r, strings.TrimSpace(string(out)), took
}

// goCallError is mcpclient -tool's output when the call got a JSON-RPC error.
type goCallError struct {
	Tool  string `json:"tool"`
	Text  string `json:"text"`
	Error *struct {
		Code    int             `json:"code"`
		Message string          `json:"message"`
		Data    json.RawMessage `json:"data"`
	} `json:"error"`
}

func goCall(t *testing.T, url, tool, args string) goCallError {
	t.Helper()
	out, _, _ := run(t.Context(), nsClient, bin("mcpclient"), "-url", url, "-tool", tool, "-args", args)
	var r goCallError
	if err := json.Unmarshal([]byte(strings.TrimSpace(out)), &r); err != nil {
		t.Fatalf("mcpclient -tool %s output %q: %v", tool, out, err)
	}
	return r
}

func TestLevel2Surface(t *testing.T) {
	needLab(t)
	goServer(t)
	stateless, _ := statelessServer(t)
	everythingL2(t)
	caDir := filepath.Join(t.TempDir(), "ca")
	cfg := tlsConfig(t, caDir)

	const (
		goURL        = "http://10.200.2.2:3011/mcp"
		statelessURL = "http://10.200.2.2:3012/mcp"
		everything   = "http://10.200.2.2:3013/mcp"
		samplingTool = "trigger-sampling-request"
		samplingArgs = `{"prompt":"say hi","maxTokens":5}`
		elicitTool   = "trigger-elicitation-request"
	)

	// Direct: every tool is listed, sampling and elicitation work.
	goDirect := runT(t, 60*time.Second, nsClient, bin("mcpclient"), "-url", goURL)
	nodeDirect := runNodeArgs(t, "", goURL)
	for name, rep := range map[string]string{"go": goDirect, "node": nodeDirect} {
		if !strings.Contains(rep, `"denied_delete"`) {
			t.Fatalf("%s direct run does not list denied_delete:\n%s", name, rep)
		}
	}
	sampDirect, sampDirectOut, _ := runSamplingClient(t, everything, "lab-agent", samplingTool, samplingArgs)
	if !slices.Contains(sampDirect.Tools, samplingTool) || sampDirect.Served.Sampling != 1 || sampDirect.Call.IsError {
		t.Fatalf("direct sampling run: %s", sampDirectOut)
	}
	_, elicitDirectOut, _ := runSamplingClient(t, everything, "lab-agent", elicitTool, `{}`)

	canaryBytes := make([]byte, 8)
	rand.Read(canaryBytes)
	canary := "CANARY-" + hex.EncodeToString(canaryBytes)

	a := startAppliance(t, "nftables-tproxy", cfg)

	// 1. The advertised surface equals what policy allows this client.
	if got, want := canonical(t, runT(t, 60*time.Second, nsClient, bin("mcpclient"), "-url", goURL)), withoutDenied(t, goDirect); got != want {
		t.Errorf("go client through Level 2:\n%s\nwant (direct without denied_*)\n%s", got, want)
	}
	if got, want := canonical(t, runNodeArgs(t, "", goURL)), withoutDenied(t, nodeDirect); got != want {
		t.Errorf("node client through Level 2:\n%s\nwant (direct without denied_*)\n%s", got, want)
	}

	// 2. Server→client requests under policy. Allowed: the same as direct.
	_, got, _ := runSamplingClient(t, everything, "lab-agent", samplingTool, samplingArgs)
	if got != sampDirectOut {
		t.Errorf("allowed sampling through Level 2:\n%s\nwant (direct)\n%s", got, sampDirectOut)
	}
	if _, got, _ := runSamplingClient(t, everything, "lab-agent", elicitTool, `{}`); got != elicitDirectOut {
		t.Errorf("allowed elicitation through Level 2:\n%s\nwant (direct)\n%s", got, elicitDirectOut)
	}
	// Blocked (rule no-sampling-for-untrusted): the client never sees the request, the server
	// gets the appliance's JSON-RPC error and ends the call its own way; nothing hangs.
	blocked, blockedOut, took := runSamplingClient(t, everything, "lab-agent-untrusted", samplingTool, samplingArgs)
	if blocked.Served.Sampling != 0 {
		t.Errorf("the blocked sampling request reached the client: %s", blockedOut)
	}
	if !(blocked.Call.IsError || blocked.Call.Error != nil) || !strings.Contains(blockedOut, "mcpintercept") {
		t.Errorf("blocked sampling: the call should end with the server's handling of the appliance's error: %s", blockedOut)
	}
	t.Logf("blocked sampling, as the client saw it (%v): %s", took.Round(time.Millisecond), blockedOut)
	if took > 15*time.Second {
		t.Errorf("blocked sampling took %v: the server waited for an answer", took)
	}

	// 3. Redaction of a canary secret in a result: the Go server's echo returns its text.
	c := nodeCallTool(t, goURL, "echo", `{"text":"the key is `+canary+`"}`)
	if c.Error != nil || strings.Contains(c.Text, canary) || c.Text != "the key is [REDACTED]" {
		t.Errorf("echo of a canary through Level 2: %+v; want the marker in place of the canary", c)
	}

	// 4. Arguments checked against the listed schema. Node, one session: list, then call add with
	// a string where the schema says number.
	var vc struct {
		Tools []string `json:"tools"`
		Call  nodeCall `json:"call"`
	}
	out := runNodeArgs(t, "", goURL, "--list-call", "add", `{"a":"two","b":3}`)
	if err := json.Unmarshal([]byte(out), &vc); err != nil {
		t.Fatalf("node --list-call output %q: %v", out, err)
	}
	if vc.Call.Error == nil || vc.Call.Error.Code != -32602 || vc.Call.Error.Data.Intermediary != "mcpintercept" ||
		!strings.Contains(vc.Call.Error.Message, "arguments.a") {
		t.Errorf("node add with a string argument: %s; want -32602 naming mcpintercept and arguments.a", out)
	}
	out = runNodeArgs(t, "", goURL, "--list-call", "add", `{"a":2,"b":3}`)
	var ok struct{ Call nodeCall }
	if json.Unmarshal([]byte(out), &ok) != nil || ok.Call.Error != nil || ok.Call.Text != "5" {
		t.Errorf("node valid add: %s", out)
	}
	// Go, the stateless 2026-07-28 server (one schema memory per server): the server's call count
	// (its request log names each tools/call by the Mcp-Method header) is unchanged.
	runT(t, 60*time.Second, nsClient, bin("mcpclient"), "-url", statelessURL) // lists the tools
	calls := func() int { return strings.Count(stateless.stderr.String(), "mcp_method=tools/call") }
	before := calls()
	gc := goCall(t, statelessURL, "add", `{"a":"two","b":3}`)
	if gc.Error == nil || gc.Error.Code != -32602 || !strings.Contains(string(gc.Error.Data), `"intermediary":"mcpintercept"`) {
		t.Errorf("go add with a string argument: %+v; want -32602 naming mcpintercept", gc)
	}
	if n := calls(); n != before {
		t.Errorf("the server saw %d tools/call for invalid arguments", n-before)
	}
	if gc := goCall(t, statelessURL, "add", `{"a":2,"b":3}`); gc.Error != nil || gc.Text != "5" {
		t.Errorf("go valid add: %+v", gc)
	}
	if n := calls(); n != before+1 {
		t.Errorf("the valid add reached the server %d times, want 1", n-before)
	}

	recs := a.stopGracefully(t)
	var hidden, samplingBlocked, samplingAllowed, redacted, invalid int
	for _, r := range recs {
		switch {
		case r.MCPMethod == "tools/list" && strings.Contains(r.Reason, "hid") && strings.Contains(r.Reason, "denied_delete") &&
			strings.Contains(r.Reason, "deny-denied-tools"):
			hidden++
		case r.Direction == "server_to_client" && r.MCPMethod == "sampling/createMessage" && r.MCPName == samplingTool:
			t.Logf("log: %s %s %s decision=%s rule=%s reason=%q", r.OrigDst, r.MCPMethod, r.MCPName, r.Decision, r.Rule, r.Reason)
			if r.Decision == "deny" && r.Rule == "no-sampling-for-untrusted" && strings.Contains(r.Reason, "sampling request from the server") {
				samplingBlocked++
			} else if r.Decision == "allow" {
				samplingAllowed++
			}
		case r.Rule == "redact-canary" && strings.Contains(r.Reason, "redacted by rule redact-canary at $.result.content[0].text"):
			redacted++
		case r.Rule == "validate_arguments" && r.Decision == "deny" && r.MCPName == "add":
			invalid++
		}
	}
	if hidden < 3 || samplingBlocked != 1 || samplingAllowed != 1 || redacted != 1 || invalid != 2 {
		t.Errorf("flow log: tools/list hid denied_delete %d (want >= 3), sampling blocked %d (want 1), allowed %d (want 1), redacted %d (want 1), invalid arguments %d (want 2)\n%s",
			hidden, samplingBlocked, samplingAllowed, redacted, invalid, a.stdout)
	}
	for name, log := range map[string]string{"flow log": a.stdout.String(), "appliance log": a.stderr.String()} {
		if strings.Contains(log, canary) {
			t.Errorf("the canary appears in the %s", name)
		}
	}
}
