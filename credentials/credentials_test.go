package credentials

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"mcpintercept/exchange"
	"mcpintercept/policy"
	"mcpintercept/stage"
)

// upstream is the server behind the stages: it records what it received.
type upstream struct {
	mu    sync.Mutex
	authz []string // every request's Authorization fields, joined by "|"
	other []string // every request's X-Api-Key
	n     int
	deny  func(authz string) bool // 401 when true
	echo  bool                    // reflect Authorization in a header and the body
	plain bool                    // echo as text/plain
	gzip  bool                    // answer Content-Encoding: gzip
	ae    []string                // every request's Accept-Encoding
	names []string                // every field name received
}

func (u *upstream) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	io.Copy(io.Discard, r.Body)
	u.mu.Lock()
	a := strings.Join(r.Header.Values("Authorization"), "|")
	u.authz = append(u.authz, a)
	u.other = append(u.other, strings.Join(r.Header.Values("X-Api-Key"), "|"))
	u.n++
	for k := range r.Header {
		u.names = append(u.names, k)
	}
	u.ae = append(u.ae, r.Header.Get("Accept-Encoding"))
	deny := u.deny
	u.mu.Unlock()
	if deny != nil && deny(a) {
		w.WriteHeader(http.StatusUnauthorized)
		return
	}
	if u.gzip {
		w.Header().Set("Content-Encoding", "gzip")
		w.Write([]byte("\x1f\x8b"))
		return
	}
	if u.echo && u.plain {
		w.Header().Set("Content-Type", "text/plain")
		fmt.Fprintf(w, "debug: you sent %s\n", a)
		return
	}
	if u.echo {
		w.Header().Add("Set-Cookie", "a=1")
		w.Header().Add("Set-Cookie", "b="+strings.TrimPrefix(a, "Bearer "))
		w.Header().Set("X-Seen", "you sent "+a)
		json.NewEncoder(w).Encode(map[string]string{"authorization": a})
		return
	}
	w.Write([]byte("ok"))
}

func (u *upstream) last() (authz, apiKey string, n int) {
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.n == 0 {
		return "", "", 0
	}
	return u.authz[u.n-1], u.other[u.n-1], u.n
}

// seen is a stage between the two credentials stages: what every later stage, rule and record
// reads of the request.
type seen struct {
	exchange.Base
	mu     sync.Mutex
	authz  []string
	auth   []*policy.Auth
	body   bool
	bodies []string
	fields []string
}

// ResponseHead asks for the response body, as Level 2 does.
func (s *seen) ResponseHead(_ context.Context, x *exchange.Exchange) exchange.Result {
	s.respFields(x)
	if s.body {
		x.WantResponseBody(1<<20, exchange.OverflowClose)
	}
	return exchange.Continue
}

// respFields keeps what a later stage read of the response's fields.
func (s *seen) respFields(x *exchange.Exchange) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, h := range x.Resp.Headers {
		s.fields = append(s.fields, h.Name+": "+h.Value)
	}
}

// ResponseBody keeps what a later stage (Level 2, records) reads of the response.
func (s *seen) ResponseBody(_ context.Context, x *exchange.Exchange) exchange.Result {
	s.mu.Lock()
	s.bodies = append(s.bodies, string(x.ResponseBody()))
	s.mu.Unlock()
	return exchange.Continue
}

