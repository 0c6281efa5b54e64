package engine

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"crypto/sha256"
	"encoding/hex"
	"mcpintercept/auth"
	"mcpintercept/auth/tokenstage"
	"mcpintercept/stage"
	"mcpintercept/telemetry"
)

// fakeChecker accepts the token "good" for one canonical URI and refuses anything else as an
// audience mismatch; it remembers the canonical URIs it was asked about.
type fakeChecker struct {
	mu    sync.Mutex
	asked []string
}

func (f *fakeChecker) CheckRequest(_ context.Context, cr auth.Credentials, canonical string) (auth.Result, error) {
	f.mu.Lock()
	f.asked = append(f.asked, canonical)
	f.mu.Unlock()
	if len(cr.Authorization) == 1 && cr.Authorization[0] == "Bearer good" && strings.HasPrefix(canonical, "http://mcp.test:") && strings.HasSuffix(canonical, "/mcp") {
		return auth.Result{Present: true, Scheme: "bearer", Claims: auth.Claims{Sub: "alice"}}, nil
	}
	return auth.Result{Present: true, Scheme: "bearer", Kind: auth.KindAudience,
			Reason: "token audience https://other.example/mcp ≠ " + canonical},
		fmt.Errorf("%w: audience", auth.ErrRefused)
}

const ping = `{"jsonrpc":"2.0","id":1,"method":"ping"}`

func tokenRoute(level int, c tokenstage.Checker) *Route {
	return &Route{Name: "tokens", TLS: Plaintext, Level: level, Development: true,
		Stages: stage.Options{tokenstage.Name: &tokenstage.Options{Checker: c}}}
}

// TestTokenRefusedBeforeUpstream: the draft's "intermediaries MUST validate token audiences before
// forwarding" (Security Considerations, Confused Deputy). A token for another audience gets 401
// with the RFC 6750 challenge and the upstream reads no byte; a right token and a request without
// one go through.
func TestTokenRefusedBeforeUpstream(t *testing.T) {
	for _, level := range []int{1, 2} {
		t.Run(fmt.Sprintf("level %d", level), func(t *testing.T) {
			fc := &fakeChecker{}
			up, read := countingUpstream(t, nil)
			h := newRoutedHarness(t, up, Limits{}, &Routing{Routes: []*Route{tokenRoute(level, fc)}})
			c := dialHTTP(t, h.addr)
			c.c.SetDeadline(time.Now().Add(10 * time.Second))
			io.WriteString(c.c, "POST /mcp/?x=1 HTTP/1.1\r\nHost: MCP.test:8080\r\nAuthorization: Bearer wrong\r\nContent-Length: 2\r\n\r\n{}")
			resp, err := http.ReadResponse(c.br, nil)
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			www := resp.Header.Get("WWW-Authenticate")
			if resp.StatusCode != 401 || !strings.HasPrefix(www, `Bearer error="invalid_token", error_description="token audience https://other.example/mcp`) {
				t.Errorf("status %d, WWW-Authenticate %q", resp.StatusCode, www)
			}
			if level == 2 {
				var msg struct {
					ID    json.RawMessage `json:"id"`
					Error struct {
						Code int `json:"code"`
						Data struct{ Intermediary, Rule string }
					} `json:"error"`
				}
				if err := json.Unmarshal(body, &msg); err != nil || msg.Error.Code != -31005 || msg.Error.Data.Intermediary != "mcpintercept" || msg.Error.Data.Rule != "token-audience" {
					t.Errorf("body %s (%v)", body, err)
				}
			} else if len(body) != 0 {
				t.Errorf("Level 1 wrote a body: %s", body)
			}
			rec := h.sink.next(t)
			if rec.Decision != "deny" || rec.Rule != "token-audience" || rec.Status != 401 || !strings.Contains(rec.Reason, "token audience") {
				t.Errorf("flow record %+v", rec)
			}
			if strings.Contains(fmt.Sprintf("%+v", rec), "wrong") {
				t.Errorf("the record carries the token: %+v", rec)
			}
			if got := counterValue(t, h, "mcpintercept_token_refused_total", "route", "tokens", "kind", "audience"); got != 1 {
				t.Errorf("token_refused_total{route=tokens,kind=audience} = %v, want 1", got)
			}
			// Host is lower-cased, the port is the original destination's (not the default, so
			// written), the trailing slash and the query dropped.
			_, port, _ := net.SplitHostPort(up)
			if fc.asked[0] != "http://mcp.test:"+port+"/mcp" {
				t.Errorf("canonical URI %q", fc.asked[0])
			}
			c.c.Close()
			if n := <-read; n != 0 {
				t.Errorf("the upstream read %d bytes of a refused request", n)
			}

			for _, extra := range [][]string{{"Authorization: Bearer good"}, nil} {
				c := dialHTTP(t, h.addr)
				hdrs := append([]string{"Content-Length: " + fmt.Sprint(len(ping)), "Content-Type: application/json", "Accept: application/json, text/event-stream"}, extra...)
				if s := c.doBody("POST /mcp HTTP/1.1\r\nHost: mcp.test:8080\r\n", ping, hdrs...); s == 401 {
					t.Errorf("headers %q refused", extra)
				}
				c.c.Close()
				if n := <-read; n == 0 {
					t.Errorf("headers %q: nothing reached the upstream", extra)
				}
			}
		})
	}
}

// TestTokenCallerInRecords: an accepted token's sub (and iss) name the caller in the request's
// record, as tokens.record_identity says: plain, hashed (of iss and sub together) or left out.
func TestTokenCallerInRecords(t *testing.T) {
	for _, level := range []int{1, 2} {
		for _, mode := range []string{"", tokenstage.IdentityHash, tokenstage.IdentityOff} {
			t.Run(fmt.Sprintf("level %d %q", level, mode), func(t *testing.T) {
				up, read := countingUpstream(t, nil)
				route := tokenRoute(level, &fakeChecker{})
				route.Stages[tokenstage.Name].(*tokenstage.Options).CallerIdentity = mode
				h := newRoutedHarness(t, up, Limits{}, &Routing{Routes: []*Route{route}})
				c := dialHTTP(t, h.addr)
				c.doBody("POST /mcp HTTP/1.1\r\nHost: mcp.test:8080\r\n", ping, "Content-Length: "+fmt.Sprint(len(ping)),
					"Content-Type: application/json", "Accept: application/json, text/event-stream", "Authorization: Bearer good")
				c.c.Close()
				<-read
				var rec telemetry.FlowRecord
				for {
					rec = h.sink.next(t)
					if rec.Path == "/mcp" && (level == 1 || rec.Direction == "client_to_server") {
						break
					}
				}
				want := map[string]string{"": "alice", tokenstage.IdentityHash: sha256Hex16("\x00alice"), tokenstage.IdentityOff: ""}[mode]
				if rec.Sub != want || rec.Iss != "" {
					t.Errorf("record names iss %q sub %q, want sub %q", rec.Iss, rec.Sub, want)
				}
				if mode == tokenstage.IdentityHash && !strings.HasPrefix(rec.Sub, "sha256:") || strings.Contains(fmt.Sprintf("%+v", rec), "good") {
					t.Errorf("record %+v", rec)
				}
			})
		}
	}
}

// sha256Hex16 is "sha256:" and the first 128 bits of s's SHA-256 in hex: tokens.record_identity:
// hash of a subject.
func sha256Hex16(s string) string {
	sum := sha256.Sum256([]byte(s))
	return "sha256:" + hex.EncodeToString(sum[:16])
}
