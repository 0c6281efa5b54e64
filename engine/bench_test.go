package engine

import (
	"bufio"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-jose/go-jose/v4"
	"github.com/go-jose/go-jose/v4/jwt"

	"mcpintercept/audit"
	"mcpintercept/audit/auditstage"
	"mcpintercept/auth"
	"mcpintercept/auth/tokenstage"
	"mcpintercept/stage"
)

// BenchmarkRoundTrip1KiB: 1 KiB request, 1 KiB response on one connection, directly and through
// the engine (splice relay) on loopback. The ratio of the two is the relay's cost per round trip.
func BenchmarkRoundTrip1KiB(b *testing.B) {
	up := upstreamServerB(b)
	for _, mode := range []string{"direct", "engine"} {
		b.Run(mode, func(b *testing.B) {
			addr := up
			if mode == "engine" {
				h := newHarness(b, up, Limits{IdleTimeout: time.Minute})
				addr = h.addr
			}
			c, err := net.Dial("tcp", addr)
			if err != nil {
				b.Fatal(err)
			}
			defer c.Close()
			msg := make([]byte, 1024)
			buf := make([]byte, 1024)
			b.SetBytes(2048)
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				if _, err := c.Write(msg); err != nil {
					b.Fatal(err)
				}
				if _, err := io.ReadFull(c, buf); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func upstreamServerB(b *testing.B) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() { defer c.Close(); io.Copy(c, c) }()
		}
	}()
	return ln.Addr().String()
}

// BenchmarkLevel1RoundTrip: keep-alive HTTP requests (1 KiB JSON-RPC body, 1 KiB answer) through
// a plaintext Level 1 route on loopback: the path that runs through the flowconn wrappers.
func BenchmarkLevel1RoundTrip(b *testing.B) {
	benchLevel1(b, &Route{Name: "l1", TLS: Plaintext, Level: 1, Development: true}, 1)
}

// BenchmarkLevel1AuditRoundTrip is BenchmarkLevel1RoundTrip on an audited route with a real
// store in a temporary directory: every request waits for its authorization record's fdatasync
// (group-committed across the connections), its outcome is written in the background.
func BenchmarkLevel1AuditRoundTrip(b *testing.B) {
	for _, conns := range []int{1, 16} {
		b.Run(fmt.Sprintf("conns=%d", conns), func(b *testing.B) {
			s, err := audit.Open(audit.Config{Dir: b.TempDir()}, slog.New(slog.DiscardHandler))
			if err != nil {
				b.Fatal(err)
			}
			defer s.Close(context.Background())
			benchLevel1(b, &Route{Name: "l1", TLS: Plaintext, Level: 1, Development: true, Stages: stage.Options{auditstage.Name: &auditstage.Options{Store: s}}}, conns)
		})
	}
}

// BenchmarkLevel1TokenRoundTrip is BenchmarkLevel1RoundTrip with a bearer JWT (ES256) on every
// request: the route without a token check (off), with the audience check alone, and with the
// signature verified against a JWKS file. The difference to "off" is the token stage's cost.
func BenchmarkLevel1TokenRoundTrip(b *testing.B) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		b.Fatal(err)
	}
	const iss, aud = "https://idp.bench", "https://bench.example/mcp"
	signer, err := jose.NewSigner(jose.SigningKey{Algorithm: jose.ES256, Key: jose.JSONWebKey{Key: key, KeyID: "k1"}},
		(&jose.SignerOptions{}).WithType("JWT"))
	if err != nil {
		b.Fatal(err)
	}
	tok, err := jwt.Signed(signer).Claims(jwt.Claims{Issuer: iss, Subject: "alice", Audience: jwt.Audience{aud},
		Expiry: jwt.NewNumericDate(time.Now().Add(time.Hour))}).Serialize()
	if err != nil {
		b.Fatal(err)
	}
	set, _ := json.Marshal(jose.JSONWebKeySet{Keys: []jose.JSONWebKey{{Key: key.Public(), KeyID: "k1", Algorithm: "ES256", Use: "sig"}}})
	jwks := filepath.Join(b.TempDir(), "jwks.json")
	if err := os.WriteFile(jwks, set, 0o600); err != nil {
		b.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		opt  *auth.Options
	}{
		{"off", nil},
		{"audience", &auth.Options{Audiences: []string{aud}}},
		{"verified", &auth.Options{Audiences: []string{aud}, Issuers: []auth.Issuer{{Issuer: iss, JWKSFile: jwks}}}},
	} {
		b.Run(tc.name, func(b *testing.B) {
			route := &Route{Name: "l1", TLS: Plaintext, Level: 1, Development: true}
			if tc.opt != nil {
				c, err := auth.New(*tc.opt)
				if err != nil {
					b.Fatal(err)
				}
				route.Stages = stage.Options{tokenstage.Name: &tokenstage.Options{Checker: c}}
			}
			benchLevel1With(b, route, 1, "Authorization: Bearer "+tok+"\r\n")
		})
	}
}

// benchLevel1 runs b.N requests through route over conns keep-alive connections.
func benchLevel1(b *testing.B, route *Route, conns int) { benchLevel1With(b, route, conns, "") }

// benchLevel1With is benchLevel1 with extra header lines (each ending in CRLF) on every request.
func benchLevel1With(b *testing.B, route *Route, conns int, extra string) {
	body := `{"jsonrpc":"2.0","id":1,"result":{"pad":"` + strings.Repeat("x", 1000) + `"}}`
	resp := "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: " + strconv.Itoa(len(body)) + "\r\n\r\n" + body
	up := upstreamServer(b, func(c *net.TCPConn) {
		defer c.Close()
		br := bufio.NewReader(c)
		for {
			req, err := http.ReadRequest(br)
			if err != nil {
				return
			}
			io.Copy(io.Discard, req.Body)
			if _, err := io.WriteString(c, resp); err != nil {
				return
			}
		}
	})
	h := newRoutedHarness(b, up, Limits{IdleTimeout: time.Minute}, &Routing{Routes: []*Route{route}})
	reqBody := `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"echo","arguments":{"pad":"` + strings.Repeat("y", 900) + `"}}}`
	req := "POST /mcp HTTP/1.1\r\nHost: mcp.test\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\n" +
		"Mcp-Method: tools/call\r\nMcp-Name: echo\r\nMCP-Protocol-Version: 2026-07-28\r\n" + extra + "Content-Length: " + strconv.Itoa(len(reqBody)) + "\r\n\r\n" + reqBody
	b.SetBytes(int64(len(req) + len(resp)))
	var next atomic.Int64
	var wg sync.WaitGroup
	b.ResetTimer()
	for range conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, err := net.Dial("tcp", h.addr)
			if err != nil {
				b.Error(err)
				return
			}
			defer c.Close()
			br := bufio.NewReader(c)
			for next.Add(1) <= int64(b.N) {
				if _, err := io.WriteString(c, req); err != nil {
					b.Error(err)
					return
				}
				r, err := http.ReadResponse(br, nil)
				if err != nil {
					b.Error(err)
					return
				}
				io.Copy(io.Discard, r.Body)
				r.Body.Close()
				if r.StatusCode != 200 {
					b.Errorf("status %d (%s)", r.StatusCode, r.Header.Get("WWW-Authenticate"))
					return
				}
			}
		}()
	}
	wg.Wait()
}
