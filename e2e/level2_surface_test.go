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

// surfaceMoreConfig is the lab configuration with the Level 2 route and the steering widened to
// the extra servers of TestLevel2SurfaceMore (3021 stateful, 3022 stateless 2026-07-28), and
// more rules in lab-level2: elicitation blocked for untrusted agents (as sampling is), sampling
// and elicitation blocked for a client that sends X-Lab-Trust: none (a rule that does not read
// mcp.client_info), and the second round of a multi round-trip call denied to one agent (policy
// is judged again on every retry, mcp.retry).
func surfaceMoreConfig(t *testing.T, caDir string) string {
	t.Helper()
	s := tlsConfig(t, caDir)
	for _, r := range [][2]string{
		{`"3000-3014"`, `"3000-3014", "3021-3022"`},
		{`match: {ports: ["3011-3014"]}`, `match: {ports: ["3011-3014", "3021-3022"]}`},
		{"    - name: redact-canary\n", `    - name: no-elicitation-for-untrusted
      when: >-
        mcp.direction == "server_to_client" && mcp.method == "elicitation/create" &&
        mcp.client_info.name.endsWith("-untrusted")
      action: deny
      reason: untrusted agents must not question their user for a server
    - name: no-input-for-flagged-agents
      when: >-
        mcp.direction == "server_to_client" &&
        mcp.method in ["sampling/createMessage", "elicitation/create"] &&
        "x-lab-trust" in http.headers && http.headers["x-lab-trust"] == "none"
      action: deny
      reason: agents flagged by header lend neither their model nor their user
    - name: no-second-round-for-once
      when: 'mcp.method == "tools/call" && has(mcp.retry) && mcp.client_info.name == "lab-agent-once"'
      action: deny
      reason: this agent answers no input requests
    - name: redact-canary
`},
	} {
		if strings.Count(s, r[0]) != 1 {
			t.Fatalf("lab.yaml changed: %q occurs %d times", r[0], strings.Count(s, r[0]))
		}
		s = strings.Replace(s, r[0], r[1], 1)
	}
	return s
}

// askRun is mcpclient -tool ... -answer's output.
type askRun struct {
	Tool    string `json:"tool"`
	IsError bool   `json:"is_error"`
	Text    string `json:"text"`
	Error   *struct {
		Code    int    `json:"code"`
		Message string `json:"message"`
		Data    struct {
			Intermediary string `json:"intermediary"`
			Rule         string `json:"rule"`
		} `json:"data"`
	} `json:"error"`
	TransportError string `json:"transport_error"`
	Served         struct {
		Sampling    int `json:"sampling"`
		Elicitation int `json:"elicitation"`
	} `json:"served"`
}

// goAsk calls tool with the Go SDK client answering sampling and elicitation (-answer) as the
// client name; it returns the parsed output, the output canonically encoded, and how long it took.
func goAsk(t *testing.T, url, name, tool string, extra ...string) (askRun, string, time.Duration) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	start := time.Now()
	args := append([]string{"-url", url, "-name", name, "-answer", "-tool", tool, "-args", `{"prompt":"say hi"}`}, extra...)
	out, errOut, _ := run(ctx, nsClient, bin("mcpclient"), args...)
	took := time.Since(start)
	var r askRun
	if err := json.Unmarshal([]byte(strings.TrimSpace(out)), &r); err != nil {
		t.Fatalf("mcpclient -tool %s -name %s output %q: %v\n%s", tool, name, out, err, errOut)
	}
	return r, canonical(t, out), took
}

