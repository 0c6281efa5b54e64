//go:build linux

package e2e

import (
	"bufio"
	"bytes"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// Issue 8, tried as an attacker would: every way past Level 1 that review found, against real
// servers in the lab. Each case proves the denied tool never ran by counting the TOOLRUN lines
// the Go SDK server writes when denied_delete executes.

// h2cServer is a stateless Go SDK server that also speaks h2c (Upgrade and prior knowledge): 3004
// sits on the lab's plaintext Level 1 route, 3009 on a strict route, 3010 on a route that allows
// websocket upgrades.
func h2cServer(t *testing.T) *proc {
	return shared(t, "go-sdk-h2c", "READY", bin("mcpserver"), "-stateless", "-h2c",
		"-listen", "10.200.2.2:3004,10.200.2.2:3009,10.200.2.2:3010")
}

// bypassConfig is the Level 1 lab configuration plus a strict route (3009) and a route that opts
// in to websocket upgrades (3010).
func bypassConfig(t *testing.T, caDir string) string {
	s := level1Config(t, caDir)
	s = strings.Replace(s, "rate: 0.01, burst: 10}", "rate: 1000, burst: 1000}", 1)
	return strings.Replace(s, "routes:\n", `routes:
  - name: strict-plain
    match: {ports: [3009]}
    tls: plaintext
    level: 1
    development: true
    strict_mcp_headers: true
    rule_set: lab
  - name: ws-allowed
    match: {ports: [3010]}
    tls: plaintext
    level: 1
    development: true
    allow_upgrade: [websocket]
    rule_set: lab
`, 1)
}

func toolRuns(p *proc) int { return strings.Count(p.stderr.String(), "TOOLRUN denied_delete") }

// waitToolRuns waits up to d for the count to exceed before, and returns the count.
func waitToolRuns(p *proc, before int, d time.Duration) int {
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		if n := toolRuns(p); n > before {
			return n
		}
		time.Sleep(50 * time.Millisecond)
	}
	return toolRuns(p)
}

const (
	deleteCall = `{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"denied_delete","arguments":{"path":"/repo"}}}`
	// meta2026 is what a 2026-07-28 request carries in params._meta (the Go SDK server refuses
	// one without it).
	meta2026     = `"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}}`
	deleteCall26 = `{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"denied_delete","arguments":{"path":"/repo"},` + meta2026 + `}}`
	echoCall26   = `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"echo","arguments":{"text":"hi"},` + meta2026 + `}}`
)

// h2cAttack switches the connection to HTTP/2 with `Upgrade: h2c`, then calls denied_delete on an
// HTTP/2 stream, as the review did. It returns the status of the upgrade request.
func h2cAttack(t *testing.T, addr string) int {
	t.Helper()
	c := dialInNS(t, nsClient, addr)
	defer c.Close()
	c.SetDeadline(time.Now().Add(15 * time.Second))
	fmt.Fprintf(c, "GET /mcp HTTP/1.1\r\nHost: %s\r\nConnection: Upgrade, HTTP2-Settings\r\nUpgrade: h2c\r\nHTTP2-Settings: \r\n\r\n", addr)
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		return 0 // closed without an answer: not switched either
	}
	if resp.StatusCode != http.StatusSwitchingProtocols {
		io.Copy(io.Discard, resp.Body)
		return resp.StatusCode
	}
	h2Call(t, c, br, addr, 3)
	return resp.StatusCode
}

// h2Call sends the client preface, SETTINGS, and a tools/call POST on stream id, then reads frames
// until that stream ends (or the deadline).
func h2Call(t *testing.T, c net.Conn, br *bufio.Reader, addr string, id uint32) {
	t.Helper()
	if _, err := io.WriteString(c, http2.ClientPreface); err != nil {
		return
	}
	fr := http2.NewFramer(c, br)
	fr.WriteSettings()
	var hb bytes.Buffer
	enc := hpack.NewEncoder(&hb)
	for _, f := range [][2]string{{":method", "POST"}, {":scheme", "http"}, {":authority", addr}, {":path", "/mcp"},
		{"content-type", "application/json"}, {"accept", "application/json, text/event-stream"},
		{"mcp-protocol-version", "2025-11-25"}, {"content-length", fmt.Sprint(len(deleteCall))}} {
		enc.WriteField(hpack.HeaderField{Name: f[0], Value: f[1]})
	}
	fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: hb.Bytes(), EndHeaders: true})
	fr.WriteData(id, true, []byte(deleteCall))
	for {
		f, err := fr.ReadFrame()
		if err != nil {
			return
		}
		switch f := f.(type) {
		case *http2.SettingsFrame:
			if !f.IsAck() {
				fr.WriteSettingsAck()
			}
		case *http2.DataFrame:
			if f.StreamID == id && f.StreamEnded() {
				return
			}
		case *http2.HeadersFrame:
			if f.StreamID == id && f.StreamEnded() {
				return
			}
		case *http2.GoAwayFrame:
			return
		}
	}
}

