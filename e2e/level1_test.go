//go:build linux

package e2e

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// statelessServer is a Go SDK server in stateless mode (protocol 2026-07-28: no initialize,
// Mcp-Method and Mcp-Name on every request) on 3002 (plaintext route), 3012 (Level 2 route) and
// 3003 (TLS, terminate).
func statelessServer(t *testing.T) (*proc, *proc) {
	plain := shared(t, "go-sdk-stateless", "READY", bin("mcpserver"), "-stateless", "-response", "sse",
		"-listen", "10.200.2.2:3002,[fd00:200:2::2]:3002,10.200.2.2:3012")
	tlsSrv := shared(t, "go-sdk-stateless-tls", "READY", bin("mcpserver"), "-stateless", "-response", "sse",
		"-listen", "10.200.2.2:3003", "-tls-cert", labPKI("server.pem"), "-tls-key", labPKI("server-key.pem"))
	return plain, tlsSrv
}

// level1Config is the lab configuration plus a terminate route for the stateless TLS server, a
// short header timeout (slow senders) and a tight rate limit (burst 10) so the test reaches it.
func level1Config(t *testing.T, caDir string) string {
	s := tlsConfig(t, caDir)
	s = strings.Replace(s, "routes:\n", `routes:
  - name: stateless-terminate
    match: {ports: [3003]}
    tls: terminate
    level: 1
    rule_set: lab
`, 1)
	s = strings.Replace(s, "rate_limit: {key: client.address, rate: 50, burst: 200}", "rate_limit: {key: client.address, rate: 0.01, burst: 10}", 1)
	s += "http:\n  header_timeout: 1s\n"
	return s
}

type toolResult struct {
	Tool                  string `json:"tool"`
	IsError               bool   `json:"is_error"`
	Text                  string `json:"text"`
	TransportError        string `json:"transport_error"`
	ProgressNotifications int    `json:"progress_notifications"`
}

func callTool(t *testing.T, url, ca, tool, args string) (toolResult, error) {
	t.Helper()
	a := []string{"-url", url, "-tool", tool, "-args", args}
	if ca != "" {
		a = append(a, "-ca", ca)
	}
	out, errOut, err := run(t.Context(), nsClient, bin("mcpclient"), a...)
	var r toolResult
	if jerr := json.Unmarshal([]byte(strings.TrimSpace(out)), &r); jerr != nil && err == nil {
		t.Fatalf("mcpclient output %q: %v", out, jerr)
	}
	if err != nil {
		return r, fmt.Errorf("%v: %s %s", err, out, errOut)
	}
	return r, nil
}