// TestLevel2SurfaceMore: the acceptance items TestLevel2Surface leaves out. (a) A list longer
// than one page (the Go SDK server with 12 extra tools, half of them denied_extra_*, and pages of
// 4) is complete and filtered for the Go and Node SDK clients following nextCursor, a page that
// policy empties included. (b) The Go SDK v1.8 server's input_required results (tools ask_model:
// sampling, ask_user: elicitation) on 2026-07-28 (stateless) and the same tools on a 2025-11-25
// session (where the SDK asks the client server→client): allowed, the same as direct with the
// requestState back untouched (the server checks its signature); blocked, the client gets an
// error naming the appliance and nothing hangs; and policy is applied again to the retry.
// (c) server-everything's elicitation blocked for an untrusted agent, as TestLevel2Surface does
// for sampling.
func TestLevel2SurfaceMore(t *testing.T) {
	needLab(t)
	everythingL2(t)
	paged := startT(t, nsServer, bin("mcpserver"), "-listen", "10.200.2.2:3021",
		"-extra-tools", "12", "-page-size", "4", "-input-required")
	stateless := startT(t, nsServer, bin("mcpserver"), "-listen", "10.200.2.2:3022", "-stateless", "-response", "sse",
		"-extra-tools", "12", "-page-size", "4", "-input-required")
	for _, p := range []*proc{paged, stateless} {
		if err := p.waitFor("READY", 30*time.Second); err != nil {
			t.Fatal(err)
		}
	}
	caDir := filepath.Join(t.TempDir(), "ca")
	cfg := surfaceMoreConfig(t, caDir)

	const (
		pagedURL     = "http://10.200.2.2:3021/mcp"
		statelessURL = "http://10.200.2.2:3022/mcp"
		everything   = "http://10.200.2.2:3013/mcp"
		elicitTool   = "trigger-elicitation-request"
	)
	mrtr := func(p *proc, pattern string) int { return strings.Count(p.stderr.String(), pattern) }

	// Direct.
	goPaged := runT(t, 60*time.Second, nsClient, bin("mcpclient"), "-url", pagedURL)
	goStateless := runT(t, 60*time.Second, nsClient, bin("mcpclient"), "-url", statelessURL)
	nodePaged := runNodeArgs(t, "", pagedURL, "--all-pages")
	for name, rep := range map[string]string{"go (2025-11-25)": goPaged, "go (2026-07-28)": goStateless, "node": nodePaged} {
		if !strings.Contains(rep, `"denied_extra_11"`) || !strings.Contains(rep, `"extra_12"`) || !strings.Contains(rep, `"whoami"`) {
			t.Fatalf("%s direct run does not list every page:\n%s", name, rep)
		}
	}
	var np struct{ Pages int }
	if json.Unmarshal([]byte(nodePaged), &np); np.Pages != 5 {
		t.Fatalf("node direct run listed %d pages, want 5 (19 tools, pages of 4):\n%s", np.Pages, nodePaged)
	}
	if n := mrtr(stateless, "mcp_method=tools/list"); n != 5 {
		t.Fatalf("the stateless server answered %d tools/list requests for one listing, want 5 (pages of 4)", n)
	}
	direct := map[string]string{}
	for _, c := range []struct{ url, tool string }{
		{statelessURL, "ask_model"}, {statelessURL, "ask_user"}, {pagedURL, "ask_model"}, {pagedURL, "ask_user"},
	} {
		r, out, _ := goAsk(t, c.url, "lab-agent", c.tool)
		if r.Error != nil || r.IsError || !strings.HasSuffix(r.Text, "(requestState intact)") || r.Served.Sampling+r.Served.Elicitation != 1 {
			t.Fatalf("direct %s on %s: %s", c.tool, c.url, out)
		}
		direct[c.url+" "+c.tool] = out
	}
	if n := mrtr(stateless, "MRTR ask_model round=2 declared=true state=ok"); n != 1 {
		t.Fatalf("the 2026-07-28 server saw %d good retries of ask_model, want 1:\n%s", n, stateless.stderr)
	}
	_, elicitDirectOut, _ := runSamplingClient(t, everything, "lab-agent", elicitTool, `{}`)

	a := startAppliance(t, "nftables-tproxy", cfg)

	// (a) Every page, filtered: what direct listed without denied_*, the page policy emptied
	// still followed (the Node client reports the same number of pages).
	t.Run("paginated list", func(t *testing.T) {
		for _, c := range []struct{ name, got, want string }{
			{"go (2025-11-25)", runT(t, 60*time.Second, nsClient, bin("mcpclient"), "-url", pagedURL), goPaged},
			{"go (2026-07-28)", runT(t, 60*time.Second, nsClient, bin("mcpclient"), "-url", statelessURL), goStateless},
			{"node", runNodeArgs(t, "", pagedURL, "--all-pages"), nodePaged},
		} {
			if got, want := canonical(t, c.got), withoutDenied(t, c.want); got != want {
				t.Errorf("%s client, paginated list through Level 2:\n%s\nwant (direct without denied_*)\n%s", c.name, got, want)
			}
		}
	})

	// (b) input_required under policy.
	t.Run("input_required", func(t *testing.T) {
		for _, c := range []struct{ url, tool string }{
			{statelessURL, "ask_model"}, {statelessURL, "ask_user"}, {pagedURL, "ask_model"}, {pagedURL, "ask_user"},
		} {
			if _, got, _ := goAsk(t, c.url, "lab-agent", c.tool); got != direct[c.url+" "+c.tool] {
				t.Errorf("allowed %s on %s through Level 2:\n%s\nwant (direct)\n%s", c.tool, c.url, got, direct[c.url+" "+c.tool])
			}
		}
		if n := mrtr(stateless, "state=bad"); n != 0 {
			t.Errorf("the 2026-07-28 server saw %d retries with an altered requestState", n)
		}
		// Blocked: by client name on the 2025-11-25 session (no-sampling-for-untrusted,
		// no-elicitation-for-untrusted), by header on 2026-07-28 (no-input-for-flagged-agents;
		// the client-name rules on 2026-07-28 are the "client_info" subtest below).
		flagged := []string{"-header", "X-Lab-Trust: none"}
		for _, c := range []struct {
			url, tool, name  string
			extra            []string
			rule, capability string
		}{
			{statelessURL, "ask_model", "lab-agent", flagged, "no-input-for-flagged-agents", "sampling"},
			{statelessURL, "ask_user", "lab-agent", flagged, "no-input-for-flagged-agents", "elicitation"},
			{pagedURL, "ask_model", "lab-agent-untrusted", nil, "no-sampling-for-untrusted", "sampling"},
			{pagedURL, "ask_user", "lab-agent-untrusted", nil, "no-elicitation-for-untrusted", "elicitation"},
		} {
			srv := stateless
			if c.url == pagedURL {
				srv = paged
			}
			before1, before2 := mrtr(srv, "MRTR "+c.tool+" round=1"), mrtr(srv, "MRTR "+c.tool+" round=2")
			withheld := mrtr(srv, "MRTR "+c.tool+" round=1 declared=false")
			r, out, took := goAsk(t, c.url, c.name, c.tool, c.extra...)
			t.Logf("blocked %s on %s, as the client saw it (%v): %s", c.tool, c.url, took.Round(time.Millisecond), out)
			if r.Served.Sampling+r.Served.Elicitation != 0 {
				t.Errorf("blocked %s on %s: the input request reached the client: %s", c.tool, c.url, out)
			}
			if mrtr(srv, "MRTR "+c.tool+" round=1") != before1+1 {
				t.Errorf("blocked %s on %s: the server did not see the call once", c.tool, c.url)
			}
			if c.url == statelessURL {
				// 2026-07-28: the capability is withheld from the request (the server sees none)
				// and the input_required result it answers anyway becomes an error naming the
				// appliance; the client never retries.
				if r.Error == nil || r.Error.Data.Intermediary != "mcpintercept" || r.Error.Data.Rule != c.rule {
					t.Errorf("blocked %s (2026-07-28): want a JSON-RPC error naming mcpintercept and rule %s: %s", c.tool, c.rule, out)
				}
				if mrtr(srv, "MRTR "+c.tool+" round=1 declared=false") != withheld+1 {
					t.Errorf("blocked %s (2026-07-28): the %s capability reached the server (not withheld):\n%s", c.tool, c.capability, srv.stderr)
				}
				if mrtr(srv, "MRTR "+c.tool+" round=2") != before2 {
					t.Errorf("blocked %s (2026-07-28): the client retried", c.tool)
				}
			} else {
				// 2025-11-25: the SDK asks the client server→client; the appliance answers the
				// server, which ends the call its own way.
				if !(r.IsError || r.Error != nil) || !strings.Contains(out, "mcpintercept") {
					t.Errorf("blocked %s (2025-11-25): want the server's error carrying the appliance's: %s", c.tool, out)
				}
			}
		}
		// Policy is applied again to the retry: lab-agent-once may start ask_user (the input
		// request is allowed and answered) but its retry is denied; the server never sees it.
		before2 := mrtr(stateless, "MRTR ask_user round=2")
		r, out, took := goAsk(t, statelessURL, "lab-agent-once", "ask_user")
		t.Logf("ask_user retry denied (%v): %s", took.Round(time.Millisecond), out)
		if r.Served.Elicitation != 1 || r.Error == nil || r.Error.Data.Intermediary != "mcpintercept" || r.Error.Data.Rule != "no-second-round-for-once" {
			t.Errorf("ask_user as lab-agent-once: want the elicitation answered, then the retry refused by no-second-round-for-once: %s", out)
		}
		if n := mrtr(stateless, "MRTR ask_user round=2"); n != before2 {
			t.Errorf("the denied retry reached the server")
		}
	})

	// The lab's client-name rules on a 2026-07-28 server: the client names itself in each
	// request's _meta (io.modelcontextprotocol/clientInfo), which a rule on the retry reads (above),
	// so the input requests of the result, and the capabilities withheld from the request, are
	// judged with the same client_info.
	t.Run("client_info on 2026-07-28", func(t *testing.T) {
		for _, c := range []struct{ tool, rule, capability string }{
			{"ask_model", "no-sampling-for-untrusted", "sampling"},
			{"ask_user", "no-elicitation-for-untrusted", "elicitation"},
		} {
			withheld := mrtr(stateless, "MRTR "+c.tool+" round=1 declared=false")
			r, out, _ := goAsk(t, statelessURL, "lab-agent-untrusted", c.tool)
			if r.Served.Sampling+r.Served.Elicitation != 0 || r.Error == nil || r.Error.Data.Intermediary != "mcpintercept" || r.Error.Data.Rule != c.rule {
				t.Errorf("%s as lab-agent-untrusted (2026-07-28): want a JSON-RPC error naming mcpintercept and rule %s, the client not asked: %s", c.tool, c.rule, out)
			}
			if mrtr(stateless, "MRTR "+c.tool+" round=1 declared=false") != withheld+1 {
				t.Errorf("%s as lab-agent-untrusted (2026-07-28): the %s capability was not withheld from the server", c.tool, c.capability)
			}
		}
	})

	// (c) server-everything's elicitation: allowed as direct, blocked for an untrusted agent.
	t.Run("elicitation", func(t *testing.T) {
		if _, got, _ := runSamplingClient(t, everything, "lab-agent", elicitTool, `{}`); got != elicitDirectOut {
			t.Errorf("allowed elicitation through Level 2:\n%s\nwant (direct)\n%s", got, elicitDirectOut)
		}
		blocked, out, took := runSamplingClient(t, everything, "lab-agent-untrusted", elicitTool, `{}`)
		t.Logf("blocked elicitation, as the client saw it (%v): %s", took.Round(time.Millisecond), out)
		if blocked.Served.Elicitation != 0 {
			t.Errorf("the blocked elicitation request reached the client: %s", out)
		}
		if !(blocked.Call.IsError || blocked.Call.Error != nil) || !strings.Contains(out, "mcpintercept") {
			t.Errorf("blocked elicitation: the call should end with the server's handling of the appliance's error: %s", out)
		}
	})

	recs := a.stopGracefully(t)
	var hidPaged, hidStateless, listPaged int
	count := map[string]int{}
	for _, r := range recs {
		port := r.OrigDst[strings.LastIndex(r.OrigDst, ":")+1:]
		switch {
		case r.MCPMethod == "tools/list" && port == "3021":
			listPaged++
			if strings.Contains(r.Reason, "hid") && strings.Contains(r.Reason, "denied_extra_") {
				hidPaged++
			}
		case r.MCPMethod == "tools/list" && port == "3022" && strings.Contains(r.Reason, "hid") && strings.Contains(r.Reason, "denied_extra_"):
			hidStateless++
		case r.Direction == "server_to_client" && (r.MCPMethod == "sampling/createMessage" || r.MCPMethod == "elicitation/create"):
			key := port + " " + r.MCPMethod + " " + r.MCPName + " " + r.Decision + " " + r.Rule
			count[key]++
			t.Logf("log: %s %s %s decision=%s rule=%s reason=%q", r.OrigDst, r.MCPMethod, r.MCPName, r.Decision, r.Rule, r.Reason)
		case r.MCPMethod == "tools/call" && r.Rule == "no-second-round-for-once":
			count["retry denied"]++
			t.Logf("log: %s %s %s decision=%s rule=%s reason=%q", r.OrigDst, r.MCPMethod, r.MCPName, r.Decision, r.Rule, r.Reason)
		}
	}
	// 3021: Go and Node, 5 pages each; each run hides on two pages at least.
	if listPaged < 10 || hidPaged < 4 || hidStateless < 2 {
		t.Errorf("flow log: tools/list on 3021 %d (want >= 10), filtered pages on 3021 %d (want >= 4), on 3022 %d (want >= 2)", listPaged, hidPaged, hidStateless)
	}
	for _, want := range []string{
		"3022 sampling/createMessage ask_model allow ", "3022 sampling/createMessage ask_model deny no-input-for-flagged-agents",
		"3022 elicitation/create ask_user deny no-input-for-flagged-agents",
		"3021 sampling/createMessage ask_model allow ", "3021 sampling/createMessage ask_model deny no-sampling-for-untrusted",
		"3021 elicitation/create ask_user deny no-elicitation-for-untrusted",
		"3013 elicitation/create " + elicitTool + " deny no-elicitation-for-untrusted",
		"retry denied",
	} {
		n := 0
		for k, v := range count {
			if strings.HasPrefix(k, want) || k == want {
				n += v
			}
		}
		if n == 0 {
			t.Errorf("flow log: no record %q; server→client records: %v", want, count)
		}
	}
}
