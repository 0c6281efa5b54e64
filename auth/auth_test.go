package auth

import (
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	jose "github.com/go-jose/go-jose/v4"
)

const canon = "https://b.example/mcp"

func TestCanonicalURI(t *testing.T) {
	cases := []struct {
		scheme, host string
		port         int
		path, want   string
	}{
		{"https", "b.example", 443, "/mcp", "https://b.example/mcp"},
		{"HTTPS", "B.Example", 443, "/mcp/", "https://b.example/mcp"},
		{"http", "b.example", 80, "/mcp", "http://b.example/mcp"},
		{"http", "b.example", 443, "/mcp", "http://b.example:443/mcp"},
		{"https", "b.example", 8443, "/mcp", "https://b.example:8443/mcp"},
		{"https", "b.example:8443", 0, "/mcp", "https://b.example:8443/mcp"},
		{"https", "b.example", 443, "/", "https://b.example"},
		{"https", "b.example", 443, "", "https://b.example"},
		{"https", "b.example", 443, "/mcp?x=1#f", "https://b.example/mcp"},
		{"https", "b.example.", 443, "/Server/MCP", "https://b.example/Server/MCP"},
		{"https", "::1", 443, "/mcp", "https://[::1]/mcp"},
		{"https", "[::1]", 8443, "/mcp", "https://[::1]:8443/mcp"},
		{"https", "[FE80::1]:443", 0, "/mcp", "https://[fe80::1]/mcp"},
		{"http", "10.0.0.1", 3000, "/mcp", "http://10.0.0.1:3000/mcp"},
	}
	for _, tc := range cases {
		if got := CanonicalURI(tc.scheme, tc.host, tc.port, tc.path); got != tc.want {
			t.Errorf("CanonicalURI(%q, %q, %d, %q) = %q, want %q", tc.scheme, tc.host, tc.port, tc.path, got, tc.want)
		}
	}
}

func TestCanonicalizeClaim(t *testing.T) {
	cases := map[string]string{
		"https://B.example:443/mcp/": "https://b.example/mcp",
		"HTTP://b.example:80":        "http://b.example",
		"https://[::1]:443/mcp":      "https://[::1]/mcp",
		"https://b.example/mcp?x=1":  "https://b.example/mcp?x=1", // a query is never normalized away
		"https://u@b.example/mcp":    "https://u@b.example/mcp",
		"my-api":                     "my-api",
		"urn:example:api":            "urn:example:api",
	}
	for in, want := range cases {
		if got := canonicalize(in); got != want {
			t.Errorf("canonicalize(%q) = %q, want %q", in, got, want)
		}
	}
}

// newTestChecker builds a Checker on a clock the test controls.
func newTestChecker(t *testing.T, o Options) (*Checker, *fixedClock) {
	t.Helper()
	c, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	clk := &fixedClock{t: time.Now()}
	c.now = clk.now
	return c, clk
}

