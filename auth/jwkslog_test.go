package auth

import (
	"bytes"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// lockedBuffer is a log destination two Checkers may write at once.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) lines() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	s := strings.TrimSpace(l.b.String())
	if s == "" {
		return nil
	}
	return strings.Split(s, "\n")
}

// An unreachable JWKS URL is logged (why, which issuer) when a request needs its keys, at most
// once per refresh interval per issuer, however many requests and Checkers (routes) ask.
func TestJWKSFailureLogged(t *testing.T) {
	rk, _, _ := testKeys(t)
	const iss = "https://idp.example"
	var down atomic.Bool
	down.Store(true)
	set := jwksJSON(t, rk)
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if down.Load() {
			http.Error(w, "down", http.StatusInternalServerError)
			return
		}
		w.Write(set)
	}))
	defer srv.Close()
	var buf lockedBuffer
	jl := NewJWKSLog(slog.New(slog.NewTextHandler(&buf, nil)))
	o := Options{Issuers: []Issuer{{Issuer: iss, JWKSURL: srv.URL + "/jwks"}}, JWKSLog: jl}
	c1, clk := remoteChecker(t, o, srv)
	c2, _ := remoteChecker(t, o, srv)
	c2.now = clk.now // two routes, one clock

	tok := bearer(sign(t, rk, map[string]any{"iss": iss, "aud": canon}))
	ask := func() {
		t.Helper()
		for _, c := range []*Checker{c1, c2} {
			for i := 0; i < 3; i++ {
				if _, err := judge(t, c, tok, canon); err == nil {
					t.Fatal("a token judged while its issuer's keys are unavailable")
				}
			}
		}
	}
	ask()
	lines := buf.lines()
	if len(lines) != 1 {
		t.Fatalf("%d log lines after 6 requests on 2 routes, want 1:\n%s", len(lines), strings.Join(lines, "\n"))
	}
	for _, want := range []string{"issuer=" + iss, "jwks=" + srv.URL + "/jwks", "status 500", "keys_held=0", "503"} {
		if !strings.Contains(lines[0], want) {
			t.Errorf("log line %q does not say %q", lines[0], want)
		}
	}
	if sig := tok[0][strings.LastIndexByte(tok[0], '.')+1:]; strings.Contains(lines[0], sig) {
		t.Error("the log line carries the token")
	}
	clk.advance(refreshInterval / 2)
	ask()
	if n := len(buf.lines()); n != 1 {
		t.Fatalf("%d log lines within the interval, want 1", n)
	}
	clk.advance(refreshInterval / 2)
	ask()
	if n := len(buf.lines()); n != 2 {
		t.Fatalf("%d log lines after the interval, want 2", n)
	}
	// Keys read, then the URL fails again: logged as a refresh failure that keeps the keys.
	down.Store(false)
	clk.advance(refreshInterval)
	if _, err := judge(t, c1, tok, canon); err != nil {
		t.Fatal(err)
	}
	down.Store(true)
	clk.advance(refreshInterval)
	if _, err := judge(t, c1, tok, canon); err != nil {
		t.Fatalf("held keys not used: %v", err)
	}
	lines = buf.lines()
	if len(lines) != 3 || !strings.Contains(lines[2], "keeping the keys read before") || !strings.Contains(lines[2], "keys_held=1") {
		t.Fatalf("want a third line about the held keys:\n%s", strings.Join(lines, "\n"))
	}
}

// A nil JWKSLog (or one without a logger) logs nothing and does not panic.
func TestJWKSLogNil(t *testing.T) {
	var l *JWKSLog
	l.failed(time.Now(), "i", "s", nil, 0)
	NewJWKSLog(nil).failed(time.Now(), "i", "s", nil, 0)
}
