package auth

import (
	"context"
	"errors"
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
