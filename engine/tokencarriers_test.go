package engine

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"mcpintercept/auth"
)

// unsignedJWT is a JWS compact token with the claims given and a signature nobody checks: a
// checker without issuers reads the audience of any well-formed JWS.
func unsignedJWT(t *testing.T, claims map[string]any) string {
	t.Helper()
	p, err := json.Marshal(claims)
	if err != nil {
		t.Fatal(err)
	}
	enc := base64.RawURLEncoding.EncodeToString
	return enc([]byte(`{"alg":"HS256","typ":"JWT"}`)) + "." + enc(p) + "." + enc([]byte("not-a-signature"))
}

// TestTokenCarriers (issue 29, items 7-9): every place a server may read a token from is either
// judged or refused on a checked route, through the real checker. The Authorization scheme is
// split as the most lenient server splits it (Go SDK: strings.Fields), a scheme the appliance does
// not judge is refused, a DPoP-scheme token is judged as a bearer token is, a token in the query
// (MCP forbids it) is refused whatever case or escaping its name has, a JWT in a cookie is judged,
// and an absolute-form target whose authority is not Host's is refused (RFC 9112 §3.2.2: such a
// server uses the target's authority). A refused request never reaches the upstream.
func TestTokenCarriers(t *testing.T) {
	for _, level := range []int{1, 2} {
		t.Run(fmt.Sprintf("level %d", level), func(t *testing.T) {
			checker, err := auth.New(auth.Options{})
			if err != nil {
				t.Fatal(err)
			}
			up, read := countingUpstream(t, nil)
			h := newRoutedHarness(t, up, Limits{}, &Routing{Routes: []*Route{tokenRoute(level, checker)}})
			_, port, _ := net.SplitHostPort(up)
			right := unsignedJWT(t, map[string]any{"aud": "http://mcp.test:" + port + "/mcp", "sub": "alice"})
			wrong := unsignedJWT(t, map[string]any{"aud": "http://victim.test:" + port + "/mcp", "sub": "mallory"})
			victim := unsignedJWT(t, map[string]any{"aud": "http://victim.test/mcp", "sub": "mallory"})
			hostLine := "Host: mcp.test:" + port
			tests := []struct {
				name    string
				target  string // "" is /mcp
				host    string // "" is hostLine
				headers []string
				status  int // 0: forwarded
			}{
				{name: "bearer and a space, right audience", headers: []string{"Authorization: Bearer " + right}},
				{name: "bearer and a tab, wrong audience", headers: []string{"Authorization: Bearer\t" + wrong}, status: 401},
				{name: "bearer and a tab, right audience", headers: []string{"Authorization: Bearer\t" + right}},
				{name: "bearer, two spaces, wrong audience", headers: []string{"Authorization: bearer  " + wrong}, status: 401},
				{name: "bearer, a no-break space (U+00A0), wrong audience", headers: []string{"Authorization: Bearer\u00a0" + wrong}, status: 401},
				{name: "bearer, a Latin-1 no-break space byte, wrong audience", headers: []string{"Authorization: Bearer\xa0" + wrong}, status: 401},
				{name: "bearer, an ideographic space (U+3000), wrong audience", headers: []string{"Authorization: BEARER\u3000" + wrong}, status: 401},
				{name: "bearer with two tokens", headers: []string{"Authorization: Bearer " + right + " " + wrong}, status: 401},
				{name: "bearer without credentials", headers: []string{"Authorization: Bearer"}, status: 401},
				{name: "empty authorization", headers: []string{"Authorization:"}, status: 401},
				{name: "two authorization headers", headers: []string{"Authorization: Bearer " + right, "Authorization: Bearer " + wrong}, status: 401},
				{name: "a token without a scheme", headers: []string{"Authorization: " + wrong}, status: 401},
				{name: "basic", headers: []string{"Authorization: Basic dXNlcjpwYXNzd29yZA=="}, status: 401},
				{name: "an unknown scheme", headers: []string{"Authorization: Token " + wrong}, status: 401},
				{name: "dpop, wrong audience", headers: []string{"Authorization: DPoP " + wrong, "DPoP: x.y.z"}, status: 401},
				{name: "dpop, right audience", headers: []string{"Authorization: DPoP " + right, "DPoP: x.y.z"}},
				{name: "access_token in the query", target: "/mcp?access_token=" + wrong, status: 401},
				{name: "access_token in the query, right audience", target: "/mcp?access_token=" + right, status: 401},
				{name: "ACCESS_TOKEN in the query", target: "/mcp?a=1&ACCESS_TOKEN=" + wrong, status: 401},
				{name: "access_token escaped in the query", target: "/mcp?access%5ftoken=" + wrong, status: 401},
				{name: "access_token after a semicolon", target: "/mcp?a=1;access_token=" + wrong, status: 401},
				{name: "another query parameter", target: "/mcp?session=abc"},
				{name: "a JWT in a cookie, wrong audience", headers: []string{"Cookie: sid=1; at=" + wrong}, status: 401},
				{name: "a quoted JWT in a cookie, wrong audience", headers: []string{`Cookie: at="` + wrong + `"`}, status: 401},
				{name: "an escaped JWT in a cookie, wrong audience", headers: []string{"Cookie: at=" + strings.ReplaceAll(wrong, ".", "%2E")}, status: 401},
				{name: "a JWT in a cookie, right audience", headers: []string{"Cookie: at=" + right}},
				{name: "a session cookie", headers: []string{"Cookie: sid=0123456789abcdef; theme=dark"}},
				{name: "absolute-form target, another authority", target: "http://victim.test/mcp", host: "Host: mcp.test", headers: []string{"Authorization: Bearer " + victim}, status: 421},
				{name: "absolute-form target, another authority, a token for Host", target: "http://victim.test:" + port + "/mcp", headers: []string{"Authorization: Bearer " + right}, status: 421},
				{name: "absolute-form target, another port", target: "http://mcp.test:1/mcp", headers: []string{"Authorization: Bearer " + right}, status: 421},
				{name: "absolute-form target, another scheme", target: "https://mcp.test:" + port + "/mcp", headers: []string{"Authorization: Bearer " + right}, status: 421},
				{name: "absolute-form target, no token, another authority", target: "http://victim.test/mcp", host: "Host: mcp.test", status: 421},
				{name: "absolute-form target, same authority", target: "http://MCP.test:" + port + "/mcp", headers: []string{"Authorization: Bearer " + right}},
				// User info or a backslash in an absolute-form target: parsers disagree on which server
				// it names (WHATWG URL reads victim.test from http://victim.test\@mcp.test/mcp, a
				// last-@ reader mcp.test), and no honest client sends either (RFC 9110 §4.2.4 forbids
				// user info in an http(s) URI sent): refused like another authority.
				{name: "absolute-form target, same authority with user info", target: "http://u@mcp.test:" + port + "/mcp", headers: []string{"Authorization: Bearer " + right}, status: 421},
				{name: "absolute-form target, a backslash before the user info", target: "http://victim.test\\@mcp.test:" + port + "/mcp", headers: []string{"Authorization: Bearer " + right}, status: 421},
				{name: "absolute-form target, a backslash before the user info, Host port-less", target: "http://victim.test\\@mcp.test/mcp", host: "Host: mcp.test", headers: []string{"Authorization: Bearer " + victim}, status: 421},
				{name: "absolute-form target, a backslash in the path", target: "http://mcp.test:" + port + "/a\\b", headers: []string{"Authorization: Bearer " + right}, status: 421},
				{name: "absolute-form target, default port both ways", target: "http://mcp.test:80/mcp", host: "Host: mcp.test", headers: []string{"Authorization: Bearer " + right}},
			}
			for _, tt := range tests {
				t.Run(tt.name, func(t *testing.T) {
					target, host := tt.target, tt.host
					if target == "" {
						target = "/mcp"
					}
					if host == "" {
						host = hostLine
					}
					c := dialHTTP(t, h.addr)
					c.c.SetDeadline(time.Now().Add(10 * time.Second))
					req := "POST " + target + " HTTP/1.1\r\n" + host + "\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\n" +
						"Content-Length: " + fmt.Sprint(len(ping)) + "\r\n"
					for _, l := range tt.headers {
						req += l + "\r\n"
					}
					if _, err := io.WriteString(c.c, req+"\r\n"+ping); err != nil {
						t.Fatal(err)
					}
					resp, err := http.ReadResponse(c.br, nil)
					if err != nil {
						t.Fatal(err)
					}
					body, _ := io.ReadAll(resp.Body)
					c.c.Close()
					n := <-read
					switch {
					case tt.status == 0 && (resp.StatusCode != 200 || n == 0):
						t.Errorf("want forwarded: status %d, the upstream read %d bytes (%s)", resp.StatusCode, n, body)
					case tt.status != 0 && (resp.StatusCode != tt.status || n != 0):
						t.Errorf("want refused with %d: status %d, the upstream read %d bytes (%s)", tt.status, resp.StatusCode, n, body)
					}
					for _, tok := range []string{right, wrong, victim} {
						if strings.Contains(string(body), tok) || strings.Contains(resp.Header.Get("WWW-Authenticate"), tok) {
							t.Errorf("the refusal carries a token")
						}
					}
				})
			}
			// Each refusal is counted under its bounded kind.
			for kind, want := range map[string]float64{"scheme": 3, "carrier": 5, "authority": 9, "audience": 9, "malformed": 4} {
				if got := counterValue(t, h, "mcpintercept_token_refused_total", "route", "tokens", "kind", kind); got != want {
					t.Errorf("token_refused_total{kind=%s} = %v, want %v", kind, got, want)
				}
			}
		})
	}
}
