//go:build linux

package e2e

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// Issue 35: credentials stay outside the sandbox. The client in mcpi-client holds no real
// credential (or a worthless placeholder); the appliance adds the server's on the way out, to the
// destination the route names only, and the value is in none of its outputs.

const (
	credAdmin = "http://127.0.0.1:9464"
	// credOTLP is where the appliance exports its spans: a receiver of the test's own in
	// mcpi-appliance, which keeps the raw export bodies to search them.
	credOTLP = "127.0.0.1:4319"
	// The client's placeholder (the configured worthless value).
	credPlaceholder = "sandbox-placeholder"
	// Dex: A (the workload's IdP) and B (the token-exchange AS) in mcpi-server; B2 is a second B
	// issuing short-lived tokens (expiry).
	dexHost   = "10.200.2.2"
	dexPortA  = 15556
	dexPortB  = 15557
	dexPortB2 = 15558
	// credProtocol pins the client to one initialize (the SDK's latest first tries server/discover
	// and falls back), so that one refused request is one failed run.
	credProtocol = "2025-11-25"
)

func randomHex(t *testing.T, n int) string {
	t.Helper()
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(b)
}

// writeSecret writes a one-line secret file, mode 0600, atomically (a server reads it per request).
func writeSecret(t *testing.T, path, value string) {
	t.Helper()
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(value+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

// credServer starts the Go SDK server on addr with extra flags and waits for it.
func credServer(t *testing.T, addr string, extra ...string) *proc {
	t.Helper()
	p := startT(t, nsServer, bin("mcpserver"), append([]string{"-listen", addr}, extra...)...)
	if err := p.waitFor("READY", 60*time.Second); err != nil {
		t.Fatal(err)
	}
	return p
}

// credCall runs the Go SDK client in ns: one echo of text, with bearer when given.
func credCall(t *testing.T, ns, url, bearer, text string) (toolResult, error) {
	t.Helper()
	args := []string{"-url", url, "-tool", "echo", "-args", fmt.Sprintf(`{"text":%q}`, text), "-protocol-version", credProtocol}
	if bearer != "" {
		args = append(args, "-bearer", bearer)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	out, errOut, err := run(ctx, ns, bin("mcpclient"), args...)
	var r toolResult
	json.Unmarshal([]byte(strings.TrimSpace(out)), &r)
	if err != nil {
		return r, fmt.Errorf("%v: %s %s", err, strings.TrimSpace(out), strings.TrimSpace(errOut))
	}
	if r.Text != text || r.IsError {
		return r, fmt.Errorf("echo %q answered %+v", text, r)
	}
	return r, nil
}

// mustCall is credCall that must succeed.
func mustCall(t *testing.T, what, ns, url, bearer, text string) {
	t.Helper()
	if _, err := credCall(t, ns, url, bearer, text); err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

// mustBeUnauthorized is credCall that must fail with a 401 (the SDK's "Unauthorized").
func mustBeUnauthorized(t *testing.T, what, ns, url, bearer, text string) {
	t.Helper()
	_, err := credCall(t, ns, url, bearer, text)
	if err == nil {
		t.Fatalf("%s: the call went through", what)
	}
	if !strings.Contains(err.Error(), "Unauthorized") {
		t.Fatalf("%s: failed, but not with 401: %v", what, err)
	}
}

// authLogLines is a server's -auth-log.
func authLogLines(t *testing.T, path string) []string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	var out []string
	for l := range strings.Lines(string(b)) {
		out = append(out, strings.TrimSpace(l))
	}
	return out
}

// scrape is the appliance's /metrics.
func scrape(t *testing.T) string {
	t.Helper()
	return runT(t, 10*time.Second, nsAppliance, "curl", "-sf", credAdmin+"/metrics")
}

// metricValue is one series of a /metrics scrape (labels as Prometheus writes them, sorted by
// name), 0 when absent.
func metricValue(metrics, name, labels string) float64 {
	m := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(name+"{"+labels+"}") + ` (\S+)$`).FindStringSubmatch(metrics)
	if m == nil {
		return 0
	}
	v, _ := strconv.ParseFloat(m[1], 64)
	return v
}

// configDump is GET /config_dump with the admin token (beside the CA directory, in tools/).
func configDump(t *testing.T, caDir string) string {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(filepath.Dir(caDir), "tools", "admin.token"))
	if err != nil {
		t.Fatalf("the admin token: %v", err)
	}
	out := runT(t, 10*time.Second, nsAppliance, "curl", "-sf", "-H", "Authorization: Bearer "+strings.TrimSpace(string(raw)),
		credAdmin+"/config_dump")
	if !strings.Contains(out, `"credentials"`) {
		t.Fatalf("/config_dump has no credentials section:\n%s", out)
	}
	return out
}

// otlpCapture is an OTLP/HTTP receiver in mcpi-appliance that keeps every export body as sent
// (http/protobuf, uncompressed: a string is its bytes) and answers an empty response.
type otlpCapture struct {
	mu   sync.Mutex
	body []byte
}

func (c *otlpCapture) String() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return string(c.body)
}