func TestUnverified(t *testing.T) {
	rk, ek, dk := testKeys(t)
	c, _ := newTestChecker(t, Options{Audiences: []string{"https://alias.example/mcp/", "my-api"}})
	past := time.Now().Add(-time.Hour).Unix()
	cases := []struct {
		name   string
		header []string
		kind   string // "" passes
		reason string // substring of the refusal reason
	}{
		{"no header", nil, "", ""},
		{"aud string", bearer(sign(t, rk, claims("https://b.example/mcp"))), "", ""},
		{"aud canonical forms", bearer(sign(t, ek, claims("https://B.EXAMPLE:443/mcp/"))), "", ""},
		{"aud list", bearer(sign(t, dk, claims([]string{"https://x.example", "https://b.example/mcp"}))), "", ""},
		{"resource claim", bearer(sign(t, rk, map[string]any{"resource": "https://b.example/mcp"})), "", ""},
		{"configured audience", bearer(sign(t, rk, claims("https://alias.example/mcp"))), "", ""},
		{"configured non-URI audience", bearer(sign(t, rk, claims("my-api"))), "", ""},
		{"expired but unverified", bearer(sign(t, rk, map[string]any{"aud": canon, "exp": past})), "", ""},
		{"HS256 read for its audience", bearer(hs256(t, []byte("shared-secret-of-the-backend-0123456789"), claims(canon))), "", ""},
		{"scheme case", []string{"bEaReR " + sign(t, rk, claims(canon))}, "", ""},
		{"basic refused", []string{"Basic dXNlcjpwYXNzd29yZA=="}, KindScheme, "authorization scheme basic is not checked"},
		{"bare token refused", []string{sign(t, rk, claims("https://a.example/mcp"))}, KindScheme, "authorization scheme other"},
		{"dpop judged", []string{"DPoP " + sign(t, rk, claims("https://a.example/mcp"))}, KindAudience, "≠"},
		{"dpop passes", []string{"dpop " + sign(t, rk, claims(canon))}, "", ""},
		{"bearer and a tab", []string{"Bearer\t" + sign(t, rk, claims("https://a.example/mcp"))}, KindAudience, "≠"},
		{"other audience", bearer(sign(t, rk, claims("https://a.example/mcp"))), KindAudience,
			"token audience https://a.example/mcp ≠ https://b.example/mcp"},
		{"query is not normalized away", bearer(sign(t, rk, claims("https://b.example/mcp?x=1"))), KindAudience, "≠"},
		{"no audience", bearer(sign(t, rk, map[string]any{"sub": "alice"})), KindAudience, "token names no audience"},
		{"empty audience list", bearer(sign(t, rk, claims([]string{}))), KindAudience, "token names no audience"},
		{"alg none", bearer(rawToken(`{"alg":"none"}`, `{"aud":"https://b.example/mcp"}`)), KindMalformed, "JWS"},
		{"duplicate aud", bearer(rawToken(`{"alg":"RS256"}`, `{"aud":"https://b.example/mcp","aud":"https://a.example/mcp"}`)), KindMalformed, "claims"},
		{"case-folded aud", bearer(rawToken(`{"alg":"RS256"}`, `{"aud":"https://b.example/mcp","AUD":"https://a.example/mcp"}`)), KindMalformed, "claims"},
		{"aud number", bearer(rawToken(`{"alg":"RS256"}`, `{"aud":7}`)), KindMalformed, "claims"},
		{"payload not an object", bearer(rawToken(`{"alg":"RS256"}`, `["https://b.example/mcp"]`)), KindMalformed, "claims"},
		{"two headers", []string{"Bearer " + sign(t, rk, claims(canon)), "Bearer " + sign(t, ek, claims(canon))}, KindMalformed, "2 authorization headers"},
		{"bearer without token", []string{"Bearer"}, KindMalformed, "b64token"},
		{"bearer with spaces", []string{"Bearer abc def"}, KindMalformed, "b64token"},
		{"empty header", []string{""}, KindMalformed, "empty"},
		{"garbage JWS", bearer("a.b.c"), KindMalformed, "JWS"},
		{"oversized", []string{"Bearer " + strings.Repeat("A", 9000)}, KindOversized, "authorization header over 8192 bytes"},
		{"opaque allowed", bearer("opaque-token-0123456789"), "", ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r, err := judge(t, c, tc.header, canon)
			expect(t, r, err, tc.kind, tc.reason)
			if r.Verified {
				t.Error("verified without issuers")
			}
			if r.Present != (len(tc.header) > 0) {
				t.Errorf("Present = %v", r.Present)
			}
		})
	}
}

