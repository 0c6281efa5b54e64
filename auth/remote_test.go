package auth

import (
	"context"
	"crypto/x509"
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// countingDial stands in for the bypass dialer and proves it is used.
type countingDial struct{ n atomic.Int32 }

func (d *countingDial) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	d.n.Add(1)
	return (&net.Dialer{}).DialContext(ctx, network, addr)
}

func remoteChecker(t *testing.T, o Options, srv *httptest.Server) (*Checker, *fixedClock) {
	t.Helper()
	roots := x509.NewCertPool()
	roots.AddCert(srv.Certificate())
	c, err := newChecker(o, roots)
	if err != nil {
		t.Fatal(err)
	}
	clk := &fixedClock{t: time.Now()}
	c.now = clk.now
	return c, clk
}

func TestJWKSURL(t *testing.T) {
	rk, ek, _ := testKeys(t)
	const iss = "https://idp.example"
	var mu sync.Mutex
	set := jwksJSON(t, rk)
	var fetches atomic.Int32
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fetches.Add(1)
		mu.Lock()
		defer mu.Unlock()
		w.Write(set)
	}))
	defer srv.Close()
	d := &countingDial{}
	c, clk := remoteChecker(t, Options{Issuers: []Issuer{{Issuer: iss, JWKSURL: srv.URL + "/jwks"}}, Dial: d.dial}, srv)

	rsaTok := bearer(sign(t, rk, map[string]any{"iss": iss, "aud": canon}))
	for i := 0; i < 3; i++ {
		if r, err := judge(t, c, rsaTok, canon); err != nil || !r.Verified {
			t.Fatalf("%+v %v", r, err)
		}
	}
	if fetches.Load() != 1 || d.n.Load() == 0 {
		t.Fatalf("fetches %d dials %d, want one fetch through Dial", fetches.Load(), d.n.Load())
	}

	mu.Lock()
	set = jwksJSON(t, rk, ek)
	mu.Unlock()
	ecTok := bearer(sign(t, ek, map[string]any{"iss": iss, "aud": canon}))
	r, err := judge(t, c, ecTok, canon)
	expect(t, r, err, KindSignature, "key id")
	if fetches.Load() != 1 {
		t.Fatalf("refetched within a minute: %d fetches", fetches.Load())
	}
	clk.advance(61 * time.Second)
	if r, err := judge(t, c, ecTok, canon); err != nil || !r.Verified {
		t.Fatalf("rotated key not fetched: %+v %v", r, err)
	}
	if fetches.Load() != 2 {
		t.Fatalf("%d fetches, want 2", fetches.Load())
	}
}

func TestJWKSURLUnavailable(t *testing.T) {
	rk, _, _ := testKeys(t)
	const iss = "https://idp.example"
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Write(make([]byte, maxFetchBytes+1)) // over the bound
	}))
	defer srv.Close()
	c, _ := remoteChecker(t, Options{Issuers: []Issuer{{Issuer: iss, JWKSURL: srv.URL}}}, srv)
	r, err := judge(t, c, bearer(sign(t, rk, map[string]any{"iss": iss, "aud": canon})), canon)
	expectUnavailable(t, r, err, "issuer keys unavailable")
}

func TestJWKSURLUntrustedCert(t *testing.T) {
	rk, _, _ := testKeys(t)
	const iss = "https://idp.example"
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Write(jwksJSON(t, rk))
	}))
	defer srv.Close()
	c, err := New(Options{Issuers: []Issuer{{Issuer: iss, JWKSURL: srv.URL}}}) // system roots
	if err != nil {
		t.Fatal(err)
	}
	r, err := judge(t, c, bearer(sign(t, rk, map[string]any{"iss": iss, "aud": canon})), canon)
	expectUnavailable(t, r, err, "issuer keys unavailable")
}

// introspectionServer answers RFC 7662 requests from a table of tokens.
type introspectionServer struct {
	answers map[string]map[string]any
	calls   atomic.Int32
	badAuth atomic.Int32
}

