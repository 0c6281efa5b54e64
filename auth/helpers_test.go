package auth

import (
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	jose "github.com/go-jose/go-jose/v4"
)

// testKey is a signing key made by the test, with its JWK id.
type testKey struct {
	alg  jose.SignatureAlgorithm
	kid  string
	priv crypto.Signer
}

var (
	keysOnce sync.Once
	keyRSA   testKey
	keyEC    testKey
	keyEd    testKey
)

func testKeys(t testing.TB) (testKey, testKey, testKey) {
	t.Helper()
	keysOnce.Do(func() {
		r, err := rsa.GenerateKey(rand.Reader, 2048)
		if err != nil {
			panic(err)
		}
		e, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			panic(err)
		}
		_, d, err := ed25519.GenerateKey(rand.Reader)
		if err != nil {
			panic(err)
		}
		keyRSA = testKey{jose.RS256, "rsa-1", r}
		keyEC = testKey{jose.ES256, "ec-1", e}
		keyEd = testKey{jose.EdDSA, "ed-1", d}
	})
	return keyRSA, keyEC, keyEd
}

// sign makes a JWS compact token of claims with k.
func sign(t testing.TB, k testKey, claims map[string]any) string {
	t.Helper()
	s, err := jose.NewSigner(jose.SigningKey{Algorithm: k.alg, Key: jose.JSONWebKey{Key: k.priv, KeyID: k.kid}},
		(&jose.SignerOptions{}).WithType("JWT"))
	if err != nil {
		t.Fatal(err)
	}
	b, err := json.Marshal(claims)
	if err != nil {
		t.Fatal(err)
	}
	jws, err := s.Sign(b)
	if err != nil {
		t.Fatal(err)
	}
	tok, err := jws.CompactSerialize()
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

// rawToken assembles a token from a header and payload as given, with a
// made-up signature: for algorithms and payloads a signer refuses to make.
func rawToken(header, payload string) string {
	enc := base64.RawURLEncoding.EncodeToString
	return enc([]byte(header)) + "." + enc([]byte(payload)) + "." + enc([]byte("not-a-real-signature-0123456789"))
}

// jwksFile writes the public halves of keys as a JWKS file.
func jwksFile(t testing.TB, keys ...testKey) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "jwks.json")
	writeJWKS(t, p, keys...)
	return p
}

func writeJWKS(t testing.TB, path string, keys ...testKey) {
	t.Helper()
	if err := os.WriteFile(path, jwksJSON(t, keys...), 0o600); err != nil {
		t.Fatal(err)
	}
}

func jwksJSON(t testing.TB, keys ...testKey) []byte {
	t.Helper()
	var set jose.JSONWebKeySet
	for _, k := range keys {
		set.Keys = append(set.Keys, jose.JSONWebKey{Key: k.priv.Public(), KeyID: k.kid, Algorithm: string(k.alg), Use: "sig"})
	}
	b, err := json.Marshal(set)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func publicDER(t testing.TB, k testKey) []byte {
	t.Helper()
	b, err := x509.MarshalPKIXPublicKey(k.priv.Public())
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// judge runs Check and fails the test if any output carries the token's
// signature part (or the whole token).
func judge(t testing.TB, c *Checker, headers []string, canonical string) (Result, error) {
	t.Helper()
	r, err := c.Check(context.Background(), headers, canonical)
	assertNoToken(t, headers, r, err)
	return r, err
}

func assertNoToken(t testing.TB, headers []string, r Result, err error) {
	t.Helper()
	out := fmt.Sprintf("%+v %#v", r, r)
	if err != nil {
		out += err.Error()
	}
	for _, h := range headers {
		for _, secret := range secretParts(h) {
			if strings.Contains(out, secret) {
				t.Fatalf("output carries part of the token: %s", out)
			}
		}
	}
}

// secretParts are the pieces of a header that must never be echoed: the
// credentials, and a JWT's signature segment.
func secretParts(h string) []string {
	_, cred, _ := strings.Cut(strings.TrimSpace(h), " ")
	cred = strings.TrimSpace(cred)
	var out []string
	if len(cred) >= 8 {
		out = append(out, cred)
	}
	if parts := strings.Split(cred, "."); len(parts) == 3 && len(parts[2]) >= 8 {
		out = append(out, parts[2])
	}
	return out
}

// fixedClock is a Checker clock the test moves.
type fixedClock struct {
	mu sync.Mutex
	t  time.Time
}

func (f *fixedClock) now() time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.t
}

func (f *fixedClock) advance(d time.Duration) {
	f.mu.Lock()
	f.t = f.t.Add(d)
	f.mu.Unlock()
}

func signWith(t testing.TB, s jose.Signer, cl map[string]any) string {
	t.Helper()
	b, err := json.Marshal(cl)
	if err != nil {
		t.Fatal(err)
	}
	jws, err := s.Sign(b)
	if err != nil {
		t.Fatal(err)
	}
	tok, err := jws.CompactSerialize()
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

func mustEC(t testing.TB) *ecdsa.PrivateKey {
	t.Helper()
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return k
}
