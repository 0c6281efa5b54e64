//go:build linux

package e2e

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/go-jose/go-jose/v4"
	"github.com/go-jose/go-jose/v4/jwt"
)

// tokenIssuer is the test's own issuer: an ES256 key made here, its JWKS written to a file the
// appliance is configured with.
type tokenIssuer struct {
	t    *testing.T
	iss  string
	key  *ecdsa.PrivateKey
	kid  string
	jwks string
}

func newTokenIssuer(t *testing.T) *tokenIssuer {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	is := &tokenIssuer{t: t, iss: "https://idp.lab.test", key: key, kid: "lab-1"}
	set := jose.JSONWebKeySet{Keys: []jose.JSONWebKey{{Key: &key.PublicKey, KeyID: is.kid, Algorithm: string(jose.ES256), Use: "sig"}}}
	b, err := json.Marshal(set)
	if err != nil {
		t.Fatal(err)
	}
	is.jwks = filepath.Join(t.TempDir(), "jwks.json")
	if err := os.WriteFile(is.jwks, b, 0o644); err != nil {
		t.Fatal(err)
	}
	return is
}

// sign mints a token for sub and aud valid until exp, signed with key (the issuer's own, or
// another one claiming its kid).
func (is *tokenIssuer) sign(key *ecdsa.PrivateKey, sub, aud string, exp time.Time) string {
	is.t.Helper()
	signer, err := jose.NewSigner(jose.SigningKey{Algorithm: jose.ES256, Key: key},
		(&jose.SignerOptions{}).WithType("JWT").WithHeader("kid", is.kid))
	if err != nil {
		is.t.Fatal(err)
	}
	now := time.Now()
	tok, err := jwt.Signed(signer).Claims(jwt.Claims{Issuer: is.iss, Subject: sub, Audience: jwt.Audience{aud},
		IssuedAt: jwt.NewNumericDate(now.Add(-time.Hour)), NotBefore: jwt.NewNumericDate(now.Add(-time.Hour)),
		Expiry: jwt.NewNumericDate(exp)}).Serialize()
	if err != nil {
		is.t.Fatal(err)
	}
	return tok
}

// tokenConfig is the lab configuration with an audited terminate + Level 2 route on port 3017
// (steered for this test) and tokens checked against the test's issuer; rules, when given, are
// the route's rule set.
func tokenConfig(t *testing.T, caDir, auditDir, jwks, rules string) string {
	cfg := tlsConfig(t, caDir)
	cfg = strings.Replace(cfg, `"3000-3014"`, `"3000-3014", 3017`, 1)
	cfg = strings.Replace(cfg, "routes:\n", `routes:
  - name: tokens
    match: {ports: [3017]}
    tls: terminate
    level: 2
    audit: true
`, 1)
	if rules != "" {
		cfg = strings.Replace(cfg, "    audit: true\n", "    audit: true\n    rule_set: tokens\n", 1)
		cfg = strings.Replace(cfg, "rule_sets:\n", "rule_sets:\n  tokens:\n"+rules, 1)
	}
	return cfg + "audit:\n  dir: " + auditDir + "\n" +
		"tokens:\n  issuers:\n    - {issuer: https://idp.lab.test, jwks_file: " + jwks + "}\n"
}

func tokenServer(t *testing.T) string {
	t.Helper()
	log := filepath.Join(t.TempDir(), "calls.log")
	p := startT(t, nsServer, bin("mcpserver"), "-stateless", "-response", "sse", "-listen", "10.200.2.2:3017",
		"-tls-cert", labPKI("server.pem"), "-tls-key", labPKI("server-key.pem"), "-call-log", log)
	if err := p.waitFor("READY", 60*time.Second); err != nil {
		t.Fatal(err)
	}
	return log
}

func callToolBearer(t *testing.T, url, ca, token, tool, args string) (toolResult, error) {
	t.Helper()
	out, errOut, err := run(t.Context(), nsClient, bin("mcpclient"), "-url", url, "-ca", ca, "-bearer", token, "-tool", tool, "-args", args)
	var r toolResult
	json.Unmarshal([]byte(strings.TrimSpace(out)), &r)
	if err != nil {
		return r, fmt.Errorf("%v: %s %s", err, out, errOut)
	}
	return r, nil
}