func (s *seen) RequestHead(_ context.Context, x *exchange.Exchange) exchange.Result {
	if s.body {
		x.WantRequestBody(1 << 20)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	var a []string
	for _, h := range x.Req.Headers {
		if strings.EqualFold(h.Name, "Authorization") || strings.EqualFold(h.Name, "X-Api-Key") {
			a = append(a, h.Value)
		}
	}
	s.authz = append(s.authz, strings.Join(a, "|"))
	s.auth = append(s.auth, policy.AuthFrom(x.Get(policy.AuthKey{})))
	return exchange.Continue
}

// rig runs the feature's two stages (with seen between them) in front of an upstream.
type rig struct {
	t    testing.TB
	up   *upstream
	seen *seen
	reg  *prometheus.Registry
	c    *http.Client
	conn *policy.Conn
	port uint16
}

func newRig(t testing.TB, o *Options, level int, wantBody bool) *rig {
	t.Helper()
	up := &upstream{}
	srv := httptest.NewServer(up)
	t.Cleanup(srv.Close)
	r := newRigTo(t, o, level, wantBody, srv.Listener.Addr().String())
	r.up = up
	return r
}

// benchStages leaves the observing stage out (the benchmark measures the feature alone).
var benchStages bool

// newRigTo is newRig in front of the server at addr.
func newRigTo(t testing.TB, o *Options, level int, wantBody bool, addr string) *rig {
	t.Helper()
	r := &rig{t: t, seen: &seen{body: wantBody}, reg: prometheus.NewRegistry(), conn: &policy.Conn{}}
	st := New(r.reg)
	dst := netip.MustParseAddrPort(addr)
	r.port = dst.Port()
	c := &stage.Conn{Route: "r", Level: level, TLS: "plaintext", Orig: dst, Options: stage.Options{Name: o}, ConnVars: r.conn}
	var stages []exchange.Stage
	switch {
	case o != nil && benchStages:
		stages = []exchange.Stage{st.Factory().New(c), st.OutFactory().New(c)}
	case o != nil:
		stages = []exchange.Stage{st.Factory().New(c), r.seen, st.OutFactory().New(c)}
	}
	r.c = &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		cl, pr := net.Pipe()
		up, err := net.Dial("tcp", addr)
		if err != nil {
			return nil, err
		}
		go func() {
			exchange.Serve(context.Background(), pr, up, stages, exchange.Options{}, nil)
			pr.Close()
			up.Close()
		}()
		return cl, nil
	}}}
	t.Cleanup(r.c.CloseIdleConnections)
	return r
}