// TestLevel1 is the draft's Level 1 end to end: "MUST forward all messages (including
// initialization handshakes) without modification", "MAY inspect transport-layer headers for
// policy decisions (rate limiting, logging, access control)", "MUST NOT implement circuit
// breakers" (Level 1 Requirements). Real peers, through plaintext and terminate routes.
func TestLevel1(t *testing.T) {
	needLab(t)
	goServer(t)
	everythingServer(t)
	tlsServer(t)
	plainSrv, tlsSrv := statelessServer(t)
	caDir := filepath.Join(t.TempDir(), "ca")
	cfg := level1Config(t, caDir)

	type peer struct {
		name, url, ca string
		node          bool
	}
	peers := []peer{
		{"node/server-everything/plaintext", "http://10.200.2.2:3001/mcp", "", true},
		{"node/go-tls/terminate", "https://mcp.lab.test:8443/mcp", "", true},
		{"go/stateless/plaintext", "http://10.200.2.2:3002/mcp", "", false},
		{"go/stateless/terminate", "https://10.200.2.2:3003/mcp", "", false},
		{"go/stateful/plaintext-ipv6", "http://[fd00:200:2::2]:8080/mcp", "", false},
	}
	runPeer := func(p peer, ca string) string {
		if p.node {
			if ca == "" {
				ca = labPKI("server-ca.pem")
			}
			return runNode(t, ca, p.url)
		}
		args := []string{"-url", p.url}
		if strings.HasPrefix(p.url, "https") {
			if ca == "" {
				ca = labPKI("server-ca.pem")
			}
			args = append(args, "-ca", ca)
		}
		return runT(t, 60*time.Second, nsClient, bin("mcpclient"), args...)
	}
	direct := map[string]string{}
	for _, p := range peers {
		direct[p.name] = runPeer(p, "")
	}
	directProgress := runNodeArgs(t, "", "http://10.200.2.2:3001/mcp", "--progress", "5")

	a := startAppliance(t, "nftables-tproxy", cfg)
	applianceCA := exportCA(t, cfg)
	for _, p := range peers {
		if got := runPeer(p, applianceCA); got != direct[p.name] {
			t.Errorf("%s through Level 1 differs from direct:\n%s\nwant\n%s", p.name, got, direct[p.name])
		}
	}

	// Progress notifications arrive one by one (the Node SDK 1.x client loses one that shares a
	// read with the final response, so a coalescing proxy would fail this).
	got := runNodeArgs(t, "", "http://10.200.2.2:3001/mcp", "--progress", "5")
	var prog struct{ Progress int }
	json.Unmarshal([]byte(got), &prog)
	if got != directProgress || prog.Progress != 5 {
		t.Errorf("progress through Level 1: %s (direct: %s); want all 5 notifications", got, directProgress)
	}
	pr, err := callTool(t, "http://10.200.2.2:3002/mcp", "", "progress", `{"steps":4}`)
	if err != nil || pr.ProgressNotifications != 4 {
		t.Errorf("Go client progress through Level 1: %+v, %v; want 4 notifications", pr, err)
	}

	// Deny by tool name: 403 at the client, and the server never sees the request.
	for _, c := range []struct {
		url, ca string
		srv     *proc
	}{
		{"http://10.200.2.2:3002/mcp", "", plainSrv},
		{"https://10.200.2.2:3003/mcp", applianceCA, tlsSrv},
	} {
		before := strings.Count(c.srv.stderr.String(), "mcp_method=tools/call")
		r, err := callTool(t, c.url, c.ca, "denied_delete", `{"path":"/etc/passwd"}`)
		if err == nil || !strings.Contains(r.TransportError+err.Error(), "Forbidden") {
			t.Errorf("%s: denied_delete: %+v, %v; want an HTTP 403", c.url, r, err)
		}
		if after := strings.Count(c.srv.stderr.String(), "mcp_method=tools/call"); after != before {
			t.Errorf("%s: the server saw the denied tools/call", c.url)
		}
		if r, err := callTool(t, c.url, c.ca, "echo", `{"text":"allowed"}`); err != nil || r.Text != "allowed" {
			t.Errorf("%s: echo after a deny: %+v, %v", c.url, r, err)
		}
	}

	// Rate limit: burst 10 per client address for tools/call, then 429 (the flow log check
	// below proves the status; the SDK reports it as "rejected by transport").
	limited := false
	for i := 0; i < 15 && !limited; i++ {
		if _, err := callTool(t, "http://10.200.2.2:3002/mcp", "", "echo", `{"text":"x"}`); err != nil {
			limited = true
		}
	}
	if !limited {
		t.Error("the rate limit never refused a call")
	}

	// Credentials already on a request are read (presence, scheme) but never logged.
	runT(t, 60*time.Second, nsClient, bin("mcpclient"), "-url", "http://10.200.2.2:8080/mcp",
		"-header", "Authorization: Bearer CANARY-TOKEN-7f3a", "-header", "Cookie: sid=CANARY-COOKIE-91bc")

	recs := a.stopGracefully(t)
	for _, canary := range []string{"CANARY-TOKEN-7f3a", "CANARY-COOKIE-91bc"} {
		if strings.Contains(a.stdout.String(), canary) || strings.Contains(a.stderr.String(), canary) {
			t.Errorf("a credential (%s) reached the appliance's logs", canary)
		}
	}
	var sawMethod, sawTool, sawDeny, sawLimited, sawAbsent, sawTerminateTool int
	for _, r := range recs {
		if r.MCPMethod == "tools/call" {
			sawMethod++
		}
		if r.MCPName == "echo" {
			sawTool++
		}
		if r.Decision == "deny" && r.Rule == "deny-denied-tools" && r.Status == 403 && r.MCPName == "denied_delete" {
			sawDeny++
		}
		if r.Decision == "rate_limited" && r.Status == 429 {
			sawLimited++
		}
		if strings.Contains(r.Reason, "absent") {
			sawAbsent++
		}
		if r.TLS == "terminate" && strings.HasSuffix(r.OrigDst, ":3003") && r.MCPMethod == "tools/call" && r.MCPName == "echo" && r.Status == 200 {
			sawTerminateTool++
		}
	}
	if sawTerminateTool == 0 {
		t.Errorf("no terminated request on :3003 logged with its MCP method and tool:\n%s", a.stdout)
	}
	if sawMethod == 0 || sawTool == 0 || sawDeny < 2 || sawLimited == 0 || sawAbsent == 0 {
		t.Errorf("flow log: tools/call %d, echo %d, denies %d, rate limited %d, absent-field notes %d; want all > 0 (denies >= 2)", sawMethod, sawTool, sawDeny, sawLimited, sawAbsent)
	}
}

