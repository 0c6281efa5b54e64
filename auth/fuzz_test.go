package auth

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"testing"
)

var kinds = map[string]bool{
	KindAudience: true, KindSignature: true, KindExpired: true, KindIssuer: true,
	KindOpaque: true, KindMalformed: true, KindOversized: true, KindScheme: true, KindCarrier: true,
}

// FuzzParse feeds arbitrary Authorization headers to a checker without
// issuers (JWTs read unverified) and one with an issuer: neither may panic,
// a refusal is ErrRefused with a bounded kind, and no output carries the
// credentials.
func FuzzParse(f *testing.F) {
	rk, ek, dk := testKeys(f)
	const iss = "https://idp.example"
	f.Add("Bearer " + sign(f, rk, map[string]any{"iss": iss, "aud": canon, "sub": "alice"}))
	f.Add("Bearer " + sign(f, ek, map[string]any{"iss": iss, "aud": []string{"https://a.example", canon}}))
	f.Add("Bearer " + sign(f, dk, map[string]any{"iss": iss, "resource": canon, "exp": 1}))
	f.Add("Bearer " + rawToken(`{"alg":"none"}`, `{"aud":"https://b.example/mcp"}`))
	f.Add("Bearer " + rawToken(`{"alg":"HS256","kid":"rsa-1"}`, `{"iss":"`+iss+`","aud":"`+canon+`"}`))
	f.Add("Basic dXNlcjpwYXNzd29yZA==")
	f.Add("Bearer opaque-token-0123456789")
	f.Add("Bearer a.b.c")
	f.Add("bearer   x.y.z==")

	plain, err := New(Options{})
	if err != nil {
		f.Fatal(err)
	}
	verified, err := New(Options{Issuers: []Issuer{{Issuer: iss, JWKSFile: jwksFile(f, rk, ek, dk)}}})
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, header string) {
		for _, c := range []*Checker{plain, verified} {
			r, err := c.Check(context.Background(), []string{header}, canon)
			assertNoToken(t, []string{header}, r, err)
			checkInvariants(t, r, err)
		}
	})
}

func checkInvariants(t *testing.T, r Result, err error) {
	t.Helper()
	if !r.Present {
		t.Fatal("a header judged absent")
	}
	if err == nil {
		if r.Kind != "" || r.Reason != "" {
			t.Fatalf("passed with a refusal: %+v", r)
		}
		return
	}
	if !errors.Is(err, ErrRefused) || !kinds[r.Kind] || r.Reason == "" {
		t.Fatalf("refusal %+v %v", r, err)
	}
	if r.Verified || r.Claims.Sub != "" || strings.ContainsAny(r.Reason, "\n\r") {
		t.Fatalf("refusal %+v", r)
	}
}

// BenchmarkOversizedHeader: a 64 KiB garbage header is refused on its
// length, without being read.
// The 1 MiB case costs the same: the length is all that is looked at.
func BenchmarkOversizedHeader(b *testing.B) {
	b.Run("64KiB", func(b *testing.B) { benchGarbage(b, Options{}, 64<<10) })
	b.Run("1MiB", func(b *testing.B) { benchGarbage(b, Options{}, 1<<20) })
}

// BenchmarkGarbageParsed is the cost of reading 64 KiB of garbage when the
// limit lets it through, for comparison.
func BenchmarkGarbageParsed(b *testing.B) {
	benchGarbage(b, Options{MaxHeader: 128 << 10}, 64<<10)
}

func BenchmarkGarbageJWSParsed(b *testing.B) {
	c, err := New(Options{MaxHeader: 128 << 10})
	if err != nil {
		b.Fatal(err)
	}
	seg := strings.Repeat("eyJh", (64<<10)/12)
	h := []string{"Bearer " + seg + "." + seg + "." + seg}
	b.ReportAllocs()
	for b.Loop() {
		c.Check(context.Background(), h, canon)
	}
}

// BenchmarkVerifiedRS256: the same verified token on every request, as a client sends it; after
// the first, the signature is not verified again (parsedCache), only the audience and the times.
func BenchmarkVerifiedRS256(b *testing.B) {
	rk, _, _ := testKeys(b)
	const iss = "https://idp.example"
	c, err := New(Options{Issuers: []Issuer{{Issuer: iss, JWKSFile: jwksFile(b, rk)}}})
	if err != nil {
		b.Fatal(err)
	}
	h := bearer(sign(b, rk, map[string]any{"iss": iss, "aud": canon}))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := c.Check(context.Background(), h, canon); err != nil {
			b.Fatal(err)
		}
	}
}

func benchGarbage(b *testing.B, o Options, n int) {
	c, err := New(o)
	if err != nil {
		b.Fatal(err)
	}
	h := []string{"Bearer " + strings.Repeat("A", n)}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := c.Check(context.Background(), h, canon); !errors.Is(err, ErrRefused) && o.MaxHeader == 0 {
			b.Fatal("not refused")
		}
	}
}

