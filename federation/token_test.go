package federation

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	jose "github.com/go-jose/go-jose/v4"
	"github.com/go-jose/go-jose/v4/jwt"

	"mcpintercept/audit"
	"mcpintercept/auth"
)

// The draft's Security Considerations (Confused Deputy): "intermediaries MUST validate token
// audiences before forwarding". On the federation's ingress a token must name the endpoint's
// canonical URI; one for another audience is refused with 401 before any downstream sees the
// call; an accepted one names the caller (iss, sub) in the authorization record and the hop
// trail, never the token.
func TestIngressTokenAudience(t *testing.T) {
	pub, priv, _ := ed25519.GenerateKey(rand.Reader)
	jwks, _ := json.Marshal(jose.JSONWebKeySet{Keys: []jose.JSONWebKey{{Key: pub, KeyID: "k1", Algorithm: "EdDSA", Use: "sig"}}})
	jwksFile := filepath.Join(t.TempDir(), "jwks.json")
	os.WriteFile(jwksFile, jwks, 0o600)
	sig, _ := jose.NewSigner(jose.SigningKey{Algorithm: jose.EdDSA, Key: jose.JSONWebKey{Key: priv, KeyID: "k1"}}, (&jose.SignerOptions{}).WithType("JWT"))
	token := func(aud string) string {
		s, err := jwt.Signed(sig).Claims(jwt.Claims{Issuer: "https://issuer.test", Subject: "alice", Audience: jwt.Audience{aud},
			Expiry: jwt.NewNumericDate(time.Now().Add(time.Hour))}).Serialize()
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	chk, err := auth.New(auth.Options{Issuers: []auth.Issuer{{Issuer: "https://issuer.test", JWKSFile: jwksFile}}})
	if err != nil {
		t.Fatal(err)
	}
	m, mlog := goServer(t, "m", true)
	store := memStore(t)
	svc := startFed(t, fedOpts{store: store, tokens: &TokenCheck{Check: chk, Identity: "plain"}}, [2]string{"m", m.URL})
	waitAttempted(t, svc)
	call := func(tok string) (int, string) {
		body := `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"m.echo","arguments":{"text":"t"}}}`
		req, _ := http.NewRequest(http.MethodPost, fedURL(svc), strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Authorization", "Bearer "+tok)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var b strings.Builder
		buf := make([]byte, 4096)
		for {
			n, err := resp.Body.Read(buf)
			b.Write(buf[:n])
			if err != nil {
				break
			}
		}
		return resp.StatusCode, b.String()
	}
	if code, body := call(token("https://elsewhere.example/mcp")); code != http.StatusUnauthorized || !strings.Contains(body, "-31005") {
		t.Fatalf("a token for another audience: %d %s", code, body)
	}
	if mlog.calls.Load() != 0 {
		t.Fatal("a call with a refused token reached the downstream")
	}
	good := token("http://" + svc.Addr().String() + "/mcp")
	if code, body := call(good); code != http.StatusOK || !strings.Contains(body, `"result"`) {
		t.Fatalf("a token for the endpoint: %d %s", code, body)
	}
	mlog.mu.Lock()
	hops, _ := json.Marshal(mlog.metas[0][HopsKey])
	head := mlog.heads[0].Get("Authorization")
	mlog.mu.Unlock()
	if !strings.Contains(string(hops), `"sub":"alice"`) || strings.Contains(string(hops), good) {
		t.Errorf("hop trail: %s", hops)
	}
	if head != "" {
		t.Errorf("the client's Authorization reached the downstream: %q", head)
	}
	svc.Shutdown(context.Background())
	dir := storeDir(store)
	store.Close(context.Background())
	var found bool
	for _, r := range readRecords(t, dir) {
		if r.Kind == audit.KindAuthorization && r.Sub == "alice" && r.Iss == "https://issuer.test" {
			found = true
		}
	}
	if !found {
		t.Error("no authorization record names the caller")
	}
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		b, _ := os.ReadFile(filepath.Join(dir, e.Name()))
		if strings.Contains(string(b), good) {
			t.Errorf("the token is in %s", e.Name())
		}
	}
}