// do sends one POST with the given headers and returns the status and body.
func (r *rig) do(headers ...string) (int, string) {
	r.t.Helper()
	req, _ := http.NewRequest(http.MethodPost, "http://mcp.test/mcp", strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"ping"}`))
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Add(headers[i], headers[i+1])
	}
	resp, err := r.c.Do(req)
	if err != nil {
		r.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func secretFile(t testing.TB, value string, mode os.FileMode) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "cred")
	if err := os.WriteFile(p, []byte(value+"\n"), mode); err != nil {
		t.Fatal(err)
	}
	return p
}

func injectOptions(t testing.TB, value string) *Options {
	s, err := LoadSecret(secretFile(t, value, 0o600))
	if err != nil {
		t.Fatal(err)
	}
	return &Options{Action: ActionInject, Header: "Authorization", Scheme: "Bearer", Source: "file:x",
		Placeholder: "sandbox-placeholder", Secret: s}
}

const realToken = "real-Token_123.abc"

func TestInjectReplacesPlaceholder(t *testing.T) {
	r := newRig(t, injectOptions(t, realToken), 1, false)
	for _, h := range [][]string{nil, {"Authorization", "Bearer sandbox-placeholder"}, {"Authorization", "bearer   sandbox-placeholder  "}} {
		if st, body := r.do(h...); st != 200 {
			t.Fatalf("%v: status %d %s", h, st, body)
		}
		got, _, _ := r.up.last()
		if got != "Bearer "+realToken {
			t.Fatalf("%v: upstream got Authorization %q, want the real token", h, got)
		}
	}
	// What every stage after the first saw: no credential at all, and auth.present false.
	for i, a := range r.seen.authz {
		if a != "" || r.seen.auth[i] == nil || r.seen.auth[i].Present {
			t.Fatalf("request %d: the stages saw Authorization %q, auth %+v", i, a, r.seen.auth[i])
		}
	}
	if r.conn.Credential != ActionInject {
		t.Fatalf("conn.credential = %q", r.conn.Credential)
	}
	if n := testutil.ToFloat64(must(r.reg, "mcpintercept_credentials_added_total")); n != 3 {
		t.Fatalf("added = %v, want 3", n)
	}
}

func must(reg *prometheus.Registry, name string) prometheus.Collector {
	return collector{reg, name}
}

// collector sums a family of reg for testutil.
type collector struct {
	reg  *prometheus.Registry
	name string
}

func (c collector) Describe(ch chan<- *prometheus.Desc) {}
func (c collector) Collect(ch chan<- prometheus.Metric) {
	mfs, _ := c.reg.Gather()
	var sum float64
	for _, mf := range mfs {
		if mf.GetName() == c.name {
			for _, m := range mf.GetMetric() {
				sum += m.GetCounter().GetValue()
			}
		}
	}
	ch <- prometheus.MustNewConstMetric(prometheus.NewDesc(c.name, "sum", nil, nil), prometheus.CounterValue, sum)
}

func TestOtherCredentialRefusedOrStripped(t *testing.T) {
	for _, strip := range []bool{false, true} {
		o := injectOptions(t, realToken)
		o.Strip = strip
		r := newRig(t, o, 2, false)
		cases := [][]string{
			{"Authorization", "Bearer the-workloads-own"},
			{"Authorization", "Basic dXNlcjpwYXNz"},
			{"Authorization", "Bearer sandbox-placeholder", "Authorization", "Bearer x"},
		}
		for _, h := range cases {
			_, _, before := r.up.last()
			st, body := r.do(h...)
			got, _, after := r.up.last()
			switch {
			case !strip && (st != 401 || after != before || !strings.Contains(body, "-31005") || !strings.Contains(body, "credentials.other")):
				t.Fatalf("refuse %v: status %d body %s, upstream requests %d -> %d", h, st, body, before, after)
			case strip && (st != 200 || got != "Bearer "+realToken):
				t.Fatalf("strip %v: status %d, upstream Authorization %q", h, st, got)
			}
		}
		if !strip && testutil.ToFloat64(must(r.reg, "mcpintercept_credentials_refused_total")) != float64(len(cases)) {
			t.Fatal("refusals not counted")
		}
	}
}

func TestInjectIntoAPIKeyHeader(t *testing.T) {
	s, _ := LoadSecret(secretFile(t, realToken, 0o600))
	o := &Options{Action: ActionInject, Header: "X-Api-Key", Source: "file:x", Placeholder: "ph", Strip: true, Secret: s}
	r := newRig(t, o, 1, false)
	if st, _ := r.do("X-Api-Key", "ph", "Authorization", "Bearer mine"); st != 200 {
		t.Fatalf("status %d", st)
	}
	authz, key, _ := r.up.last()
	if key != realToken || authz != "" {
		t.Fatalf("upstream X-Api-Key %q Authorization %q: want the real key and no Authorization (stripped)", key, authz)
	}
}

func TestDPoPAndQueryTokensRefused(t *testing.T) {
	r := newRig(t, injectOptions(t, realToken), 1, false)
	for _, h := range [][]string{{"DPoP", "eyJ0eXAiOiJkcG9wK2p3dCJ9.e30.sig"}, {"Authorization", "DPoP abc"}} {
		st, body := r.do(h...)
		if st != 401 || !strings.Contains(body, "DPoP") {
			t.Fatalf("%v: status %d body %q", h, st, body)
		}
	}
	req, _ := http.NewRequest(http.MethodGet, "http://mcp.test/mcp?access_token=abc", nil)
	resp, err := r.c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if _, _, n := r.up.last(); resp.StatusCode != 401 || n != 0 {
		t.Fatalf("query token: status %d, upstream saw %d requests", resp.StatusCode, n)
	}
}

// tokenEndpoint is an RFC 8693 endpoint for the tests (the e2e test runs Dex).
type tokenEndpoint struct {
	calls     atomic.Int64
	expiresIn int
	tokenType string
	status    int
	echo      bool // error_description echoes the subject token
	lastForm  atomic.Value
}

func (e *tokenEndpoint) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	n := e.calls.Add(1)
	r.ParseForm()
	e.lastForm.Store(r.PostForm)
	id, secret, ok := r.BasicAuth()
	if !ok || id != "mcpi" || secret != "s3cret" || r.PostForm.Get("grant_type") != GrantTokenExchange {
		w.WriteHeader(401)
		fmt.Fprint(w, `{"error":"invalid_client"}`)
		return
	}
	if e.status != 0 {
		w.WriteHeader(e.status)
		desc := "bad"
		if e.echo {
			desc = "subject " + r.PostForm.Get("subject_token") + " is not accepted"
		}
		json.NewEncoder(w).Encode(map[string]string{"error": "invalid_request", "error_description": desc})
		return
	}
	tt := e.tokenType
	if tt == "" {
		tt = "Bearer"
	}
	json.NewEncoder(w).Encode(map[string]any{"access_token": fmt.Sprintf("xch-%d-for-%s", n, r.PostForm.Get("subject_token")),
		"issued_token_type": "urn:ietf:params:oauth:token-type:access_token", "token_type": tt, "expires_in": e.expiresIn})
}

func exchangeRig(t *testing.T, ep *tokenEndpoint, now func() time.Time) *rig {
	srv := httptest.NewServer(ep)
	t.Cleanup(srv.Close)
	sec, _ := LoadSecret(secretFile(t, "s3cret", 0o600))
	ex := NewExchanger(ExchangeConfig{Endpoint: srv.URL + "/token", ClientID: "mcpi", ClientSecret: sec,
		Params: [][2]string{{"connector_id", "upstream"}}, Now: now})
	t.Cleanup(ex.Close)
	o := &Options{Action: ActionExchange, Header: "Authorization", Scheme: "Bearer", Source: srv.URL + "/token", Exchanger: ex}
	return newRig(t, o, 2, true)
}

func TestExchangeCachesUntilShortlyBeforeExpiry(t *testing.T) {
	ep := &tokenEndpoint{expiresIn: 100}
	clk := newFakeClock()
	r := exchangeRig(t, ep, clk.now)
	for i := 0; i < 3; i++ {
		if st, body := r.do("Authorization", "Bearer client-tok"); st != 200 {
			t.Fatalf("status %d %s", st, body)
		}
	}
	got, _, _ := r.up.last()
	if got != "Bearer xch-1-for-client-tok" || ep.calls.Load() != 1 {
		t.Fatalf("upstream got %q after %d exchanges: want one exchange, cached", got, ep.calls.Load())
	}
	form := ep.lastForm.Load().(url.Values)
	// The canonical URI on plaintext: the original destination's address and port, never the
	// client's Host (mcp.test here): the client must not choose the audience of its token.
	canon := fmt.Sprintf("http://127.0.0.1:%d/mcp", r.port)
	if form.Get("resource") != canon || form.Get("audience") != canon || form.Get("connector_id") != "upstream" {
		t.Fatalf("form %v: want resource and audience the canonical URI, and the configured params", form)
	}
	// The stages saw the client's own token (policy's auth), never the exchanged one.
	for _, a := range r.seen.authz {
		if a != "Bearer client-tok" {
			t.Fatalf("a stage saw %q", a)
		}
	}
	// 100 s of life (an opaque client token caps it at 5 min, more than that): used until 10 s
	// before (a tenth) — at 91 s it is asked again.
	clk.advance(89 * time.Second)
	r.do("Authorization", "Bearer client-tok")
	if ep.calls.Load() != 1 {
		t.Fatal("exchanged again before the margin")
	}
	clk.advance(2 * time.Second)
	r.do("Authorization", "Bearer client-tok")
	if got, _, _ := r.up.last(); ep.calls.Load() != 2 || got != "Bearer xch-2-for-client-tok" {
		t.Fatalf("after the margin: %d exchanges, upstream %q", ep.calls.Load(), got)
	}
	// Another client token is another exchange.
	r.do("Authorization", "Bearer other-client")
	if ep.calls.Load() != 3 {
		t.Fatal("a second subject shared the first's token")
	}
}

func TestExchangeNeverPastTheSubjectsExpiry(t *testing.T) {
	ep := &tokenEndpoint{expiresIn: 3600}
	clk := newFakeClock()
	r := exchangeRig(t, ep, clk.now)
	payload := base64.RawURLEncoding.EncodeToString([]byte(fmt.Sprintf(`{"exp":%d}`, clk.now().Add(60*time.Second).Unix())))
	subject := "eyJhbGciOiJSUzI1NiJ9." + payload + ".c2ln"
	r.do("Authorization", "Bearer "+subject)
	clk.advance(61 * time.Second)
	r.do("Authorization", "Bearer "+subject)
	if ep.calls.Load() != 2 {
		t.Fatalf("%d exchanges: the cached token outlived the client's own (exp in 60 s)", ep.calls.Load())
	}
}

func TestExchangeDroppedOn401(t *testing.T) {
	ep := &tokenEndpoint{expiresIn: 3600}
	r := exchangeRig(t, ep, nil)
	r.up.deny = func(a string) bool { return a == "Bearer xch-1-for-c" }
	if st, _ := r.do("Authorization", "Bearer c"); st != 401 {
		t.Fatalf("status %d, want the server's 401 passed on", st)
	}
	if st, _ := r.do("Authorization", "Bearer c"); st != 200 || ep.calls.Load() != 2 {
		t.Fatalf("after a 401: status %d, %d exchanges; want a fresh exchange", st, ep.calls.Load())
	}
	if testutil.ToFloat64(must(r.reg, "mcpintercept_credential_tokens_dropped_total")) != 1 {
		t.Fatal("drop not counted")
	}
}

func TestExchangeFailures(t *testing.T) {
	cases := []struct {
		name string
		ep   *tokenEndpoint
		want string
	}{
		{"refused", &tokenEndpoint{status: 400, echo: true}, "invalid_request"},
		{"dpop", &tokenEndpoint{tokenType: "DPoP", expiresIn: 60}, "DPoP-bound"},
		{"unknown type", &tokenEndpoint{tokenType: "MAC", expiresIn: 60}, "only Bearer"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := exchangeRig(t, tc.ep, nil)
			st, body := r.do("Authorization", "Bearer subject-SECRET-value")
			if st != 502 || !strings.Contains(body, "-31008") || !strings.Contains(body, tc.want) {
				t.Fatalf("status %d body %s", st, body)
			}
			if strings.Contains(body, "subject-SECRET-value") || strings.Contains(body, "s3cret") {
				t.Fatalf("the answer shows a credential: %s", body)
			}
			if _, _, n := r.up.last(); n != 0 {
				t.Fatal("forwarded without a credential")
			}
		})
	}
	t.Run("no subject", func(t *testing.T) {
		r := exchangeRig(t, &tokenEndpoint{expiresIn: 60}, nil)
		if st, _ := r.do(); st != 401 {
			t.Fatalf("status %d, want 401: nothing to exchange", st)
		}
	})
}

// A redirect from the token endpoint is not followed: it would carry the client's token and the
// secret elsewhere.
func TestExchangeRedirectNotFollowed(t *testing.T) {
	var elsewhere atomic.Int64
	other := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { elsewhere.Add(1) }))
	defer other.Close()
	red := httptest.NewServer(http.RedirectHandler(other.URL, http.StatusTemporaryRedirect))
	defer red.Close()
	sec, _ := LoadSecret(secretFile(t, "s3cret", 0o600))
	ex := NewExchanger(ExchangeConfig{Endpoint: red.URL, ClientID: "mcpi", ClientSecret: sec})
	if _, _, err := ex.Token(context.Background(), "subj", "https://mcp.test/mcp"); err == nil || elsewhere.Load() != 0 {
		t.Fatalf("err %v, redirect target asked %d times", err, elsewhere.Load())
	}
}

func TestLoadSecret(t *testing.T) {
	if _, err := LoadSecret(secretFile(t, "v", 0o644)); err == nil || !strings.Contains(err.Error(), "chmod 600") {
		t.Fatalf("a group-readable file: %v", err)
	}
	if _, err := LoadSecret(secretFile(t, "two\nlines", 0o600)); err == nil || strings.Contains(err.Error(), "two") {
		t.Fatalf("two lines: %v (must refuse, never show the content)", err)
	}
	if _, err := LoadSecret(secretFile(t, "   ", 0o600)); err == nil {
		t.Fatal("an empty credential loaded")
	}
	if _, err := LoadSecret(filepath.Join(t.TempDir(), "none")); err == nil {
		t.Fatal("a missing file loaded")
	}
	s, err := LoadSecret(secretFile(t, "  tok  ", 0o400))
	if v, _ := s.Value(); err != nil || v != "tok" {
		t.Fatalf("%q %v", v, err)
	}
}

// A server that reflects the credential (a header, the body) never shows it to the client.
func TestReflectedCredentialScrubbed(t *testing.T) {
	r := newRig(t, injectOptions(t, realToken), 2, true)
	r.up.echo = true
	req, _ := http.NewRequest(http.MethodPost, "http://mcp.test/mcp", strings.NewReader(`{}`))
	resp, err := r.c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if got, _, _ := r.up.last(); got != "Bearer "+realToken {
		t.Fatalf("upstream got %q", got)
	}
	if strings.Contains(string(b), realToken) || strings.Contains(resp.Header.Get("X-Seen"), realToken) {
		t.Fatalf("the client saw the credential: header %q body %s", resp.Header.Get("X-Seen"), b)
	}
	if !strings.Contains(string(b), scrubbed) || !strings.Contains(resp.Header.Get("X-Seen"), scrubbed) {
		t.Fatalf("no scrub marker: header %q body %s", resp.Header.Get("X-Seen"), b)
	}
	if n := testutil.ToFloat64(must(r.reg, "mcpintercept_credentials_scrubbed_total")); n != 2 {
		t.Fatalf("scrubbed = %v, want 2 (the head and the body)", n)
	}
	if c := resp.Header.Values("Set-Cookie"); len(c) != 2 || c[0] != "a=1" || c[1] != "b="+scrubbed {
		t.Fatalf("Set-Cookie %q: want both fields kept, the second scrubbed", c)
	}
	for _, f := range r.seen.fields {
		if strings.Contains(f, realToken) {
			t.Fatalf("a later stage read the credential in %q", f)
		}
	}
}

// A field spelled with '_' for '-' is the credential's to a CGI or WSGI server (HTTP_X_API_KEY):
// another credential, refused or stripped, never forwarded beside the real one.
func TestUnderscoreVariantIsAnotherCredential(t *testing.T) {
	s, _ := LoadSecret(secretFile(t, realToken, 0o600))
	o := &Options{Action: ActionInject, Header: "X-Api-Key", Source: "file:x", Secret: s}
	r := newRig(t, o, 1, false)
	if st, _ := r.do("X_Api_Key", "attacker"); st != 401 {
		t.Fatalf("status %d, want 401 (other: refuse)", st)
	}
	o.Strip = true
	r = newRig(t, o, 1, false)
	r.up.echo = false
	if st, _ := r.do("X_API_KEY", "attacker"); st != 200 {
		t.Fatalf("status %d", st)
	}
	if _, key, _ := r.up.last(); key != realToken {
		t.Fatalf("upstream X-Api-Key %q", key)
	}
	for _, n := range r.up.names {
		if strings.Contains(n, "_") {
			t.Fatalf("the upstream received %s: the variant was not stripped", n)
		}
	}
	if !sameField("x_api_key", "X-Api-Key") || sameField("X^Key", "X~Key") || sameField("X-Api-Keys", "X-Api-Key") {
		t.Fatal("sameField")
	}
}

// TestDifferentialWSGIUnderscore runs Python's own WSGI server (wsgiref): it reads X_Api_Key as
// X-Api-Key and joins them (HTTP_X_API_KEY "real,attacker"), so a client's underscore variant
// would reach the application beside the injected key. Through the stage it never does.
func TestDifferentialWSGIUnderscore(t *testing.T) {
	py, err := exec.LookPath("python3")
	if err != nil {
		t.Skip("python3 not installed")
	}
	const app = `import json, sys
from wsgiref.simple_server import make_server, WSGIRequestHandler
class Q(WSGIRequestHandler):
    def log_message(self, *a): pass
def app(environ, start):
    start('200 OK', [('Content-Type', 'application/json')])
    # reversed: what the application read, without handing the key back as it came
    return [json.dumps((environ.get('HTTP_X_API_KEY') or '')[::-1]).encode()]
srv = make_server('127.0.0.1', 0, app, handler_class=Q)
print(srv.server_port, flush=True)
srv.serve_forever()
`
	cmd := exec.Command(py, "-c", app)
	out, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	var port int
	if _, err := fmt.Fscan(out, &port); err != nil {
		t.Fatal(err)
	}
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	get := func(c *http.Client) string {
		req, _ := http.NewRequest(http.MethodPost, "http://"+addr+"/", strings.NewReader("{}"))
		req.Header["X-Api-Key"] = []string{"ph"}
		req.Header["X_Api_Key"] = []string{"attacker"}
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return strings.TrimSpace(string(b))
	}
	// The control: Python reads the variant as the same header.
	if got := get(http.DefaultClient); got != `"rekcatta,hp"` {
		t.Fatalf("wsgiref read %s; the premise (it joins X_Api_Key into HTTP_X_API_KEY) does not hold", got)
	}
	s, _ := LoadSecret(secretFile(t, realToken, 0o600))
	for _, strip := range []bool{true, false} {
		r := newRigTo(t, &Options{Action: ActionInject, Header: "X-Api-Key", Source: "file:x", Placeholder: "ph", Strip: strip, Secret: s}, 1, false, addr)
		req, _ := http.NewRequest(http.MethodPost, "http://"+addr+"/", strings.NewReader("{}"))
		req.Header["X-Api-Key"] = []string{"ph"}
		req.Header["X_Api_Key"] = []string{"attacker"}
		resp, err := r.c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		switch got := strings.TrimSpace(string(b)); {
		case strip && got != `"`+reverse(realToken)+`"`:
			t.Fatalf("strip: the application read %s, want the injected key alone", got)
		case !strip && (resp.StatusCode != 401 || strings.Contains(got, "attacker")):
			t.Fatalf("refuse: status %d, body %s", resp.StatusCode, got)
		}
	}
}

func reverse(s string) string {
	b := []byte(s)
	for i, j := 0, len(b)-1; i < j; i, j = i+1, j-1 {
		b[i], b[j] = b[j], b[i]
	}
	return string(b)
}

// At Level 1 too, and for a body Level 2 would not parse (text/plain), a reflected credential is
// taken out before any later stage reads the response, and before the client.
func TestReflectedInPlainBodyScrubbedFirst(t *testing.T) {
	for _, level := range []int{1, 2} {
		r := newRig(t, injectOptions(t, realToken), level, level == 2)
		r.up.echo, r.up.plain = true, true
		st, body := r.do("Accept-Encoding", "gzip")
		if st != 200 || strings.Contains(body, realToken) || !strings.Contains(body, scrubbed) {
			t.Fatalf("level %d: status %d body %q", level, st, body)
		}
		for _, b := range r.seen.bodies {
			if strings.Contains(b, realToken) {
				t.Fatalf("level %d: a later stage read the credential in %q", level, b)
			}
		}
		if ae := r.up.ae[len(r.up.ae)-1]; ae != "" {
			t.Fatalf("level %d: the server was sent Accept-Encoding %q: responses must come unencoded to be read", level, ae)
		}
	}
}

// A server that encodes its answer anyway cannot be read: the client gets nothing of it.
func TestEncodedResponseCutOff(t *testing.T) {
	r := newRig(t, injectOptions(t, realToken), 1, false)
	r.up.gzip = true
	req, _ := http.NewRequest(http.MethodPost, "http://mcp.test/mcp", strings.NewReader(`{}`))
	resp, err := r.c.Do(req)
	if err == nil {
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if len(b) > 0 {
			t.Fatalf("status %d, the client read %q of an encoded response", resp.StatusCode, b)
		}
	}
	if testutil.ToFloat64(must(r.reg, "mcpintercept_credentials_refused_total")) != 1 {
		t.Fatal("the cut-off was not counted")
	}
}

// An opaque client token's expiry cannot be read: its exchanged token is used at most 5 minutes,
// then the authorization server judges the client token again.
func TestExchangeOpaqueSubjectCapped(t *testing.T) {
	ep := &tokenEndpoint{expiresIn: 3600}
	clk := newFakeClock()
	r := exchangeRig(t, ep, clk.now)
	r.do("Authorization", "Bearer opaque-client-token")
	clk.advance(MaxOpaqueSubjectCache - time.Minute)
	r.do("Authorization", "Bearer opaque-client-token")
	if ep.calls.Load() != 1 {
		t.Fatal("exchanged again before the cap")
	}
	clk.advance(2 * time.Minute)
	r.do("Authorization", "Bearer opaque-client-token")
	if ep.calls.Load() != 2 {
		t.Fatalf("%d exchanges: the token for an opaque client token outlived the cap", ep.calls.Load())
	}
}

// fakeClock is the exchanger's clock in the tests: it moves only when told.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func newFakeClock() *fakeClock { return &fakeClock{t: time.Unix(1_800_000_000, 0)} }

func (c *fakeClock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) advance(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}