// FuzzSplitHeader: whatever Authorization value, when the Go SDK's own middleware (strings.Fields,
// called for real), the TypeScript SDK's rule (split(' '), second element: reproduced) or Python's
// str.split() over the value decoded as Latin-1 (reproduced) reads a token from it, splitHeader
// judges that token (leading separators aside, see TestAuthorizationDifferential) or the checker
// refuses the value; and a judged credential is one b64token.
func FuzzSplitHeader(f *testing.F) {
	for _, s := range []string{"Bearer a.b.c", "Bearer\ta.b.c", "bearer  x", "DPoP x", "Basic x", "x",
		"Bearer\xc2\xa0x", "Bearer\xa0x", "\xa0Bearer x", "Bearer x\xa0", "Bearer x y", "Bearer\x1cx", "BEARER\u3000x=", "Bearer \tx"} {
		f.Add(s)
	}
	checker, err := New(Options{})
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, v string) {
		v = strings.Trim(v, " \t") // as every HTTP parser does
		scheme, cred, err := splitHeader(v)
		judged := err == nil && judgedSchemes[scheme]
		if judged && !isB64Token(cred) {
			t.Fatalf("%q: judged credential %q is not a b64token", v, cred)
		}
		if !judged {
			if _, cerr := checker.Check(context.Background(), []string{v}, canon); !errors.Is(cerr, ErrRefused) {
				t.Fatalf("%q: not judged and not refused: %v", v, cerr)
			}
			return
		}
		for name, tok := range map[string]*string{"go-sdk": goSDKToken(v), "ts-sdk": tsToken(v), "python-split": pythonSplitToken(v)} {
			if tok != nil && trimLeftSeparators(*tok) != cred {
				t.Fatalf("%q: %s reads %q, the appliance judges %q", v, name, *tok, cred)
			}
		}
	})
}

func goSDKToken(v string) *string {
	toks := goSDKTokens(nil, []string{v})
	if !toks[0].ok {
		return nil
	}
	return &toks[0].tok
}

// tsToken reproduces requireBearerAuth's `const [type, token] = authHeader.split(' ')` over the
// value as Node gives it (Latin-1: one character per byte, so splitting the bytes is the same).
func tsToken(v string) *string {
	if v == "" {
		return nil
	}
	parts := strings.Split(v, " ")
	if strings.ToLower(parts[0]) != "bearer" || len(parts) < 2 || parts[1] == "" {
		return nil
	}
	return &parts[1]
}

// pythonSplitToken reproduces `f = v.split(); f[1] if len(f) == 2 and f[0].lower() == 'bearer'`
// over the value decoded as Latin-1: str.isspace is true there for \t-\r, \x1c-\x1f, space, 0x85
// and 0xa0.
func pythonSplitToken(v string) *string {
	var f []string
	start := -1
	for i := 0; i <= len(v); i++ {
		sp := i == len(v) || latin1Space(v[i])
		if sp && start >= 0 {
			f = append(f, v[start:i])
			start = -1
		} else if !sp && start < 0 {
			start = i
		}
	}
	if len(f) != 2 || latin1Lower(f[0]) != "bearer" {
		return nil
	}
	return &f[1]
}

func latin1Space(c byte) bool {
	return c == ' ' || ('\t' <= c && c <= '\r') || (0x1c <= c && c <= 0x1f) || c == 0x85 || c == 0xa0
}

// latin1Lower lowers ASCII only: no Latin-1 letter lowers to one of "bearer".
func latin1Lower(s string) string {
	b := []byte(s)
	for i, c := range b {
		if 'A' <= c && c <= 'Z' {
			b[i] = c + 'a' - 'A'
		}
	}
	return string(b)
}

// FuzzCarriers: the query, cookie and target parsers never panic; a query Go's net/url reads an
// access_token from (any case) is one tokenInQuery refuses; an authority that parses is the same
// as itself; CheckRequest's output never carries what it was given.
func FuzzCarriers(f *testing.F) {
	rk, _, _ := testKeys(f)
	jwt := sign(f, rk, claims("https://a.example/mcp"))
	f.Add("/mcp?access_token=x", "at="+jwt, "mcp.test")
	f.Add("/mcp?a=1;ACCESS%5fTOKEN=x", `at="`+jwt+`"; sid=1`, "mcp.test:80")
	f.Add("http://u@victim.test:8080/mcp?x#access_token", "sid=abc, at="+strings.ReplaceAll(jwt, ".", "%2e"), "[::1]:8080")
	f.Add("/mcp?access.token[]=1", "eyJ.x.y", "MCP.test.")
	f.Add("http://victim.test\\@mcp.test/mcp", "", "mcp.test")
	f.Add("https://u:p@mcp.test:443/a@b?c@d#e@f", "", "mcp.test:443")
	checker, err := New(Options{})
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, target, cookie, host string) {
		in := tokenInQuery(target)
		if _, q, ok := strings.Cut(target, "?"); ok && !in {
			if vals, _ := url.ParseQuery(q); vals != nil {
				for k := range vals {
					if strings.EqualFold(k, "access_token") {
						t.Fatalf("%q: net/url reads %q, tokenInQuery does not", target, k)
					}
				}
			}
		}
		cookieJWTs([]string{cookie})
		if why := AmbiguousTarget(target); why == "" {
			// an unambiguous target's authority is the one net/url reads
			if _, a, ok := TargetAuthority(target); ok && strings.HasPrefix(strings.ToLower(target), "http") {
				if u, err := url.Parse(target); err == nil && (u.Scheme == "http" || u.Scheme == "https") && u.Host != a {
					t.Fatalf("%q: net/url reads host %q, TargetAuthority %q", target, u.Host, a)
				}
			}
		} else if _, _, ok := TargetAuthority(target); !ok {
			t.Fatalf("%q: ambiguous (%s) but not absolute-form", target, why)
		}
		if scheme, a, ok := TargetAuthority(target); ok {
			if _, _, good := splitAuthority(scheme, a); good && !SameAuthority(scheme, a, a) {
				t.Fatalf("%q is not itself", a)
			}
			SameAuthority(scheme, a, host)
		}
		r, err := checker.CheckRequest(context.Background(), Credentials{Target: target, Cookies: []string{cookie}}, canon)
		out := fmt.Sprintf("%+v %v", r, err)
		for _, v := range []string{target, cookie} {
			if len(v) >= 16 && strings.Contains(out, v) {
				t.Fatalf("output carries its input %q: %s", v, out)
			}
		}
	})
}
