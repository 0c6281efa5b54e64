package admin

import (
	"crypto/sha256"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"mcpintercept/audit"
	"mcpintercept/engine"
	"mcpintercept/integrity"
	"mcpintercept/telemetry"
)

// uiServer is an admin listener on 127.0.0.1 serving the page over hub, with the admin token
// "tok".
func uiServer(t *testing.T, hub *telemetry.Hub) string {
	t.Helper()
	a, err := New("127.0.0.1:0", telemetry.NewMetrics(), func() any { return nil }, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256([]byte("tok"))
	a.Serve(Sources{
		Log: slog.New(slog.NewTextHandler(io.Discard, nil)), Hub: hub, Token: Token{Sum: sum[:], Path: "admin.token"},
		Routing: func() *engine.Routing { return nil },
		Rules: func() map[string][]UIRule {
			return map[string][]UIRule{"lab": {{Name: "deny-denied-tools", Action: "deny"}}}
		},
		Tools:      func() *integrity.Guard { return nil },
		ToolsToken: func() []byte { return sum[:] },
		Audit:      func() *audit.Store { return nil },
	})
	a.Start()
	t.Cleanup(func() { a.Shutdown(t.Context()) })
	return "http://" + a.Addr().String()
}

// TestUIPage: /ui needs the token, is served with the page's CSP, holds the map container, the
// detail pane and the calls table, fetches nothing from elsewhere (no absolute URL at all: the
// map's elements take their namespace from the page's own <svg>; no src, href, CSS url or
// import) and stays small.
func TestUIPage(t *testing.T) {
	base := uiServer(t, telemetry.NewHubWithHistory(nil, 16))
	if r, err := http.Get(base + "/ui"); err != nil || r.StatusCode != 401 {
		t.Fatalf("/ui without the token: %v %v", r, err)
	}
	req, _ := http.NewRequest("GET", base+"/ui", nil)
	req.Header.Set("Authorization", "Bearer tok")
	r, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Body.Close()
	body, _ := io.ReadAll(r.Body)
	page := string(body)
	if r.StatusCode != 200 || r.Header.Get("Content-Type") != "text/html; charset=utf-8" {
		t.Fatalf("/ui: %d %s", r.StatusCode, r.Header.Get("Content-Type"))
	}
	csp := r.Header.Get("Content-Security-Policy")
	for _, want := range []string{"default-src 'self'", "script-src 'unsafe-inline'", "frame-ancestors 'none'"} {
		if !strings.Contains(csp, want) {
			t.Errorf("CSP %q lacks %q", csp, want)
		}
	}
	if strings.Contains(csp, "http:") || strings.Contains(csp, "https:") || strings.Contains(csp, "*") {
		t.Errorf("CSP %q allows other origins", csp)
	}
	if r.Header.Get("X-Frame-Options") != "DENY" || r.Header.Get("Cache-Control") != "no-store" {
		t.Errorf("headers %v", r.Header)
	}
	for _, want := range []string{`<div id="map">`, `<svg id="graph"`, `<aside id="detail"`, `<table id="calls">`, `<th>reason</th>`,
		`dataset.tool`, `"data-node"`} {
		if !strings.Contains(page, want) {
			t.Errorf("the page lacks %s", want)
		}
	}
	if m := regexp.MustCompile(`(?i)https?:|//[a-z0-9.-]+\.[a-z]{2,}/`).FindString(page); m != "" {
		t.Errorf("the page names an external URL: %q", m)
	}
	for _, re := range []string{`(?i)\b(src|href|action)\s*=\s*["']?\s*(//|[a-z]+:)`, `(?i)url\(`, `(?i)@import`, `(?i)<script[^>]+src`, `(?i)<link\b`, `(?i)<iframe`} {
		if m := regexp.MustCompile(re).FindString(page); m != "" {
			t.Errorf("the page loads from elsewhere: %q", m)
		}
	}
	if len(page) > 48<<10 {
		t.Errorf("the page is %d bytes; keep it under 48 KiB", len(page))
	}
	if n := strings.Count(page, "<script"); n != 1 {
		t.Errorf("%d scripts, want the one inline script", n)
	}
}

// uiDemoRecords are records as the lab writes them: two clients (one with its process), two
// servers offering a tool of the same name, denials with their rule and reason, a response.
func uiDemoRecords(now time.Time) []telemetry.FlowRecord {
	var out []telemetry.FlowRecord
	at := func(i int) telemetry.Time { return telemetry.Time{Time: now.Add(time.Duration(i-60) * time.Second)} }
	type call struct {
		client, dst, sni, tool, decision, rule, reason string
		proc                                           *telemetry.Process
	}
	claude := &telemetry.Process{PID: 4242, UID: 1000, GID: 1000, Comm: "claude", Exe: "/usr/bin/claude", Cgroup: 7}
	calls := []call{
		{"10.200.1.2:34146", "10.200.2.2:3012", "", "echo", "allow", "", "", nil},
		{"10.200.1.2:34150", "10.200.2.2:3012", "", "echo", "deny", "deny-forbidden-echo", "rule deny-forbidden-echo: params.arguments.text contains \"forbidden\"", nil},
		{"10.200.1.2:34152", "10.200.2.2:3012", "", "add", "allow", "", "", nil},
		{"10.200.1.2:34154", "10.200.2.2:3012", "", "denied_alpha", "deny", "deny-denied-tools", "rule deny-denied-tools: tool name matches denied_*", nil},
		{"10.200.1.7:50000", "203.0.113.9:443", "mcp.example.com", "echo", "allow", "", "", claude},
		{"10.200.1.7:50002", "203.0.113.9:443", "mcp.example.com", "search_issues", "allow", "", "no rule matched; would_deny by no-search (shadow): search is audited", claude},
		{"10.200.1.7:50004", "203.0.113.9:443", "mcp.example.com", "create_issue", "rate_limited", "tools-call-rate", "rule tools-call-rate: 10 calls per minute per client exceeded", claude},
		{"10.200.1.2:34160", "10.200.2.2:3012", "", "add", "allow", "", "", nil},
		{"10.200.1.9:41000", "10.200.2.2:3002", "", "echo", "allow", "", "", nil},
	}
	for i, c := range calls {
		base := telemetry.FlowRecord{Time: at(i * 3), Flow: fmt.Sprintf("f%04d", i), Client: c.client, OrigDst: c.dst, Mechanism: "nftables-tproxy",
			SNI: c.sni, TLS: "plaintext", Level: 2, HTTPMethod: "POST", Path: "/mcp", Status: 200, MCPVersion: "2025-06-18", Process: c.proc}
		if c.sni != "" {
			base.TLS = "terminate"
		}
		init := base
		init.MCPMethod, init.JSONRPCID, init.Direction, init.Decision, init.DurationMS = "initialize", "0", telemetry.ClientToServer, "allow", 2
		out = append(out, init)
		req := base
		req.Time = at(i*3 + 1)
		req.MCPMethod, req.MCPName, req.JSONRPCID, req.Direction = "tools/call", c.tool, "1", telemetry.ClientToServer
		req.Decision, req.Rule, req.Reason, req.DurationMS = c.decision, c.rule, c.reason, int64(3+i*7)
		req.TraceID, req.SpanID, req.BytesUp, req.BytesDown = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7", 180, 412
		out = append(out, req)
		if c.decision == "allow" {
			resp := req
			resp.Direction, resp.Decision, resp.Rule, resp.Reason, resp.DurationMS = telemetry.ServerToClient, "allow", "", "", int64(3+i*7)
			out = append(out, resp)
		}
	}
	return out
}

// TestUIPreview renders the page in headless Chromium over uiDemoRecords when MCPI_UI_PREVIEW
// names a directory (a developer's check of the layout: ui.png, ui-map.png and ui-calls.png at
// 1400×900 go there): the map has a node per client, server and per server's tool.
func TestUIPreview(t *testing.T) {
	dir := os.Getenv("MCPI_UI_PREVIEW")
	if dir == "" {
		t.Skip("set MCPI_UI_PREVIEW=DIR to render the page in chromium")
	}
	chromium, err := exec.LookPath("chromium")
	if err != nil {
		t.Skip("no chromium")
	}
	hub := telemetry.NewHubWithHistory(nil, LiveHistory)
	for _, r := range uiDemoRecords(time.Now()) {
		hub.Record(telemetry.KindMessage, r)
	}
	base := uiServer(t, hub)
	login := base + "/ui/login?snapshot=1&token=tok"
	args := []string{"--headless", "--no-sandbox", "--disable-gpu", "--window-size=1400,900", "--virtual-time-budget=5000"}
	out, err := exec.Command(chromium, append(args, "--dump-dom", login)...).Output()
	if err != nil {
		t.Fatalf("chromium: %v", err)
	}
	dom := string(out)
	for _, n := range []string{"client|10.200.1.2", "client|10.200.1.7 claude", "server|10.200.2.2:3012", "server|mcp.example.com@203.0.113.9:443",
		"tool|10.200.2.2:3012|echo", "tool|mcp.example.com@203.0.113.9:443|echo", "tool|10.200.2.2:3002|echo"} {
		if !strings.Contains(dom, `data-node="`+n+`"`) {
			t.Errorf("the map has no node %s", n)
		}
	}
	if n := strings.Count(dom, `<g class="node `); n != 13 {
		t.Errorf("the map has %d nodes, want 13 (3 clients, 3 servers, 7 tools: echo on each server)", n)
	}
	for name, frag := range map[string]string{"ui.png": "", "ui-map.png": "#map", "ui-calls.png": "#calls"} {
		png := filepath.Join(dir, name)
		if out, err := exec.Command(chromium, append(args, "--screenshot="+png, login+frag)...).CombinedOutput(); err != nil {
			t.Errorf("screenshot %s: %v\n%s", name, err, out)
		}
	}
}
