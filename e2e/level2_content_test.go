//go:build linux

package e2e

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// What a call sends on its own stream, end to end (issue 29 item 5). The lab's redact-canary
// rule (`mcp.direction == "server_to_client" && mcp.method == "tools/call"`, patterns
// CANARY-…) hides the canary of a tools/call result; the same call's log message, progress
// notification and the sampling request the server makes while answering it carry the canary
// too, on the SSE stream that answers the tools/call POST. The draft lets a Level 2 intermediary
// "enforce content policies" on messages in both directions (Level 2 Requirements); a policy
// that hides a value from a call's result and lets the call's notifications carry it enforces
// nothing.

// chattyPort is the Go SDK server of e2e/peers/chatty (2025-11-25 sessions, SSE answers).
const chattyPort = "3047"

// contentConfig is the lab configuration with the Level 2 route and the steering widened to the
// chatty server's port.
func contentConfig(t *testing.T, caDir string) string {
	t.Helper()
	s := tlsConfig(t, caDir)
	for _, r := range [][2]string{
		{`"3000-3014"`, `"3000-3014", "` + chattyPort + `"`},
		{`match: {ports: ["3011-3014"]}`, `match: {ports: ["3011-3014", "` + chattyPort + `"]}`},
	} {
		if strings.Count(s, r[0]) != 1 {
			t.Fatalf("lab.yaml changed: %q occurs %d times", r[0], strings.Count(s, r[0]))
		}
		s = strings.Replace(s, r[0], r[1], 1)
	}
	return s
}

// chattyReport is `chatty call`'s output: what the Go SDK client's handlers received.
type chattyReport struct {
	Logs     []string `json:"logs"`
	Progress []string `json:"progress"`
	Sampling []string `json:"sampling"`
	Result   string   `json:"result"`
}

// nodeChatty is `chatty call` written with the TypeScript SDK client (1.x): it sets a log level,
// asks for progress, answers sampling and prints the same report. The Node client drops a
// progress notification that arrives in the same read as the response, so it also shows that the
// stream is still written event by event.
const nodeChatty = `
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import { LoggingMessageNotificationSchema, CreateMessageRequestSchema } from "@modelcontextprotocol/sdk/types.js";
const rep = { logs: [], progress: [], sampling: [], result: "" };
const client = new Client({ name: "lab-agent", version: "1.0.0" }, { capabilities: { sampling: {} } });
client.setNotificationHandler(LoggingMessageNotificationSchema, (n) => { rep.logs.push(JSON.stringify(n.params.data)); });
client.setRequestHandler(CreateMessageRequestSchema, (r) => {
  for (const m of r.params.messages) if (m.content && m.content.type === "text") rep.sampling.push(m.content.text);
  return { role: "assistant", model: "lab", content: { type: "text", text: "ok" } };
});
await client.connect(new StreamableHTTPClientTransport(new URL(process.env.CHATTY_URL)));
await client.setLoggingLevel("debug");
const r = await client.callTool({ name: "chatty", arguments: { canary: process.env.CHATTY_CANARY } }, undefined,
  { onprogress: (p) => { rep.progress.push(p.message); }, timeout: 30000 });
rep.result = r.content.map((c) => c.text).join("");
console.log(JSON.stringify(rep));
await client.close();
`

func TestLevel2CallStreamRedacted(t *testing.T) {
	needLab(t)
	chatty := filepath.Join(t.TempDir(), "chatty")
	build := exec.Command("go", "build", "-o", chatty, "./e2e/peers/chatty")
	build.Dir = repoRoot
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build chatty: %v\n%s", err, out)
	}
	srv := startT(t, nsServer, chatty, "serve", "-listen", "10.200.2.2:"+chattyPort)
	if err := srv.waitFor("READY", 30*time.Second); err != nil {
		t.Fatal(err)
	}
	url := "http://10.200.2.2:" + chattyPort + "/mcp"
	canary := func() string {
		b := make([]byte, 8)
		rand.Read(b)
		return "CANARY-" + hex.EncodeToString(b)
	}
	callChatty := func(t *testing.T, c string) (chattyReport, string) {
		t.Helper()
		out := runT(t, 60*time.Second, nsClient, chatty, "call", "-url", url, "-canary", c)
		var r chattyReport
		if err := json.Unmarshal([]byte(out), &r); err != nil {
			t.Fatalf("chatty call output %q: %v", out, err)
		}
		return r, out
	}
	callNode := func(t *testing.T, c string) (chattyReport, string) {
		t.Helper()
		ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
		defer cancel()
		cmd := exec.CommandContext(ctx, "ip", "netns", "exec", nsClient, "env", "CHATTY_URL="+url, "CHATTY_CANARY="+c,
			"node", "--input-type=module", "-e", nodeChatty)
		cmd.Dir = filepath.Join(repoRoot, "e2e", "node")
		var stderr syncBuf
		cmd.Stderr = &stderr
		b, err := cmd.Output()
		if err != nil {
			t.Fatalf("node chatty client: %v\n%s", err, stderr.String())
		}
		out := strings.TrimSpace(string(b))
		var r chattyReport
		if err := json.Unmarshal([]byte(out), &r); err != nil {
			t.Fatalf("chatty call output %q: %v", out, err)
		}
		return r, out
	}

	clients := []struct {
		name string
		call func(*testing.T, string) (chattyReport, string)
	}{{"Go SDK", callChatty}, {"TypeScript SDK", callNode}}

	// Direct: every handler of the client gets the canary (the premise).
	for _, cl := range clients {
		direct := canary()
		r, out := cl.call(t, direct)
		if len(r.Logs) != 1 || len(r.Progress) != 1 || len(r.Sampling) != 1 || strings.Count(out, direct) != 4 {
			t.Fatalf("direct run, %s client: want the canary in the log, progress, sampling request and result:\n%s", cl.name, out)
		}
	}

	a := startAppliance(t, "nftables-tproxy", contentConfig(t, filepath.Join(t.TempDir(), "ca")))
	var secrets []string
	for _, cl := range clients {
		secret := canary()
		secrets = append(secrets, secret)
		r, out := cl.call(t, secret)
		if strings.Contains(out, secret) {
			t.Errorf("through Level 2 the canary reached the %s client on the call's stream:\n%s", cl.name, out)
		}
		// Every message still arrived, redacted (not dropped), and the call completed.
		if len(r.Logs) != 1 || len(r.Progress) != 1 || len(r.Sampling) != 1 || strings.Count(out, "[REDACTED]") != 4 ||
			!strings.HasPrefix(r.Result, "done [REDACTED] sampled ok") {
			t.Errorf("through Level 2, %s client: want the log, progress, sampling request and result each with [REDACTED]:\n%s", cl.name, out)
		}
	}

	recs := a.stopGracefully(t)
	kinds := map[string]bool{}
	for _, rec := range recs {
		if strings.Contains(rec.Reason, "redacted by rule redact-canary") {
			kinds[rec.MCPMethod] = true
		}
	}
	for _, m := range []string{"notifications/message", "notifications/progress", "sampling/createMessage", "tools/call"} {
		if !kinds[m] {
			t.Errorf("no flow-log line says redact-canary redacted a %s (have %v)", m, kinds)
		}
	}
	for name, log := range map[string]string{"flow log": a.stdout.String(), "appliance log": a.stderr.String()} {
		for _, secret := range secrets {
			if strings.Contains(log, secret) {
				t.Errorf("the canary appears in the %s", name)
			}
		}
	}
}