func TestResultFields(t *testing.T) {
	rk, _, _ := testKeys(t)
	c, _ := newTestChecker(t, Options{})
	tok := sign(t, rk, map[string]any{"aud": canon, "iss": "https://idp.example", "sub": "alice",
		"azp": "app", "client_id": "cli", "scope": "tools:read", "exp": 2000000000, "nbf": 1000, "iat": 999})
	r, err := judge(t, c, bearer(tok), canon)
	if err != nil {
		t.Fatal(err)
	}
	want := Claims{Iss: "https://idp.example", Sub: "alice", Azp: "app", ClientID: "cli", Scope: "tools:read",
		Aud: []string{canon}, Exp: 2000000000, Nbf: 1000, Iat: 999}
	if r.Scheme != "bearer" || !r.Present || r.Verified || !equalClaims(r.Claims, want) {
		t.Fatalf("got %+v, want claims %+v", r, want)
	}
	r, _ = judge(t, c, []string{"Basic dXNlcjpwYXNzd29yZA=="}, canon)
	if r.Scheme != "basic" {
		t.Errorf("scheme %q, want basic", r.Scheme)
	}
	r, _ = judge(t, c, []string{tok}, canon)
	if r.Scheme != "other" {
		t.Errorf("a bare token reported as scheme %q, want other", r.Scheme)
	}
}

func TestVerified(t *testing.T) {
	rk, ek, dk := testKeys(t)
	stranger := testKey{jose.ES256, "ec-1", mustEC(t)} // same kid, other key
	const iss = "https://idp.example"
	c, _ := newTestChecker(t, Options{
		Issuers:   []Issuer{{Issuer: iss, JWKSFile: jwksFile(t, rk, ek, dk), Audiences: []string{"https://issuer-alias.example"}}},
		ClockSkew: 30 * time.Second,
	})
	now := time.Now().Unix()
	good := func(k testKey, extra map[string]any) []string {
		cl := map[string]any{"iss": iss, "aud": canon, "sub": "alice", "exp": now + 300}
		for k, v := range extra {
			cl[k] = v
		}
		return bearer(sign(t, k, cl))
	}
	cases := []struct {
		name   string
		header []string
		kind   string
		reason string
	}{
		{"RS256", good(rk, nil), "", ""},
		{"ES256", good(ek, nil), "", ""},
		{"EdDSA", good(dk, nil), "", ""},
		{"issuer audience", good(rk, map[string]any{"aud": "https://issuer-alias.example/"}), "", ""},
		{"expired within skew", good(rk, map[string]any{"exp": now - 20}), "", ""},
		{"expired past skew", good(rk, map[string]any{"exp": now - 40}), KindExpired, "token expired at"},
		{"not yet valid within skew", good(rk, map[string]any{"nbf": now + 20}), "", ""},
		{"not yet valid past skew", good(rk, map[string]any{"nbf": now + 40}), KindExpired, "not valid before"},
		{"other audience", good(rk, map[string]any{"aud": "https://a.example/mcp"}), KindAudience,
			"token audience https://a.example/mcp ≠ https://b.example/mcp"},
		{"unknown issuer", bearer(sign(t, rk, map[string]any{"iss": "https://evil.example", "aud": canon})), KindIssuer,
			"token issuer https://evil.example is not configured"},
		{"no issuer", bearer(sign(t, rk, claims(canon))), KindIssuer, "not configured"},
		{"unknown kid", good(testKey{jose.RS256, "rsa-2", rk.priv}, nil), KindSignature, "key id"},
		{"bad signature", good(stranger, nil), KindSignature, "does not verify"},
		{"alg none", bearer(rawToken(`{"alg":"none","kid":"rsa-1"}`, `{"iss":"`+iss+`","aud":"`+canon+`"}`)), KindMalformed, "JWS"},
		{"HS256 with the public key as secret", bearer(hs256(t, publicDER(t, rk), map[string]any{"iss": iss, "aud": canon})),
			KindSignature, "algorithm not accepted"},
		{"RS384 not accepted", good(testKey{jose.RS384, "rsa-1", rk.priv}, nil), KindSignature, "algorithm not accepted"},
		{"tampered payload", []string{tamper(t, good(rk, nil)[0])}, KindSignature, "does not verify"},
		{"opaque allowed", bearer("opaque-token-0123456789"), "", ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r, err := judge(t, c, tc.header, canon)
			expect(t, r, err, tc.kind, tc.reason)
			jwt := strings.Count(tc.header[0], ".") == 2
			if tc.kind == "" && jwt && (!r.Verified || r.Claims.Sub != "alice") {
				t.Errorf("passed but Verified=%v sub=%q", r.Verified, r.Claims.Sub)
			}
		})
	}
}