// rawRequest sends one raw HTTP/1.1 request on a fresh connection and returns the status (0 when
// the connection ended without a response).
func rawRequest(t *testing.T, addr, req string) int {
	t.Helper()
	c := dialInNS(t, nsClient, addr)
	defer c.Close()
	c.SetDeadline(time.Now().Add(15 * time.Second))
	io.WriteString(c, req)
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		return 0
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode
}

func postCall(addr, headers, body string) string {
	return fmt.Sprintf("POST /mcp HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\n%sContent-Length: %d\r\n\r\n%s",
		addr, headers, len(body), body)
}

// TestBypassProtocolSwitch: "Upgrade/CONNECT on a route with awareness ≥ 1 is refused unless the
// route allows that protocol (after a 101 nothing can be judged)" (DESIGN.md); the draft's Level 1
// "MAY inspect transport-layer headers for policy decisions" is only true while the bytes are
// HTTP/1.x. The server behind the route really speaks h2c: the attack works directly.
func TestBypassProtocolSwitch(t *testing.T) {
	needLab(t)
	srv := h2cServer(t)
	const addr = "10.200.2.2:3004"

	// Positive control, no appliance: the server switches and the tool runs.
	before := toolRuns(srv)
	if s := h2cAttack(t, addr); s != http.StatusSwitchingProtocols {
		t.Fatalf("direct h2c upgrade: status %d, want 101 (the peer must really speak h2c)", s)
	}
	if n := waitToolRuns(srv, before, 5*time.Second); n != before+1 {
		t.Fatalf("direct h2c call ran denied_delete %d times, want 1 (control)", n-before)
	}

	a := startAppliance(t, "nftables-tproxy", bypassConfig(t, filepath.Join(t.TempDir(), "ca")))
	before = toolRuns(srv)
	if s := h2cAttack(t, addr); s == http.StatusSwitchingProtocols || s < 400 || s > 499 {
		t.Errorf("h2c upgrade through Level 1: status %d, want a 4xx refusal", s)
	}
	// Prior knowledge: the HTTP/2 preface as the first bytes.
	c := dialInNS(t, nsClient, addr)
	c.SetDeadline(time.Now().Add(10 * time.Second))
	h2Call(t, c, bufio.NewReader(c), addr, 1)
	c.Close()
	// Even when the route allows websocket, h2c is not.
	if s := h2cAttack(t, "10.200.2.2:3010"); s == http.StatusSwitchingProtocols || s < 400 {
		t.Errorf("h2c upgrade on a websocket-allowing route: status %d, want a 4xx refusal", s)
	}
	// CONNECT is a protocol switch too.
	if s := rawRequest(t, addr, "CONNECT 10.200.2.2:3004 HTTP/1.1\r\nHost: 10.200.2.2:3004\r\n\r\n"); s < 400 || s > 499 {
		t.Errorf("CONNECT through Level 1: status %d, want a 4xx refusal", s)
	}
	if n := waitToolRuns(srv, before, 2*time.Second); n != before {
		t.Errorf("denied_delete ran %d times through Level 1 via a protocol switch", n-before)
	}

	// websocket: refused on the plain route, forwarded (the server answers it) where allowed.
	ws := "GET /mcp HTTP/1.1\r\nHost: %s\r\nConnection: Upgrade\r\nUpgrade: websocket\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n"
	seen := strings.Count(srv.stderr.String(), "method=GET")
	if s := rawRequest(t, addr, fmt.Sprintf(ws, addr)); s != http.StatusForbidden {
		t.Errorf("websocket upgrade on a route without allow_upgrade: %d, want 403", s)
	}
	if n := strings.Count(srv.stderr.String(), "method=GET"); n != seen {
		t.Errorf("a refused upgrade reached the server")
	}
	if s := rawRequest(t, "10.200.2.2:3010", fmt.Sprintf(ws, "10.200.2.2:3010")); s == 0 || s == http.StatusForbidden {
		t.Errorf("websocket upgrade on a route with allow_upgrade [websocket]: %d, want the server's own answer", s)
	}
	// The server logs the request after it answers: wait for its line (a bound on a hang only).
	n := strings.Count(srv.stderr.String(), "method=GET")
	for deadline := time.Now().Add(10 * time.Second); n < seen+1 && time.Now().Before(deadline); {
		time.Sleep(20 * time.Millisecond)
		n = strings.Count(srv.stderr.String(), "method=GET")
	}
	if n != seen+1 {
		t.Errorf("the allowed upgrade request did not reach the server (%d GETs, want %d)", n, seen+1)
	}

	recs := a.stopGracefully(t)
	var refusedH2C, refusedConnect bool
	for _, r := range recs {
		if r.Decision == "deny" && strings.Contains(r.Reason, "h2c") {
			refusedH2C = true
		}
		if r.Decision == "deny" && strings.Contains(strings.ToLower(r.Reason), "connect") {
			refusedConnect = true
		}
		if r.Status == http.StatusSwitchingProtocols && r.OrigDst == addr {
			t.Errorf("a protocol switch went through on %s: %+v", addr, r)
		}
	}
	if !refusedH2C || !refusedConnect {
		t.Errorf("the flow log does not name the refused switches (h2c %v, CONNECT %v):\n%+v", refusedH2C, refusedConnect, recs)
	}
}