func startOTLPCapture(t *testing.T) *otlpCapture {
	t.Helper()
	ln := listenInNS(t, nsAppliance, credOTLP)
	c := &otlpCapture{}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(io.LimitReader(r.Body, 64<<20))
		c.mu.Lock()
		c.body = append(c.body, b...)
		c.mu.Unlock()
		w.Header().Set("Content-Type", "application/x-protobuf")
		w.WriteHeader(http.StatusOK)
	})}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return c
}

// listenInNS opens a TCP listener inside a lab namespace (the socket stays there).
func listenInNS(t *testing.T, ns, addr string) net.Listener {
	t.Helper()
	return inNS(t, ns, func() (net.Listener, error) { return net.Listen("tcp", addr) })
}

const credTelemetry = `telemetry:
  otlp:
    endpoint: ` + credOTLP + `
    insecure: true
    sampling_ratio: 1
    interval: 200ms
`

// credFlow is the part of a flow-log record these tests read.
type credFlow struct {
	OrigDst          string `json:"orig_dst"`
	MCPMethod        string `json:"mcp_method"`
	MCPName          string `json:"mcp_name"`
	Direction        string `json:"direction"`
	Decision         string `json:"decision"`
	Rule             string `json:"rule"`
	Status           int    `json:"status"`
	Credential       string `json:"credential"`
	CredentialSource string `json:"credential_source"`
}

func credFlows(t *testing.T, log string) []credFlow {
	t.Helper()
	var out []credFlow
	for line := range strings.Lines(log) {
		if !strings.HasPrefix(line, "{") {
			continue
		}
		var f credFlow
		if err := json.Unmarshal([]byte(line), &f); err != nil {
			t.Fatalf("flow log line %q: %v", line, err)
		}
		out = append(out, f)
	}
	return out
}

// checkNoSecret fails when any of secrets (or, for a JWT, its signature alone) is in any output.
func checkNoSecret(t *testing.T, outputs map[string]string, secrets map[string]string) {
	t.Helper()
	for what, s := range secrets {
		needles := []string{s}
		if strings.Count(s, ".") == 2 {
			needles = append(needles, s[strings.LastIndexByte(s, '.')+1:])
		}
		for where, out := range outputs {
			for _, n := range needles {
				if strings.Contains(out, n) {
					t.Errorf("the %s appears in %s", what, where)
				}
			}
		}
	}
}

