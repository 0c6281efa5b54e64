package appliance

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"mcpintercept/auth/tokenstage"
	"mcpintercept/config"
	"mcpintercept/stage"
)

// Every route that reads HTTP checks tokens unless it says token_audience: off; the others cannot
// read them. declare states the pattern per route.
func TestTokenCheckPerRoute(t *testing.T) {
	dir := t.TempDir()
	src := `intercept: {destinations: [10.0.0.0/8], ports: [443, 8080, 9443]}
routes:
  - {name: checked, tls: terminate, audiences: [https://alias.example/mcp]}
  - {name: unchecked, tls: plaintext, level: 2, token_audience: off}
  - {name: opaque, tls: passthrough}
`
	path := filepath.Join(dir, "c.yaml")
	if err := os.WriteFile(path, []byte(src), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Load(path, config.Overrides{})
	if err != nil {
		t.Fatal(err)
	}
	rt, _, err := RoutingFromConfig(cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i, want := range []bool{true, false, false} {
		r := rt.Routes[i]
		if o, _ := stage.Get[*tokenstage.Options](r.Stages, tokenstage.Name); (o != nil && o.Checker != nil) != want {
			t.Errorf("route %s: token check %+v, want %v", r.Name, o, want)
		}
	}
	if o, _ := stage.Get[*tokenstage.Options](rt.Routes[0].Stages, tokenstage.Name); o == nil || o.CallerIdentity != config.IdentityPlain {
		got := ""
		if o != nil {
			got = o.CallerIdentity
		}
		t.Errorf("route checked: caller identity %q, want the default %q", got, config.IdentityPlain)
	}
	a := Declaration(cfg).Authentication
	for _, want := range []string{TokenPattern + " on routes checked", "(token_audience: off) on routes unchecked", "unread, on routes opaque",
		"records carry the caller's iss and sub: plain"} {
		if !strings.Contains(a, want) {
			t.Errorf("authentication statement lacks %q:\n%s", want, a)
		}
	}
}

// A JWKS file that cannot be read is the configuration's problem, found by check.
func TestTokenCheckBadJWKS(t *testing.T) {
	cfg := &config.Config{
		Routes: []config.Route{{Name: "r", TLS: config.TLSTerminate}},
		Tokens: config.TokensConfig{Issuers: []config.TokenIssuer{{Issuer: "https://idp.example", JWKSFile: filepath.Join(t.TempDir(), "missing.json")}}},
	}
	if err := Check(cfg); err == nil || !strings.Contains(err.Error(), "route r") {
		t.Fatalf("Check = %v, want an error naming the route", err)
	}
}

// tokens.record_identity's values are the engine's: a mode the engine does not know would record
// plain names where the operator asked for hashes.
func TestRecordIdentityValues(t *testing.T) {
	if config.IdentityHash != tokenstage.IdentityHash || config.Off != tokenstage.IdentityOff {
		t.Fatalf("config (%q, %q) and engine (%q, %q) disagree", config.IdentityHash, config.Off, tokenstage.IdentityHash, tokenstage.IdentityOff)
	}
}