// TestBypassHeaderTrust: Level 1's MCP fields are the client's claim. On a strict route a JSON
// POST without Mcp-Method is refused, and so is a request whose MCP-Protocol-Version predates the
// servers that validate headers against the body (2026-07-28); classification reads every Accept
// value.
func TestBypassHeaderTrust(t *testing.T) {
	needLab(t)
	srv := h2cServer(t)
	a := startAppliance(t, "nftables-tproxy", bypassConfig(t, filepath.Join(t.TempDir(), "ca")))
	const strict = "10.200.2.2:3009"
	before := toolRuns(srv)
	cases := []struct{ name, headers string }{
		{"forged Mcp-Name, old version", "Accept: application/json, text/event-stream\r\nMCP-Protocol-Version: 2025-11-25\r\nMcp-Method: tools/call\r\nMcp-Name: echo\r\n"},
		{"no Mcp-* headers, Accept */*", "Accept: */*\r\n"},
		{"no Mcp-* headers, Accept over two lines", "Accept: application/json\r\nAccept: text/event-stream\r\n"},
		{"no Mcp-* headers, Accept text/*", "Accept: application/json, text/*\r\n"},
		{"no Accept at all", ""},
	}
	for _, c := range cases {
		if s := rawRequest(t, strict, postCall(strict, c.headers, deleteCall)); s != http.StatusBadRequest {
			t.Errorf("%s on a strict route: status %d, want 400", c.name, s)
		}
	}
	// At 2026-07-28 the server itself checks the header against the body (SEP-2243: 400 with
	// -32020): the forged name passes Level 1 but is refused there, and the tool does not run.
	if s := rawRequest(t, strict, postCall(strict, "Accept: application/json, text/event-stream\r\nMCP-Protocol-Version: 2026-07-28\r\nMcp-Method: tools/call\r\nMcp-Name: echo\r\n", deleteCall26)); s != http.StatusBadRequest {
		t.Errorf("forged Mcp-Name at 2026-07-28: status %d, want the server's 400", s)
	}
	if n := waitToolRuns(srv, before, 2*time.Second); n != before {
		t.Errorf("denied_delete ran %d times past a strict route", n-before)
	}
	// The honest 2026-07-28 call to an allowed tool still works on the strict route.
	if s := rawRequest(t, strict, postCall(strict, "Accept: application/json, text/event-stream\r\nMCP-Protocol-Version: 2026-07-28\r\nMcp-Method: tools/call\r\nMcp-Name: echo\r\n", echoCall26)); s != 200 {
		t.Errorf("honest call on the strict route: %d, want 200", s)
	}
	// And the honest denied call is refused by the rule (403), naming the tool in the log.
	if s := rawRequest(t, strict, postCall(strict, "Accept: application/json, text/event-stream\r\nMCP-Protocol-Version: 2026-07-28\r\nMcp-Method: tools/call\r\nMcp-Name: denied_delete\r\n", deleteCall26)); s != 403 {
		t.Errorf("honest denied call on the strict route: %d, want 403", s)
	}
	recs := a.stopGracefully(t)
	n400 := 0
	for _, r := range recs {
		if r.OrigDst == strict && r.Status == 400 && r.Decision == "deny" {
			n400++
		}
	}
	if n400 < len(cases) {
		t.Errorf("flow log has %d strict refusals, want at least %d", n400, len(cases))
	}
}