// waitTrace waits until the capture holds a span export naming the echo calls.
func waitTrace(t *testing.T, c *otlpCapture) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for !strings.Contains(c.String(), "tools/call echo") {
		if time.Now().After(deadline) {
			t.Fatalf("no span of the echo calls exported (%d bytes)", len(c.String()))
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// TestCredentialsInject (issue 35 acceptance, injection): the Go SDK server on 8095 requires a
// bearer token (-bearer-file); the route injects it from a 0600 file. The client in mcpi-client
// without any token succeeds through the appliance; the same client not steered (from
// mcpi-server, the server's own namespace) gets 401; the placeholder is replaced; another bearer
// token is refused by the appliance (401) and never reaches the server (its request log), and with
// other: strip it is removed and the call succeeds; a call the route's rules deny is recorded
// without a credential (none was added); the server on 8096, a destination no
// credentials route names, never gets an Authorization field; SIGHUP re-reads the token file
// (the server, which re-reads its own, accepts only the new token). The token is in no output:
// the flow log, the operational log, /metrics, /config_dump, the audit records, the spans.
func TestCredentialsInject(t *testing.T) {
	needLab(t)
	dir := t.TempDir()
	tokFile := filepath.Join(dir, "server.token")      // the appliance's
	srvTokFile := filepath.Join(dir, "expected.token") // the server's
	oldTok, newTok := "inj-"+randomHex(t, 20), "inj-"+randomHex(t, 20)
	writeSecret(t, tokFile, oldTok)
	writeSecret(t, srvTokFile, oldTok)
	credLog, otherLog := filepath.Join(dir, "8095.auth"), filepath.Join(dir, "8096.auth")
	credServer(t, "10.200.2.2:8095", "-bearer-file", srvTokFile, "-auth-log", credLog)
	credServer(t, "10.200.2.2:8096", "-auth-log", otherLog)
	traces := startOTLPCapture(t)

	caDir := filepath.Join(dir, "ca")
	auditDir := filepath.Join(dir, "audit")
	config := func(other string) string {
		cfg := tlsConfig(t, caDir)
		cfg = strings.Replace(cfg, `"3000-3014"`, `"3000-3014", "8095-8098"`, 1)
		cfg = strings.Replace(cfg, "routes:\n", fmt.Sprintf(`routes:
  - name: cred
    match: {destinations: [10.200.2.2/32], ports: [8095]}
    tls: plaintext
    level: 2
    development: true
    audit: true
    audit_arguments: true
    rule_set: lab-level2
    credentials:
      inject: {file: %s}
      placeholder: %s
      other: %s
  - name: cred-other
    match: {destinations: [10.200.2.2/32], ports: [8096]}
    tls: plaintext
    level: 2
    development: true
`, tokFile, credPlaceholder, other), 1)
		return cfg + "audit:\n  dir: " + auditDir + "\n" + credTelemetry
	}
	cfgPath := filepath.Join(dir, "mcpintercept.yaml")
	if err := os.WriteFile(cfgPath, []byte(config("refuse")), 0o644); err != nil {
		t.Fatal(err)
	}
	a := startApplianceFile(t, "nftables-tproxy", cfgPath)
	const url, otherURL = "http://10.200.2.2:8095/mcp", "http://10.200.2.2:8096/mcp"

	// Through the appliance without a token: injected. Not steered (from the server's own
	// namespace, no appliance on the path): 401. The server does take its token directly.
	mustCall(t, "no token, through the appliance", nsClient, url, "", "inject-ok")
	mustBeUnauthorized(t, "no token, direct", nsServer, url, "", "direct")
	mustCall(t, "the real token, direct", nsServer, url, oldTok, "direct-real")
	// The placeholder is replaced.
	mustCall(t, "the placeholder", nsClient, url, credPlaceholder, "placeholder-ok")
	// Another bearer token: refused by the appliance before anything reaches the server.
	before := len(authLogLines(t, credLog))
	mustBeUnauthorized(t, "another bearer token (other: refuse)", nsClient, url, "someone-elses-token", "other-refused")
	if got := authLogLines(t, credLog); len(got) != before {
		t.Errorf("a refused request reached the server: %q", got[before:])
	}
	// A call the route's rules deny goes nowhere and its record names no credential.
	if out, _, err := run(t.Context(), nsClient, bin("mcpclient"), "-url", url, "-tool", "denied_delete", "-args", `{"path":"/x"}`,
		"-protocol-version", credProtocol); err == nil && !strings.Contains(out, `"is_error":true`) {
		t.Errorf("denied_delete went through: %s", out)
	}
	// A destination the route does not name.
	mustCall(t, "the second server", nsClient, otherURL, "", "other-destination")
	mustCall(t, "the second server again", nsClient, otherURL, "", "other-destination-2")
	otherLines := authLogLines(t, otherLog)
	if len(otherLines) < 4 {
		t.Fatalf("the second server's request log: %q", otherLines)
	}
	for _, l := range otherLines {
		if !strings.HasSuffix(l, "authorization=absent") {
			t.Errorf("the second server got an Authorization field: %q", l)
		}
	}
	m := scrape(t)
	if v := metricValue(m, "mcpintercept_credentials_refused_total", `reason="other",route="cred"`); v < 1 {
		t.Errorf("no refusal of another credential counted:\n%s", grepLines(m, "credential"))
	}
	if v := metricValue(m, "mcpintercept_credentials_added_total", `credential="injected",route="cred"`); v < 6 {
		// Two runs through the appliance, each initialize, initialized, the GET stream, tools/call.
		t.Errorf("credentials_added_total %v, want at least 6:\n%s", v, grepLines(m, "credential"))
	}
	if strings.Contains(grepLines(m, "mcpintercept_credentials_added_total"), "cred-other") {
		t.Errorf("a credential counted on the route that names none:\n%s", grepLines(m, "credential"))
	}
	dump := configDump(t, caDir)

	// The token file changes: until SIGHUP the appliance keeps the one it read; after it, the
	// new one (the server now takes only the new one). With other: strip, another bearer token is
	// removed and the call succeeds.
	writeSecret(t, tokFile, newTok)
	writeSecret(t, srvTokFile, newTok)
	mustBeUnauthorized(t, "the old token before SIGHUP", nsClient, url, "", "before-sighup")
	if err := os.WriteFile(cfgPath, []byte(config("strip")), 0o644); err != nil {
		t.Fatal(err)
	}
	a.cmd.Process.Signal(syscall.SIGHUP)
	if err := a.waitFor("reloaded routes and rules", 20*time.Second); err != nil {
		t.Fatal(err)
	}
	mustCall(t, "no token after SIGHUP", nsClient, url, "", "after-sighup")
	mustCall(t, "another bearer token (other: strip)", nsClient, url, "someone-elses-token", "other-stripped")
	mustCall(t, "the placeholder after SIGHUP", nsClient, url, credPlaceholder, "placeholder-after")
	dump += configDump(t, caDir)
	m += scrape(t)

	a.stopGracefully(t)
	waitTrace(t, traces)
	log := a.stdout.String()
	var injected, otherRecs, denied int
	for _, f := range credFlows(t, log) {
		port := f.OrigDst[strings.LastIndexByte(f.OrigDst, ':')+1:]
		switch {
		case port == "8095" && f.MCPName == "denied_delete" && f.Direction == "client_to_server":
			denied++
			if f.Decision != "deny" || f.Credential != "" || f.CredentialSource != "" {
				t.Errorf("the denied call's record: %+v, want deny without a credential", f)
			}
		case port == "8096" && (f.Credential != "" || f.CredentialSource != ""):
			t.Errorf("a record of the second server names a credential: %+v", f)
		case port == "8096":
			otherRecs++
		case port == "8095" && f.Direction == "client_to_server" && f.MCPName == "echo" && f.Decision == "allow":
			injected++
			if f.Credential != "injected" || f.CredentialSource != "file:"+tokFile {
				t.Errorf("the echo call's record says credential %q source %q, want injected file:%s", f.Credential, f.CredentialSource, tokFile)
			}
		}
	}
	t.Logf("%d echo records with the injected credential, %d records of the second server, %d requests in its log, %d bytes of spans; metrics:\n%s",
		injected, otherRecs, len(otherLines), len(traces.String()), grepLines(m, "mcpintercept_credential"))
	if denied != 1 {
		t.Errorf("%d records of the denied call, want 1", denied)
	}
	if injected < 5 || otherRecs == 0 {
		t.Errorf("%d records of injected echo calls (want 5), %d of the second server:\n%s", injected, otherRecs, log)
	}
	if !strings.Contains(log, `"rule":"credentials"`) {
		t.Errorf("no record of the refused request:\n%s", log)
	}
	recs, _ := json.Marshal(auditShow(t, auditDir))
	if !strings.Contains(string(recs), "inject-ok") {
		t.Errorf("the audit records do not name the calls: %s", recs)
	}
	var raw strings.Builder
	filepath.WalkDir(auditDir, func(p string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			b, _ := os.ReadFile(p)
			raw.Write(b)
		}
		return nil
	})
	checkNoSecret(t, map[string]string{
		"flow log (stdout)": log, "operational log (stderr)": a.stderr.String(), "/metrics": m,
		"/config_dump": dump, "audit records": string(recs), "audit files": raw.String(), "spans": traces.String(),
	}, map[string]string{"injected token": oldTok, "token after SIGHUP": newTok})
}

// dexBin is bin/dex in the repository (scripts/deps.sh builds it with e2e/dex/build.sh).
func dexBin(t *testing.T) string {
	t.Helper()
	p := filepath.Join(repoRoot, "bin", "dex")
	if _, err := os.Stat(p); err != nil {
		t.Fatalf("Dex is not built (run `make deps`, which builds bin/dex with e2e/dex/build.sh): %v", err)
	}
	return p
}

// startDex renders e2e/dex/<tmpl> for ports a (Dex A) and b (this Dex B, or A itself) and token
// lifetime expiry, runs it in mcpi-server and waits until its discovery document answers.
func startDex(t *testing.T, tmpl string, a, b int, expiry, path string) *proc {
	t.Helper()
	src, err := os.ReadFile(filepath.Join(repoRoot, "e2e", "dex", tmpl))
	if err != nil {
		t.Fatal(err)
	}
	cfg := strings.NewReplacer("@HOST@", dexHost, "@PORT_A@", strconv.Itoa(a), "@PORT_B@", strconv.Itoa(b),
		"@EXPIRY@", expiry).Replace(string(src))
	file := filepath.Join(t.TempDir(), fmt.Sprintf("dex-%d.yaml", b))
	if err := os.WriteFile(file, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	p := startT(t, nsServer, dexBin(t), "serve", file)
	port := b
	if tmpl == "dex-a.yaml" {
		port = a
	}
	discovery := fmt.Sprintf("http://%s:%d%s/.well-known/openid-configuration", dexHost, port, path)
	deadline := time.Now().Add(60 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_, _, err := run(ctx, nsServer, "curl", "-sf", "-o", "/dev/null", discovery)
		cancel()
		if err == nil {
			return p
		}
		select {
		case <-p.done:
			t.Fatalf("dex (%s) exited: %v\n%s", tmpl, p.err, p.stderr)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("dex (%s) does not serve %s:\n%s", tmpl, discovery, p.stderr)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// dexIDToken is the client's own token: an id_token from Dex A (password grant, aud workload),
// asked for from mcpi-client.
func dexIDToken(t *testing.T) string {
	t.Helper()
	out := runT(t, 20*time.Second, nsClient, "curl", "-sf", "-u", "workload:workload-secret",
		fmt.Sprintf("http://%s:%d/dexa/token", dexHost, dexPortA), "-d", "grant_type=password",
		"-d", "username=alice@example.com", "-d", "password=password", "--data-urlencode", "scope=openid profile email")
	var r struct {
		IDToken string `json:"id_token"`
	}
	if err := json.Unmarshal([]byte(out), &r); err != nil || strings.Count(r.IDToken, ".") != 2 {
		t.Fatalf("Dex A's token answer: %v", err)
	}
	return r.IDToken
}

// rawInitialize posts one initialize to url from mcpi-client with Authorization: Bearer token and
// returns the HTTP status and body.
func rawInitialize(t *testing.T, url, token string) (int, string) {
	t.Helper()
	body := `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"` + credProtocol +
		`","capabilities":{},"clientInfo":{"name":"curl","version":"1"}}}`
	out := runT(t, 20*time.Second, nsClient, "curl", "-s", "-w", "\n%{http_code}", "-H", "Authorization: Bearer "+token,
		"-H", "Content-Type: application/json", "-H", "Accept: application/json, text/event-stream", "--data", body, url)
	i := strings.LastIndexByte(out, '\n')
	code, _ := strconv.Atoi(strings.TrimSpace(out[i+1:]))
	return code, out[:i]
}

// TestCredentialsExchange (issue 35 acceptance, token exchange against a real authorization
// server): Dex A is the workload's IdP (the client's id_token, aud workload); Dex B exchanges it
// (RFC 8693, oidc connector to Dex A) for a token with aud mcp-server, which the Go SDK server on
// 8097 requires (-jwks of Dex B). Through the appliance the client's token is exchanged and the
// call succeeds; directly the same token gets 401. A second call is served from the cache. The
// server revokes every token it accepted: the next call fails (the 401 passes through and drops
// the cached token), the following one succeeds with a new exchange. A garbage subject token is
// refused by Dex and the appliance answers 502 with JSON-RPC error -31008, nothing forwarded.
// Expiry: Dex B2 issues 20 s tokens for the server on 8098; calls go on succeeding and, once the
// first token is about to lapse, the appliance exchanges again. No token (nor the client secret)
// is in any output of the appliance.
func TestCredentialsExchange(t *testing.T) {
	needLab(t)
	dexBin(t)
	dir := t.TempDir()
	startDex(t, "dex-a.yaml", dexPortA, dexPortB, "1h", "/dexa")
	startDex(t, "dex-b.yaml", dexPortA, dexPortB, "1h", "/dexb")
	startDex(t, "dex-b.yaml", dexPortA, dexPortB2, "20s", "/dexb")
	issuer := func(port int) string { return fmt.Sprintf("http://%s:%d/dexb", dexHost, port) }
	log1, log2 := filepath.Join(dir, "8097.auth"), filepath.Join(dir, "8098.auth")
	credServer(t, "10.200.2.2:8097", "-jwks", issuer(dexPortB)+"/keys", "-issuer", issuer(dexPortB),
		"-audience", "mcp-server", "-control", "-auth-log", log1)
	short := credServer(t, "10.200.2.2:8098", "-jwks", issuer(dexPortB2)+"/keys", "-issuer", issuer(dexPortB2),
		"-audience", "mcp-server", "-auth-log", log2)
	const clientSecret = "mcpintercept-secret" // Dex B's client mcpintercept (e2e/dex/dex-b.yaml)
	secretFile := filepath.Join(dir, "client.secret")
	writeSecret(t, secretFile, clientSecret)
	traces := startOTLPCapture(t)

	caDir := filepath.Join(dir, "ca")
	route := func(name string, port, asPort int) string {
		return fmt.Sprintf(`  - name: %s
    match: {destinations: [10.200.2.2/32], ports: [%d]}
    tls: plaintext
    level: 2
    development: true
    token_audience: off
    credentials:
      exchange:
        token_endpoint: %s/token
        client_id: mcpintercept
        client_secret_file: %s
        subject_token_type: urn:ietf:params:oauth:token-type:id_token
        scope: "openid email profile audience:server:client_id:mcp-server"
        params: ["connector_id=upstream"]
`, name, port, issuer(asPort), secretFile)
	}
	cfg := tlsConfig(t, caDir)
	cfg = strings.Replace(cfg, `"3000-3014"`, `"3000-3014", "8095-8098"`, 1)
	cfg = strings.Replace(cfg, "routes:\n", "routes:\n"+route("cred-x", 8097, dexPortB)+route("cred-x-short", 8098, dexPortB2), 1)
	a := startAppliance(t, "nftables-tproxy", cfg+credTelemetry)
	const url, shortURL = "http://10.200.2.2:8097/mcp", "http://10.200.2.2:8098/mcp"
	series := func(m, name, labels string) float64 { return metricValue(m, name, labels) }
	exchanges := func(route, outcome string) float64 {
		return series(scrape(t), "mcpintercept_credential_exchanges_total", `outcome="`+outcome+`",route="`+route+`"`)
	}

	subject := dexIDToken(t)
	// Through the appliance: exchanged, accepted. Directly: the server's 401 (aud workload, Dex A).
	mustCall(t, "the client's token, through the appliance", nsClient, url, subject, "exchange-ok")
	mustBeUnauthorized(t, "the client's token, direct", nsServer, url, subject, "direct")
	if ok, cached := exchanges("cred-x", "ok"), exchanges("cred-x", "cached"); ok != 1 || cached < 1 {
		// One run is several requests (initialize, the GET stream, initialized, tools/call): one
		// exchange, the rest from the cache.
		t.Errorf("exchanges: ok %v (want 1), cached %v (want some)", ok, cached)
	}
	mustCall(t, "a second run", nsClient, url, subject, "exchange-cached")
	if ok := exchanges("cred-x", "ok"); ok != 1 {
		t.Errorf("the second run exchanged again (ok %v): the token was not cached", ok)
	}

	// Refresh on a 401: the server revokes what it accepted; the next run's first request gets the
	// 401 (passed through), which drops the cached token; the following run exchanges anew.
	runT(t, 10*time.Second, nsServer, "curl", "-sf", "-X", "POST", "http://10.200.2.2:8097/control/revoke")
	mustBeUnauthorized(t, "after revocation", nsClient, url, subject, "revoked")
	m := scrape(t)
	if v := series(m, "mcpintercept_credential_tokens_dropped_total", `route="cred-x"`); v != 1 {
		t.Errorf("tokens dropped %v, want 1:\n%s", v, grepLines(m, "credential"))
	}
	mustCall(t, "after the 401", nsClient, url, subject, "refreshed")
	if ok := exchanges("cred-x", "ok"); ok != 2 {
		t.Errorf("exchanges ok %v after the refresh, want 2", ok)
	}

	// A subject token Dex refuses: 502 with -31008, nothing reaches the server.
	before := len(authLogLines(t, log1))
	bad := "not-a-jwt-" + randomHex(t, 16)
	code, body := rawInitialize(t, url, bad)
	var rpc struct {
		ID    any `json:"id"`
		Error struct {
			Code    int    `json:"code"`
			Message string `json:"message"`
		} `json:"error"`
	}
	if err := json.Unmarshal([]byte(body), &rpc); err != nil || code != http.StatusBadGateway || rpc.Error.Code != -31008 {
		t.Errorf("a garbage subject token: HTTP %d %s (%v), want 502 and JSON-RPC error -31008", code, body, err)
	}
	if got := authLogLines(t, log1); len(got) != before {
		t.Errorf("a request whose exchange failed reached the server: %q", got[before:])
	}
	if v := exchanges("cred-x", "error"); v < 1 {
		t.Errorf("no failed exchange counted")
	}

	// Expiry: Dex B2's tokens last 20 s. Calls keep succeeding; the appliance exchanges again
	// once the first token nears its end (waited for, bounded; never a time asserted).
	mustCall(t, "short-lived, first", nsClient, shortURL, subject, "short-0")
	if ok := exchanges("cred-x-short", "ok"); ok != 1 {
		t.Fatalf("short-lived route: %v exchanges, want 1", ok)
	}
	deadline := time.Now().Add(3 * time.Minute)
	for i := 1; exchanges("cred-x-short", "ok") < 2; i++ {
		if time.Now().After(deadline) {
			t.Fatalf("no new exchange after the 20 s token lapsed:\n%s", grepLines(scrape(t), "credential"))
		}
		mustCall(t, "short-lived, again", nsClient, shortURL, subject, fmt.Sprintf("short-%d", i))
		time.Sleep(time.Second)
	}
	mustCall(t, "short-lived, with the new token", nsClient, shortURL, subject, "short-renewed")
	if strings.Contains(short.stderr.String(), "auth refused") {
		t.Errorf("the short-lived server refused a token the appliance sent:\n%s", grepLines(short.stderr.String(), "auth refused"))
	}

	m = scrape(t)
	if v := series(m, "mcpintercept_credentials_added_total", `credential="exchanged",route="cred-x"`); v < 1 {
		t.Errorf("no exchanged credential counted:\n%s", grepLines(m, "credential"))
	}
	dump := configDump(t, caDir)
	a.stopGracefully(t)
	waitTrace(t, traces)
	log := a.stdout.String()
	var recs, failed int
	for _, f := range credFlows(t, log) {
		if strings.HasSuffix(f.OrigDst, ":8097") && f.Status == http.StatusBadGateway {
			failed++
			if f.Rule != "credentials" || f.Decision != "deny" || f.Credential != "" {
				t.Errorf("the record of the request whose exchange failed: %+v, want deny by credentials, no credential", f)
			}
		}
		if f.Direction == "client_to_server" && f.MCPName == "echo" && f.Decision == "allow" {
			recs++
			want := issuer(dexPortB) + "/token"
			if strings.HasSuffix(f.OrigDst, ":8098") {
				want = issuer(dexPortB2) + "/token"
			}
			if f.Credential != "exchanged" || f.CredentialSource != want {
				t.Errorf("the echo call's record says credential %q source %q, want exchanged %s", f.Credential, f.CredentialSource, want)
			}
		}
	}
	t.Logf("%d echo records with an exchanged credential, %d bytes of spans; metrics:\n%s", recs, len(traces.String()),
		grepLines(m, "mcpintercept_credential"))
	if failed != 1 {
		t.Errorf("%d records of the request whose exchange failed (rule credentials, 502), want 1:\n%s", failed, log)
	}
	if recs < 5 {
		t.Errorf("%d records of echo calls with an exchanged token:\n%s", recs, log)
	}
	outputs := map[string]string{"flow log (stdout)": log, "operational log (stderr)": a.stderr.String(),
		"/metrics": m, "/config_dump": dump, "spans": traces.String()}
	checkNoSecret(t, outputs, map[string]string{"subject token": subject, "garbage subject token": bad,
		"client secret": clientSecret})
	// The exchanged tokens are Dex JWTs the test never sees: no JWT at all may appear.
	for where, out := range outputs {
		if strings.Contains(out, "eyJhbGciOi") {
			t.Errorf("a JWT appears in %s", where)
		}
	}
}