func runNodeArgs(t *testing.T, caFile string, args ...string) string {
	t.Helper()
	cmd := exec.Command("ip", append([]string{"netns", "exec", nsClient, "node", "client.mjs"}, args...)...)
	cmd.Dir = filepath.Join(repoRoot, "e2e", "node")
	cmd.Env = os.Environ()
	if caFile != "" {
		cmd.Env = append(cmd.Env, "NODE_EXTRA_CA_CERTS="+caFile)
	}
	var stderr syncBuf
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("node client %v: %v\n%s", args, err, stderr.String())
	}
	return string(out)
}

// TestLevel1SlowAndOversizedHeaders: a client that never finishes its header gets 408, one whose
// header exceeds the bound gets 431, and meanwhile other clients' requests keep succeeding.
func TestLevel1SlowAndOversizedHeaders(t *testing.T) {
	needLab(t)
	goServer(t)
	cfg := level1Config(t, filepath.Join(t.TempDir(), "ca"))
	a := startAppliance(t, "nftables-tproxy", cfg)
	// bash's /dev/tcp is a raw TCP client that sends exactly what it is told.
	slow := startT(t, nsClient, "bash", "-c",
		`exec 3<>/dev/tcp/10.200.2.2/8080; printf 'POST /mcp HTTP/1.1\r\nHost: x\r\n' >&3; head -c 12 <&3; echo`)
	big := startT(t, nsClient, "bash", "-c",
		`exec 3<>/dev/tcp/10.200.2.2/8080; { printf 'POST /mcp HTTP/1.1\r\nHost: x\r\nX-Big: '; head -c 100000 /dev/zero | tr '\0' a; printf '\r\n\r\n'; } >&3 2>/dev/null; head -c 12 <&3; echo`)
	// Ordinary clients meanwhile.
	for i := 0; i < 3; i++ {
		runT(t, 60*time.Second, nsClient, bin("mcpclient"), "-url", "http://10.200.2.2:8080/mcp")
	}
	for _, c := range []struct {
		p    *proc
		want string
	}{{slow, "HTTP/1.1 408"}, {big, "HTTP/1.1 431"}} {
		select {
		case <-c.p.done:
		case <-time.After(30 * time.Second):
			t.Fatalf("no answer for %q", c.want)
		}
		if !strings.Contains(c.p.stdout.String(), c.want) {
			t.Errorf("got %q, want %q", c.p.stdout.String(), c.want)
		}
	}
	a.stopGracefully(t)
}