func TestKeyRotationFromFile(t *testing.T) {
	rk, ek, _ := testKeys(t)
	const iss = "https://idp.example"
	path := jwksFile(t, rk)
	c, clk := newTestChecker(t, Options{Issuers: []Issuer{{Issuer: iss, JWKSFile: path}}})
	tok := bearer(sign(t, ek, map[string]any{"iss": iss, "aud": canon}))
	writeJWKS(t, path, rk, ek)
	if _, err := judge(t, c, tok, canon); !errors.Is(err, ErrRefused) {
		t.Fatal("the file was read again within a minute of the last read")
	}
	clk.advance(61 * time.Second)
	if r, err := judge(t, c, tok, canon); err != nil || !r.Verified {
		t.Fatalf("after a minute the rotated key is not used: %+v %v", r, err)
	}
}

func TestNewRejects(t *testing.T) {
	rk, _, _ := testKeys(t)
	file := jwksFile(t, rk)
	bad := []Options{
		{Issuers: []Issuer{{Issuer: "x"}}},
		{Issuers: []Issuer{{Issuer: "x", JWKSFile: file, JWKSURL: "https://idp.example/jwks"}}},
		{Issuers: []Issuer{{Issuer: "", JWKSFile: file}}},
		{Issuers: []Issuer{{Issuer: "x", JWKSFile: file}, {Issuer: "x", JWKSFile: file}}},
		{Issuers: []Issuer{{Issuer: "x", JWKSFile: "/nonexistent/jwks.json"}}},
		{Issuers: []Issuer{{Issuer: "x", JWKSURL: "http://idp.example/jwks"}}},
		{Opaque: OpaqueIntrospect},
		{Opaque: OpaqueIntrospect, Introspect: &Introspection{URL: "http://idp.example/introspect"}},
		{Opaque: "maybe"},
		{ClockSkew: -time.Second},
		{MaxHeader: -1},
	}
	for i, o := range bad {
		if _, err := New(o); err == nil {
			t.Errorf("case %d: New(%+v) accepted", i, o)
		}
	}
}

func TestOpaqueDeny(t *testing.T) {
	c, _ := newTestChecker(t, Options{Opaque: OpaqueDeny})
	r, err := judge(t, c, bearer("opaque-token-0123456789"), canon)
	expect(t, r, err, KindOpaque, "opaque")
	r, err = judge(t, c, bearer(rawToken(`{"alg":"RS256"}`, `{"aud":"`+canon+`"}`)), canon)
	expect(t, r, err, "", "")
}

func TestMaxHeader(t *testing.T) {
	c, _ := newTestChecker(t, Options{MaxHeader: 100})
	r, err := judge(t, c, []string{"Basic " + strings.Repeat("A", 95)}, canon)
	expect(t, r, err, KindOversized, "authorization header over 100 bytes")
	// At the limit the header is read: Basic is then refused for its scheme, not its size.
	r, err = judge(t, c, []string{"Basic " + strings.Repeat("A", 94)}, canon)
	expect(t, r, err, KindScheme, "authorization scheme basic")
}

func TestQuoteClaimBounds(t *testing.T) {
	if q := quoteClaim("https://a.example/\n\x1b[31mforged"); strings.ContainsAny(q, "\n\x1b") {
		t.Errorf("control characters kept: %q", q)
	}
	if q := quoteClaim(strings.Repeat("é", 500)); len(q) > maxClaimLen+len("…") {
		t.Errorf("claim not bounded: %d bytes", len(q))
	}
	many := []string{"a", "b", "c", "d", "e"}
	if q := quoteClaims(many); strings.Contains(q, "d") || !strings.HasSuffix(q, "…") {
		t.Errorf("audience list not bounded: %q", q)
	}
}