func (s *introspectionServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.calls.Add(1)
	if id, secret, ok := r.BasicAuth(); !ok || id != "mcpi" || secret != "s3cret" || r.Method != http.MethodPost {
		s.badAuth.Add(1)
		http.Error(w, "unauthorized", http.StatusUnauthorized)
		return
	}
	a, ok := s.answers[r.PostFormValue("token")]
	if !ok {
		a = map[string]any{"active": false}
	}
	json.NewEncoder(w).Encode(a)
}

func TestIntrospection(t *testing.T) {
	is := &introspectionServer{answers: map[string]map[string]any{
		"opaque-good-0123456789":  {"active": true, "aud": canon, "sub": "alice", "iss": "https://idp.example", "scope": "a b"},
		"opaque-other-0123456789": {"active": true, "aud": "https://a.example/mcp", "sub": "bob"},
		"opaque-noaud-0123456789": {"active": true, "sub": "carol"},
	}}
	srv := httptest.NewTLSServer(is)
	defer srv.Close()
	c, clk := remoteChecker(t, Options{Opaque: OpaqueIntrospect,
		Introspect: &Introspection{URL: srv.URL + "/introspect", ClientID: "mcpi", ClientSecret: "s3cret"}}, srv)

	r, err := judge(t, c, bearer("opaque-good-0123456789"), canon)
	if err != nil || !r.Verified || r.Claims.Sub != "alice" || r.Claims.Scope != "a b" {
		t.Fatalf("%+v %v", r, err)
	}
	judge(t, c, bearer("opaque-good-0123456789"), canon)
	if n := is.calls.Load(); n != 1 {
		t.Fatalf("%d introspection calls, want 1 (cached)", n)
	}
	clk.advance(61 * time.Second)
	judge(t, c, bearer("opaque-good-0123456789"), canon)
	if n := is.calls.Load(); n != 2 {
		t.Fatalf("%d introspection calls, want 2 (cache expired)", n)
	}

	r, err = judge(t, c, bearer("opaque-other-0123456789"), canon)
	expect(t, r, err, KindAudience, "token audience https://a.example/mcp ≠ https://b.example/mcp")
	r, err = judge(t, c, bearer("opaque-noaud-0123456789"), canon)
	expect(t, r, err, KindAudience, "token names no audience")
	r, err = judge(t, c, bearer("opaque-unknown-0123456789"), canon)
	expect(t, r, err, KindOpaque, "not active")
	if is.badAuth.Load() != 0 {
		t.Fatal("client credentials not sent")
	}
}

func TestIntrospectionCacheHonoursExp(t *testing.T) {
	exp := time.Now().Add(10 * time.Second).Unix()
	is := &introspectionServer{answers: map[string]map[string]any{
		"opaque-short-0123456789": {"active": true, "aud": canon, "exp": exp},
	}}
	srv := httptest.NewTLSServer(is)
	defer srv.Close()
	c, clk := remoteChecker(t, Options{Opaque: OpaqueIntrospect,
		Introspect: &Introspection{URL: srv.URL, ClientID: "mcpi", ClientSecret: "s3cret"}}, srv)
	judge(t, c, bearer("opaque-short-0123456789"), canon)
	clk.advance(11 * time.Second)
	judge(t, c, bearer("opaque-short-0123456789"), canon)
	if n := is.calls.Load(); n != 2 {
		t.Fatalf("%d introspection calls, want 2 (cached past the token's exp)", n)
	}
}

func TestIntrospectionDown(t *testing.T) {
	srv := httptest.NewTLSServer(http.NotFoundHandler())
	defer srv.Close()
	c, _ := remoteChecker(t, Options{Opaque: OpaqueIntrospect,
		Introspect: &Introspection{URL: srv.URL, ClientID: "mcpi", ClientSecret: "s3cret"}}, srv)
	r, err := judge(t, c, bearer("opaque-good-0123456789"), canon)
	expectUnavailable(t, r, err, "introspection unavailable")
}

// expectUnavailable: the check could not be made, which is not a judgement
// of the token (not ErrRefused, no kind), and the token is not passed.
func expectUnavailable(t *testing.T, r Result, err error, reason string) {
	t.Helper()
	if err == nil || errors.Is(err, ErrRefused) || r.Kind != "" || !strings.Contains(r.Reason, reason) || r.Verified {
		t.Fatalf("got %+v %v, want an unavailable check: %s", r, err, reason)
	}
}
