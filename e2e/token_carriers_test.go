//go:build linux

package e2e

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// labJWT is a JWS compact token with the claims given and a signature nobody checks: the lab's
// plaintext routes have no issuers configured, so the appliance judges any JWS's audience.
func labJWT(t *testing.T, claims map[string]any) string {
	t.Helper()
	p, err := json.Marshal(claims)
	if err != nil {
		t.Fatal(err)
	}
	enc := base64.RawURLEncoding.EncodeToString
	return enc([]byte(`{"alg":"HS256","typ":"JWT"}`)) + "." + enc(p) + "." + enc([]byte("lab-signature"))
}

// TestTokenCarriersLab (issue 29, items 7-9): a real Go SDK server (stateless 2026-07-28, which
// reads no credential at all: the confused deputy the draft's "intermediaries MUST validate token
// audiences before forwarding" protects) behind the plaintext Level 2 route. Each request carries
// a token minted for another server in a place a server may read it from: Authorization with a tab
// after "Bearer" (the Go SDK's middleware splits on it), the DPoP scheme, Basic, the query's
// access_token, a cookie, or the right token with an absolute-form target naming another
// authority than Host (Go's net/http serves that authority: RFC 9112 §3.2.2). Control first, with
// no appliance in the path: the server executes every one. Through the appliance none is
// executed (401, or 421 for the target), and the honest request still is.
func TestTokenCarriersLab(t *testing.T) {
	needLab(t)
	const addr = "10.200.2.2:3043"
	log := filepath.Join(t.TempDir(), "calls.log")
	p := startT(t, nsServer, bin("mcpserver"), "-stateless", "-response", "sse", "-listen", addr, "-call-log", log)
	if err := p.waitFor("READY", 60*time.Second); err != nil {
		t.Fatal(err)
	}
	wrong := labJWT(t, map[string]any{"aud": "http://victim.test/mcp", "sub": "mallory"})
	right := labJWT(t, map[string]any{"aud": "http://" + addr + "/mcp", "sub": "alice"})
	call := func(target, text string, headers ...string) string {
		body := strings.Replace(echoCall26, `"text":"hi"`, `"text":"`+text+`"`, 1)
		h := "Accept: application/json, text/event-stream\r\nMCP-Protocol-Version: 2026-07-28\r\nMcp-Method: tools/call\r\nMcp-Name: echo\r\n"
		for _, l := range headers {
			h += l + "\r\n"
		}
		return fmt.Sprintf("POST %s HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\n%sContent-Length: %d\r\n\r\n%s", target, addr, h, len(body), body)
	}
	attacks := []struct {
		name    string
		target  string
		headers []string
		status  int // through the appliance
	}{
		{"bearer-tab", "/mcp", []string{"Authorization: Bearer\t" + wrong}, http.StatusUnauthorized},
		{"dpop", "/mcp", []string{"Authorization: DPoP " + wrong, "DPoP: lab.proof.x"}, http.StatusUnauthorized},
		{"basic", "/mcp", []string{"Authorization: Basic " + base64.StdEncoding.EncodeToString([]byte("mallory:"+wrong))}, http.StatusUnauthorized},
		{"no-scheme", "/mcp", []string{"Authorization: " + wrong}, http.StatusUnauthorized},
		{"query", "/mcp?access_token=" + wrong, nil, http.StatusUnauthorized},
		{"query-case", "/mcp?Access_Token=" + wrong, nil, http.StatusUnauthorized},
		{"cookie", "/mcp", []string{"Cookie: sid=1; access_token=" + wrong}, http.StatusUnauthorized},
		{"absolute-form", "http://victim.test/mcp", []string{"Authorization: Bearer " + right}, http.StatusMisdirectedRequest},
	}
	// Control: no appliance in the path, every request reaches the server and its call runs.
	for _, a := range attacks {
		if s := rawRequest(t, addr, call(a.target, "control-"+a.name, a.headers...)); s != http.StatusOK {
			t.Fatalf("control %s: the server answered %d, want 200", a.name, s)
		}
	}
	if got := executedCalls(t, log); len(got) != len(attacks) {
		t.Fatalf("control: the server executed %q, want all %d", got, len(attacks))
	}

	app := startAppliance(t, "nftables-tproxy", tsConfig(t))
	for _, a := range attacks {
		if s := rawRequest(t, addr, call(a.target, "through-"+a.name, a.headers...)); s != a.status {
			t.Errorf("%s through the appliance: status %d, want %d", a.name, s, a.status)
		}
	}
	// The honest request: the right token, in Authorization, origin-form.
	if s := rawRequest(t, addr, call("/mcp", "through-honest", "Authorization: Bearer "+right)); s != http.StatusOK {
		t.Errorf("the honest request: status %d, want 200", s)
	}
	var through []string
	for _, c := range executedCalls(t, log) {
		if strings.HasPrefix(c, "through-") {
			through = append(through, c)
		}
	}
	if !slices.Equal(through, []string{"through-honest"}) {
		t.Errorf("through the appliance the server executed %q, want only through-honest", through)
	}
	app.stopGracefully(t)
	flows := app.stdout.String() + app.stderr.String()
	for _, tok := range []string{wrong, right} {
		if strings.Contains(flows, tok[strings.LastIndexByte(tok, '.')+1:]) {
			t.Errorf("a token appears in the appliance's output")
		}
	}
	if !strings.Contains(flows, `"rule":"token-audience"`) {
		t.Errorf("no token-audience denial in the flow log")
	}
}