// TestTokenAudience (issue 19 acceptance): the draft's "intermediaries MUST validate token
// audiences before forwarding" (Security Considerations, Confused Deputy), with real Go SDK peers
// through terminate + Level 2. The server's canonical URI is its own (https://10.200.2.2:3017/mcp):
// a token for another audience, an expired one and a badly signed one are refused before the
// server sees the call (its call log unchanged); the right token passes; no token string appears
// in any output of the appliance, its flow log, its audit records or /metrics.
func TestTokenAudience(t *testing.T) {
	needLab(t)
	calls := tokenServer(t)
	is := newTokenIssuer(t)
	auditDir := filepath.Join(t.TempDir(), "audit")
	cfg := tokenConfig(t, filepath.Join(t.TempDir(), "ca"), auditDir, is.jwks, "")
	a := startAppliance(t, "nftables-tproxy", cfg)
	ca := exportCA(t, cfg)
	const url = "https://10.200.2.2:3017/mcp"
	other, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	later := time.Now().Add(time.Hour)
	refused := []struct{ name, token string }{
		{"another audience", is.sign(is.key, "alice", "https://other.example/mcp", later)},
		{"expired", is.sign(is.key, "alice", url, time.Now().Add(-30*time.Minute))},
		{"badly signed", is.sign(other, "alice", url, later)},
	}
	for _, tc := range refused {
		if r, err := callToolBearer(t, url, ca, tc.token, "echo", `{"text":"refused-`+strings.ReplaceAll(tc.name, " ", "-")+`"}`); err == nil {
			t.Errorf("%s: the call went through: %+v", tc.name, r)
		}
	}
	if got := executedCalls(t, calls); len(got) != 0 {
		t.Fatalf("the server executed %q with refused tokens", got)
	}
	good := is.sign(is.key, "alice", url, later)
	if r, err := callToolBearer(t, url, ca, good, "echo", `{"text":"alice-ok"}`); err != nil || r.Text != "alice-ok" {
		t.Fatalf("the right token: %+v, %v", r, err)
	}
	if got := executedCalls(t, calls); len(got) != 1 || got[0] != "alice-ok" {
		t.Errorf("call log %q, want [alice-ok]", got)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	metrics, _, _ := run(ctx, nsAppliance, "curl", "-s", "http://127.0.0.1:9464/metrics")
	a.stopGracefully(t)
	// The SDK client may send more than one request before it gives up; each is refused.
	for _, kind := range []string{"audience", "expired", "signature"} {
		if !strings.Contains(metrics, `mcpintercept_token_refused_total{kind="`+kind+`",route="tokens"} `) {
			t.Errorf("no %s refusal counted:\n%s", kind, grepLines(metrics, "token_refused"))
		}
	}
	flows := a.stdout.String()
	if !strings.Contains(flows, `"rule":"token-audience"`) || !strings.Contains(flows, "token audience") {
		t.Errorf("the flow log has no token-audience denial with its reason:\n%s", flows)
	}
	// The accepted call's records name its caller; a refused token's claims (maybe forged) are in
	// none.
	var allowed int
	for _, l := range flowLines(t, flows) {
		switch {
		case l.Rule == "token-audience" && (l.Sub != "" || l.Iss != ""):
			t.Errorf("a refused token's claims are in its record: %+v", l)
		case l.MCPName == "echo" && l.Decision == "allow" && l.Direction == "client_to_server":
			allowed++
			if l.Sub != "alice" || l.Iss != "https://idp.lab.test" {
				t.Errorf("the accepted call's record names iss %q sub %q, want https://idp.lab.test alice", l.Iss, l.Sub)
			}
		}
	}
	if allowed == 0 {
		t.Errorf("no flow log record of the accepted echo call:\n%s", flows)
	}
	auditRecs := auditShow(t, auditDir)
	var audited bool
	for _, r := range auditRecs {
		if r.Kind == "authorization" && r.Tool == "echo" && r.Decision == "allow" {
			audited = true
			if r.Sub != "alice" || r.Iss != "https://idp.lab.test" {
				t.Errorf("the accepted call's audit record names iss %q sub %q", r.Iss, r.Sub)
			}
		}
	}
	if !audited {
		t.Errorf("no audit authorization of the accepted echo call: %+v", auditRecs)
	}
	records, _ := json.Marshal(auditRecs)
	all := flows + a.stderr.String() + metrics + string(records)
	for _, tok := range append([]string{good}, refused[0].token, refused[1].token, refused[2].token) {
		// A JWT's signature part alone is enough to replay nothing, but its whole is a secret:
		// neither may appear.
		sig := tok[strings.LastIndexByte(tok, '.')+1:]
		if strings.Contains(all, tok) || strings.Contains(all, sig) {
			t.Errorf("a token appears in the appliance's output, flow log, audit records or /metrics")
		}
	}
}

// tokenFlowLine is the part of a flow log line the token tests read.
type tokenFlowLine struct {
	MCPName   string `json:"mcp_name"`
	Direction string `json:"direction"`
	Decision  string `json:"decision"`
	Rule      string `json:"rule"`
	Iss       string `json:"iss"`
	Sub       string `json:"sub"`
}

func flowLines(t *testing.T, log string) []tokenFlowLine {
	t.Helper()
	var out []tokenFlowLine
	for line := range strings.Lines(log) {
		if !strings.HasPrefix(line, "{") {
			continue
		}
		var l tokenFlowLine
		if err := json.Unmarshal([]byte(line), &l); err != nil {
			t.Fatalf("flow log line %q: %v", line, err)
		}
		out = append(out, l)
	}
	return out
}

func grepLines(s, sub string) string {
	var out []string
	for l := range strings.Lines(s) {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "")
}