// TestBypassReloadKeepsRules: a SIGHUP that removes the rule set an open keep-alive flow was
// judged by must not leave that flow with no rules (fail closed, never open).
func TestBypassReloadKeepsRules(t *testing.T) {
	needLab(t)
	plain, _ := statelessServer(t)
	dir := t.TempDir()
	cfgPath := filepath.Join(dir, "reload.yaml")
	base := bypassConfig(t, filepath.Join(dir, "ca"))
	os.WriteFile(cfgPath, []byte(base), 0o644)
	p, err := start(nsAppliance, bin("mcpintercept"), "run", "--config", cfgPath)
	if err != nil {
		t.Fatal(err)
	}
	a := &appliance{proc: p, mechanism: "nftables-tproxy"}
	t.Cleanup(func() {
		if !a.stopped {
			a.stopGracefully(t)
		}
	})
	if err := p.waitFor("msg=ready", 30*time.Second); err != nil {
		t.Fatal(err)
	}
	c := dialInNS(t, nsClient, "10.200.2.2:3002")
	defer c.Close()
	br := bufio.NewReader(c)
	if s := toolsCall(t, c, br, "denied_delete"); s != 403 {
		t.Fatalf("denied_delete before reload: %d, want 403", s)
	}
	// Remove every rule_set reference and the set itself.
	var kept []string
	skip := false
	for _, l := range strings.Split(base, "\n") {
		switch {
		case strings.HasPrefix(l, "rule_sets:"):
			skip = true
			continue
		case skip && (strings.HasPrefix(l, " ") || l == ""):
			continue
		case strings.Contains(l, "rule_set: lab"):
			continue
		}
		skip = false
		kept = append(kept, l)
	}
	os.WriteFile(cfgPath, []byte(strings.Join(kept, "\n")), 0o644)
	seen := strings.Count(plain.stderr.String(), "mcp_method=tools/call")
	p.cmd.Process.Signal(syscall.SIGHUP)
	if err := p.waitFor("reloaded routes and rules", 10*time.Second); err != nil {
		t.Fatal(err)
	}
	if s := toolsCall(t, c, br, "denied_delete"); s != 403 {
		t.Errorf("denied_delete after the rule set was removed, same open flow: %d, want 403 (the flow keeps its rules)", s)
	}
	if n := strings.Count(plain.stderr.String(), "mcp_method=tools/call"); n != seen {
		t.Errorf("the server saw the denied call after the reload")
	}
	c.Close()
	a.stopGracefully(t)
}