func expect(t *testing.T, r Result, err error, kind, reason string) {
	t.Helper()
	if kind == "" {
		if err != nil || r.Kind != "" || r.Reason != "" {
			t.Fatalf("refused: %+v %v", r, err)
		}
		return
	}
	if !errors.Is(err, ErrRefused) {
		t.Fatalf("not refused: %+v %v", r, err)
	}
	if r.Kind != kind || !strings.Contains(r.Reason, reason) {
		t.Fatalf("refused as %s %q, want %s containing %q", r.Kind, r.Reason, kind, reason)
	}
	if r.Verified || !equalClaims(r.Claims, Claims{}) {
		t.Fatalf("a refusal carries claims: %+v", r)
	}
}

func equalClaims(a, b Claims) bool {
	return reflect.DeepEqual(a, b)
}

func bearer(tok string) []string { return []string{"Bearer " + tok} }

func claims(aud any) map[string]any { return map[string]any{"aud": aud, "sub": "alice"} }

func hs256(t testing.TB, secret []byte, cl map[string]any) string {
	t.Helper()
	s, err := jose.NewSigner(jose.SigningKey{Algorithm: jose.HS256, Key: jose.JSONWebKey{Key: secret, KeyID: "rsa-1"}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	return signWith(t, s, cl)
}

// tamper swaps a token's payload for another, keeping header and signature.
func tamper(t *testing.T, header string) string {
	t.Helper()
	parts := strings.Split(strings.TrimPrefix(header, "Bearer "), ".")
	forged := strings.Split(rawToken(`{}`, `{"iss":"https://idp.example","aud":"`+canon+`","sub":"mallory"}`), ".")
	return "Bearer " + parts[0] + "." + forged[1] + "." + parts[2]
}

// TestParsedCache: a token seen before is not parsed again, but what depends on the request or
// the time is judged on every use — the audience against the server addressed, exp for a
// verified token — and a key withdrawn from the issuer's set stops vouching for a cached token
// once the set is read again.
func TestParsedCache(t *testing.T) {
	rk, ek, _ := testKeys(t)
	const iss = "https://idp.example"
	path := jwksFile(t, rk, ek)
	c, clk := newTestChecker(t, Options{Issuers: []Issuer{{Issuer: iss, JWKSFile: path}}, ClockSkew: time.Second})
	exp := clk.now().Add(10 * time.Minute).Unix()
	tok := bearer(sign(t, ek, map[string]any{"iss": iss, "aud": canon, "sub": "alice", "exp": exp}))
	if r, err := judge(t, c, tok, canon); err != nil || !r.Verified || r.Claims.Sub != "alice" {
		t.Fatalf("first use: %+v %v", r, err)
	}
	if len(c.parsed.m) != 1 {
		t.Fatalf("cache holds %d entries after one token, want 1", len(c.parsed.m))
	}
	if r, err := judge(t, c, tok, canon); err != nil || !r.Verified || r.Claims.Sub != "alice" {
		t.Fatalf("cached use: %+v %v", r, err)
	}
	if _, err := judge(t, c, tok, "https://other.example/mcp"); !errors.Is(err, ErrRefused) {
		t.Fatal("a cached token was accepted for another server")
	}
	// The issuer withdraws the key: within the cache's lifetime the token still passes, as a new
	// token would until the set is read again; after it, it is refused.
	writeJWKS(t, path, rk)
	clk.advance(cacheLifetime + time.Second)
	if _, err := judge(t, c, tok, canon); !errors.Is(err, ErrRefused) {
		t.Fatal("a cached token outlived the withdrawal of its key")
	}
	// exp is judged on a cached entry too.
	writeJWKS(t, path, rk, ek)
	clk.advance(cacheLifetime + time.Second)
	short := bearer(sign(t, ek, map[string]any{"iss": iss, "aud": canon, "exp": clk.now().Add(30 * time.Second).Unix()}))
	if _, err := judge(t, c, short, canon); err != nil {
		t.Fatal(err)
	}
	clk.advance(32 * time.Second)
	if r, err := judge(t, c, short, canon); !errors.Is(err, ErrRefused) || r.Kind != KindExpired {
		t.Fatalf("an expired cached token: %+v %v", r, err)
	}
}
