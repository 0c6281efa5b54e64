package appliance

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"encoding/json"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	jose "github.com/go-jose/go-jose/v4"

	"mcpintercept/config"
)

func TestProbeJWKS(t *testing.T) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	keys, err := json.Marshal(jose.JSONWebKeySet{Keys: []jose.JSONWebKey{
		{Key: key.Public(), KeyID: "a", Algorithm: "ES256", Use: "sig"},
		{Key: key.Public(), KeyID: "b", Algorithm: "ES256"},
	}})
	if err != nil {
		t.Fatal(err)
	}
	release := make(chan struct{})
	defer close(release)
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/hang":
			select {
			case <-r.Context().Done():
			case <-release:
			}
		case "/500":
			http.Error(w, "boom", http.StatusInternalServerError)
		case "/garbage":
			w.Write([]byte("<html>not json</html>"))
		case "/empty":
			w.Write([]byte(`{"keys":[]}`))
		case "/big":
			w.Write([]byte(`{"keys":[],"x":"` + strings.Repeat("a", 2<<20) + `"}`))
		case "/keys":
			w.Write(keys)
		}
	}))
	defer srv.Close()
	roots := x509.NewCertPool()
	roots.AddCert(srv.Certificate())
	dial := (&net.Dialer{}).DialContext

	for _, tc := range []struct {
		name, path string
		keys       int
		err        string // "" ok
	}{
		{"keys", "/keys", 2, ""},
		{"500", "/500", 0, "status 500"},
		{"garbage", "/garbage", 0, "jwks decode"},
		{"no keys", "/empty", 0, "no public signing key"},
		{"over 1 MiB", "/big", 0, "over 1048576 bytes"},
		{"hangs", "/hang", 0, "no answer within 5s"},
		{"not https", "", 0, "want an https URL"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			u := srv.URL + tc.path
			if tc.path == "" {
				u = "http://" + srv.Listener.Addr().String() + "/keys"
			}
			cfg := &config.Config{}
			cfg.Tokens.Issuers = []config.TokenIssuer{{Issuer: "https://other", JWKSFile: "/x"}, {Issuer: "https://idp", JWKSURL: u}}
			ctx := context.Background()
			if tc.path == "/hang" {
				// The probe's own bound is 5 s; the test cuts it short the same way (a deadline).
				var cancel context.CancelFunc
				ctx, cancel = context.WithTimeout(ctx, 200*time.Millisecond)
				defer cancel()
			}
			ps := probeJWKS(ctx, cfg, dial, roots)
			if len(ps) != 1 {
				t.Fatalf("%d probes, want 1 (the file issuer is not fetched)", len(ps))
			}
			p := ps[0]
			if p.Key != "tokens.issuers[1].jwks_url" || p.URL != u {
				t.Errorf("probe names %s %s", p.Key, p.URL)
			}
			line := p.String()
			t.Log(line)
			if !strings.HasPrefix(line, "tokens.issuers[1].jwks_url "+u+": ") {
				t.Errorf("line %q does not name the key and URL", line)
			}
			if tc.err == "" {
				if p.Err != nil || p.Keys != tc.keys || !strings.HasSuffix(line, ": ok: 2 key(s)") {
					t.Fatalf("%q (%v), want ok with %d keys", line, p.Err, tc.keys)
				}
				return
			}
			if p.Err == nil || !strings.Contains(line, tc.err) {
				t.Fatalf("%q, want an error saying %q", line, tc.err)
			}
		})
	}
}