// TestBypassTLSRoutes: plaintext on a terminate + Level 1 route is closed (on_mismatch defaults to
// close at level ≥ 1); a TLS client that omits SNI or names another host does not fall to an
// opaque default when `default_route: close`; on terminate a Host that differs from the SNI gets
// 421 ("SNI/Host must equal the name", DESIGN.md).
func TestBypassTLSRoutes(t *testing.T) {
	needLab(t)
	srv := tlsServer(t)
	caDir := filepath.Join(t.TempDir(), "ca")
	cfg := strings.Replace(tlsConfig(t, caDir), "  - name: lab-terminate\n    match: {ports: [8443]}\n",
		"  - name: lab-terminate\n    match: {ports: [8443], sni: [mcp.lab.test]}\n", 1)
	cfg += "default_route: close\n"
	a := startAppliance(t, "nftables-tproxy", cfg)
	const addr = "10.200.2.2:8443"
	seen := strings.Count(srv.stderr.String(), "method=")

	// Plaintext HTTP to a terminate route (3006, matched by port): closed, never forwarded.
	if s := rawRequest(t, "10.200.2.2:3006", postCall("10.200.2.2:3006", "Accept: */*\r\n", deleteCall)); s != 0 {
		t.Errorf("plaintext request on a terminate route: status %d, want the connection closed", s)
	}
	// Plaintext to the SNI-matched route: it has no SNI, so no route matches: default_route close.
	if s := rawRequest(t, addr, postCall(addr, "Accept: */*\r\n", deleteCall)); s != 0 {
		t.Errorf("plaintext request to the SNI-matched port: status %d, want the connection closed", s)
	}
	tlsStatus := func(sni, host string) (int, error) {
		c := dialInNS(t, nsClient, addr)
		defer c.Close()
		c.SetDeadline(time.Now().Add(10 * time.Second))
		tc := tls.Client(c, &tls.Config{ServerName: sni, InsecureSkipVerify: true, NextProtos: []string{"http/1.1"}})
		if err := tc.Handshake(); err != nil {
			return 0, err
		}
		fmt.Fprintf(tc, "%s", postCall(host, "Accept: application/json, text/event-stream\r\nMcp-Method: tools/call\r\nMcp-Name: denied_delete\r\n", deleteCall))
		resp, err := http.ReadResponse(bufio.NewReader(tc), nil)
		if err != nil {
			return 0, err
		}
		resp.Body.Close()
		return resp.StatusCode, nil
	}
	// No SNI (an IP-literal ServerName sends none) and a foreign SNI: no route matches,
	// default_route close.
	for _, sni := range []string{"10.200.2.2", "other.lab.test"} {
		if s, err := tlsStatus(sni, addr); err == nil {
			t.Errorf("TLS with SNI %q that matches no route: status %d, want the flow refused", sni, s)
		}
	}
	// The right SNI with another Host: 421.
	if s, err := tlsStatus("mcp.lab.test", "other.lab.test"); err != nil || s != http.StatusMisdirectedRequest {
		t.Errorf("SNI mcp.lab.test with Host other.lab.test: %d, %v; want 421", s, err)
	}
	// The right SNI and Host: judged by the rules (403).
	if s, err := tlsStatus("mcp.lab.test", "mcp.lab.test:8443"); err != nil || s != http.StatusForbidden {
		t.Errorf("SNI and Host mcp.lab.test, denied tool: %d, %v; want 403", s, err)
	}
	if n := strings.Count(srv.stderr.String(), "method="); n != seen {
		t.Errorf("the server saw %d requests; want none", n-seen)
	}
	recs := a.stopGracefully(t)
	var mismatch, noRoute int
	for _, r := range recs {
		if r.Decision == "deny" && strings.Contains(r.Reason, "on_mismatch close") {
			mismatch++
		}
		if r.Decision == "deny" && strings.Contains(r.Reason, "default_route close") {
			noRoute++
		}
	}
	if mismatch != 1 || noRoute != 3 {
		t.Errorf("flow log: %d mismatch closes (want 1), %d default_route closes (want 3):\n%+v", mismatch, noRoute, recs)
	}
}

// TestBypassSecretsInNames: a resources/read name is a URI; its userinfo, query and fragment never
// reach the flow log or /metrics ("Secrets never appear in any log", DESIGN.md).
func TestBypassSecretsInNames(t *testing.T) {
	needLab(t)
	statelessServer(t)
	a := startAppliance(t, "nftables-tproxy", bypassConfig(t, filepath.Join(t.TempDir(), "ca")))
	const addr = "10.200.2.2:3002"
	uri := "https://alice:CANARYPASS@files.example/doc?X-Amz-Signature=CANARYSIG&access_token=CANARYTOK#CANARYFRAG"
	body := fmt.Sprintf(`{"jsonrpc":"2.0","id":3,"method":"resources/read","params":{"uri":%q}}`, uri)
	rawRequest(t, addr, postCall(addr, "Accept: application/json, text/event-stream\r\nMCP-Protocol-Version: 2026-07-28\r\nMcp-Method: resources/read\r\nMcp-Name: "+uri+"\r\n", body))
	metrics := runT(t, 10*time.Second, nsAppliance, "curl", "-s", "http://127.0.0.1:9464/metrics")
	a.stopGracefully(t)
	all := a.stdout.String() + a.stderr.String() + metrics
	for _, canary := range []string{"CANARYPASS", "CANARYSIG", "CANARYTOK", "CANARYFRAG", "alice"} {
		if strings.Contains(all, canary) {
			t.Errorf("%s appears in the flow log, logs or /metrics", canary)
		}
	}
	if !strings.Contains(a.stdout.String(), "https://files.example/doc") {
		t.Errorf("the flow log should keep the URI without its secrets:\n%s", a.stdout.String())
	}
}
