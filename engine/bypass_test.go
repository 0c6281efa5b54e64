package engine

import (
	"bufio"
	"crypto/tls"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"mcpintercept/level1"
	"mcpintercept/policy"
	"mcpintercept/stage"
	"mcpintercept/tlsmitm"
)

// Tests for issue 8 (Level 1 cannot be bypassed), engine side: cases 4, 5, 6 and 11.

func compileSet(t *testing.T, specs ...policy.RuleSpec) RuleSet {
	t.Helper()
	s, err := policy.Compile(specs)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func tenantRule(name, tenant string) policy.RuleSpec {
	return policy.RuleSpec{Name: name, When: `http.headers["x-tenant"] == "` + tenant + `"`, Action: policy.RuleDeny}
}

// httpConn is one keep-alive client connection.
type httpConn struct {
	t    *testing.T
	c    net.Conn
	br   *bufio.Reader
	host string // the Host header sent
	body string // sent after the head by the next do, then cleared
}

func (h *httpConn) doBody(head, body string, headers ...string) int {
	h.t.Helper()
	h.body = body
	defer func() { h.body = "" }()
	return h.do(head, headers...)
}

func dialHTTP(t *testing.T, addr string) *httpConn {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return &httpConn{t: t, c: c, br: bufio.NewReader(c), host: "mcp.test"}
}

// get sends one GET with the extra header lines and returns the status.
func (h *httpConn) get(headers ...string) int {
	h.t.Helper()
	return h.do("GET / HTTP/1.1\r\nHost: "+h.host+"\r\n", headers...)
}

// do sends the request line and headers given, then the extra header lines, and returns the
// status.
func (h *httpConn) do(head string, headers ...string) int {
	h.t.Helper()
	h.c.SetDeadline(time.Now().Add(5 * time.Second))
	req := head
	for _, l := range headers {
		req += l + "\r\n"
	}
	if _, err := io.WriteString(h.c, req+"\r\n"+h.body); err != nil {
		h.t.Fatalf("write: %v", err)
	}
	resp, err := http.ReadResponse(h.br, nil)
	if err != nil {
		h.t.Fatalf("response: %v", err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode
}

func okServer(t *testing.T) string {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") }))
	t.Cleanup(srv.Close)
	return strings.TrimPrefix(srv.URL, "http://")
}

// TestReloadKeepsRuleSetOfOpenFlows (case 4): "Reload: open flows keep the compiled rule set they
// started with, or fail closed; never open." A reload that renames or removes the rule set of an
// open keep-alive flow's route leaves that flow with the rules it started with; a reload that
// changes the set in place applies to the flow's next request.
func TestReloadKeepsRuleSetOfOpenFlows(t *testing.T) {
	up := okServer(t)
	route := func(set string) *Route {
		return &Route{Name: "l1", TLS: Plaintext, Level: 1, Development: true, RuleSet: set}
	}
	tests := []struct {
		name   string
		reload func(t *testing.T) *Routing
		// header → status on the open flow after the reload
		want map[string]int
	}{
		{"set renamed", func(t *testing.T) *Routing {
			return &Routing{Routes: []*Route{route("renamed")},
				RuleSets: map[string]RuleSet{"renamed": compileSet(t, tenantRule("no-blocked", "blocked"))}}
		}, map[string]int{"blocked": 403, "ok": 200}},
		{"set removed", func(t *testing.T) *Routing {
			return &Routing{Routes: []*Route{route("")}}
		}, map[string]int{"blocked": 403, "ok": 200}},
		{"routes removed", func(t *testing.T) *Routing { return &Routing{} }, map[string]int{"blocked": 403}},
		{"set changed in place", func(t *testing.T) *Routing {
			return &Routing{Routes: []*Route{route("r")},
				RuleSets: map[string]RuleSet{"r": compileSet(t, tenantRule("no-other", "other"))}}
		}, map[string]int{"blocked": 200, "other": 403}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newRoutedHarness(t, up, Limits{}, &Routing{Routes: []*Route{route("r")},
				RuleSets: map[string]RuleSet{"r": compileSet(t, tenantRule("no-blocked", "blocked"))}})
			c := dialHTTP(t, h.addr)
			if s := c.get("X-Tenant: blocked"); s != 403 {
				t.Fatalf("before the reload: %d, want 403", s)
			}
			h.eng.SetRouting(tt.reload(t))
			for tenant, want := range tt.want {
				if s := c.get("X-Tenant: " + tenant); s != want {
					t.Fatalf("tenant %s after the reload, same connection: %d, want %d", tenant, s, want)
				}
			}
		})
	}
}

// TestMissingRuleSetFailsClosed: a route naming a rule set the table does not have denies rather
// than allowing everything.
func TestMissingRuleSetFailsClosed(t *testing.T) {
	h := newRoutedHarness(t, okServer(t), Limits{}, &Routing{
		Routes: []*Route{{Name: "l1", TLS: Plaintext, Level: 1, Development: true, RuleSet: "typo"}}})
	if s := dialHTTP(t, h.addr).get(); s != 403 {
		t.Fatalf("status %d, want 403", s)
	}
}

// TestDefaultRouteClose (case 5/6): `default_route: close` resets the flows no route matches and
// logs them.
func TestDefaultRouteClose(t *testing.T) {
	var got atomic.Int64
	up := upstreamServer(t, func(c *net.TCPConn) { n, _ := io.Copy(io.Discard, c); got.Add(n) })
	h := newRoutedHarness(t, up, Limits{}, &Routing{
		Routes:       []*Route{{Name: "elsewhere", Ports: []PortRange{{From: 1, To: 1}}, TLS: Plaintext, Level: 1}},
		DefaultClose: true})
	// The reset can arrive before connect(2) returns: the flow is closed before a byte is read.
	expectReset(t, h.addr)
	rec := h.sink.next(t)
	if rec.Decision != "deny" || rec.Reason != ReasonNoRoute {
		t.Fatalf("record %+v: want deny, %q", rec, ReasonNoRoute)
	}
	if got.Load() != 0 {
		t.Fatalf("the upstream received %d bytes", got.Load())
	}
	if v := testutil.ToFloat64(h.metrics.FlowsRefused.WithLabelValues("no_route")); v != 1 {
		t.Fatalf("refused metric %v", v)
	}
}

// tlsUpstream is an HTTPS server on loopback with a certificate of pki's for the SNI it is asked
// for (the IP when there is none).
func tlsUpstream(t *testing.T, p *testPKI) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") }),
		TLSConfig: &tls.Config{GetCertificate: func(hi *tls.ClientHelloInfo) (*tls.Certificate, error) {
			name := hi.ServerName
			if name == "" {
				name = "127.0.0.1"
			}
			return p.Leaf(name)
		}},
	}
	go srv.ServeTLS(ln, "", "")
	t.Cleanup(func() { srv.Close() })
	return ln.Addr().String()
}

func withTestCA(p *testPKI) func(*Options) {
	return func(o *Options) {
		o.TLS.Leaves = p
		o.TLS.Upstream = tlsmitm.OriginateConfig{Roots: p.pool, HandshakeTimeout: 5 * time.Second}
	}
}

// dialTLSHTTP connects with TLS; serverName "" or an IP sends no SNI.
func dialTLSHTTP(t *testing.T, addr, serverName string, p *testPKI) *httpConn {
	t.Helper()
	c, err := tls.Dial("tcp", addr, &tls.Config{ServerName: serverName, RootCAs: p.pool})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return &httpConn{t: t, c: c, br: bufio.NewReader(c), host: serverName}
}

// TestDefaultRouteServesUnmatchedTLS (case 6): a client that omits SNI, or sends one that matches
// no route, gets the configured default route (here terminate + Level 1 with a deny-all set)
// instead of the opaque one that skipped every rule.
func TestDefaultRouteServesUnmatchedTLS(t *testing.T) {
	p := newTestPKI(t)
	up := tlsUpstream(t, p)
	rt := &Routing{
		Routes: []*Route{{Name: "sni-mcp", SNI: []string{"mcp.test"}, TLS: Terminate, Level: 1,
			RuleSet: "tenant"}},
		RuleSets: map[string]RuleSet{"deny": denyAll(t), "tenant": compileSet(t, tenantRule("no-blocked", "blocked"))},
		Default:  &Route{Name: "default", TLS: Terminate, Level: 1, RuleSet: "deny"},
	}
	h := newHarnessWith(t, up, Limits{}, rt, withTestCA(p))
	tests := []struct {
		name, serverName string
		want             int
		rule             string
	}{
		{"sni route", "mcp.test", 200, ""},
		{"no sni", "127.0.0.1", 403, "deny-all"},
		{"unrouted sni", "other.test", 403, "deny-all"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := dialTLSHTTP(t, h.addr, tt.serverName, p)
			if s := c.get("X-Tenant: ok"); s != tt.want {
				t.Fatalf("status %d, want %d", s, tt.want)
			}
			if rec := h.sink.next(t); rec.Rule != tt.rule || rec.Level != 1 || rec.TLS != "terminate" {
				t.Fatalf("record %+v: want rule %q at level 1, terminate", rec, tt.rule)
			}
		})
	}
}

// TestDefaultRoutePlaintext: a default route with Level 1 reads plaintext flows no route matches.
func TestDefaultRoutePlaintext(t *testing.T) {
	h := newRoutedHarness(t, okServer(t), Limits{}, &Routing{
		RuleSets: map[string]RuleSet{"tenant": compileSet(t, tenantRule("no-blocked", "blocked"))},
		Default:  &Route{Name: "default", TLS: Plaintext, Level: 1, Development: true, RuleSet: "tenant"}})
	c := dialHTTP(t, h.addr)
	if s := c.get("X-Tenant: ok"); s != 200 {
		t.Fatalf("ok tenant: %d", s)
	}
	if s := c.get("X-Tenant: blocked"); s != 403 {
		t.Fatalf("blocked tenant: %d, want 403", s)
	}
}

// TestPlaintextOnTerminateRouteCloses (case 5): a plaintext request to a terminate + Level 1 route
// whose on_mismatch is left unset is closed, not forwarded opaque at level 0 past the rules.
func TestPlaintextOnTerminateRouteCloses(t *testing.T) {
	var got atomic.Int64
	up := upstreamServer(t, func(c *net.TCPConn) { n, _ := io.Copy(io.Discard, c); got.Add(n) })
	for _, d := range []Disposition{Terminate, Passthrough} {
		t.Run(string(d), func(t *testing.T) {
			// A header rule: only Level 1 can apply it, so bytes forwarded opaque skip it.
			h := newRoutedHarness(t, up, Limits{}, &Routing{
				Routes:   []*Route{{Name: "r", TLS: d, Level: 1, RuleSet: "tenant"}},
				RuleSets: map[string]RuleSet{"tenant": compileSet(t, tenantRule("no-blocked", "blocked"))}})
			c, err := net.Dial("tcp", h.addr)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			io.WriteString(c, "POST /mcp HTTP/1.1\r\nHost: x\r\nX-Tenant: blocked\r\nContent-Length: 0\r\n\r\n")
			rec := h.sink.next(t)
			if rec.Decision != "deny" || !strings.Contains(rec.Reason, "on_mismatch close") {
				t.Fatalf("record %+v: want the flow closed by on_mismatch", rec)
			}
			if got.Load() != 0 {
				t.Fatalf("the upstream received %d bytes", got.Load())
			}
		})
	}
}

// TestRuleErrorFailClosedOrOpen (case 11): a rule that fails at run time decides deny on a route
// with on_rule_error closed (the default), is skipped with open, and is counted either way.
func TestRuleErrorFailClosedOrOpen(t *testing.T) {
	for _, tt := range []struct {
		onErr string
		want  int
	}{{"", 403}, {"closed", 403}, {"open", 200}} {
		t.Run("on_rule_error="+tt.onErr, func(t *testing.T) {
			set := compileSet(t, policy.RuleSpec{Name: "big-n", When: `int(http.headers["x-n"]) > 5`, Action: policy.RuleDeny})
			h := newRoutedHarness(t, okServer(t), Limits{}, &Routing{
				Routes:   []*Route{{Name: "l1", TLS: Plaintext, Level: 1, Development: true, RuleSet: "r", OnRuleError: tt.onErr}},
				RuleSets: map[string]RuleSet{"r": set}})
			if s := dialHTTP(t, h.addr).get("X-N: abc"); s != tt.want {
				t.Fatalf("status %d, want %d", s, tt.want)
			}
			rec := h.sink.next(t)
			if tt.want == 403 && (rec.Rule != "big-n" || !strings.Contains(rec.Reason, "big-n")) {
				t.Fatalf("record %+v: want the erroring rule named", rec)
			}
			if v := testutil.ToFloat64(h.metrics.RuleErrors.WithLabelValues("r", "big-n")); v != 1 {
				t.Fatalf("rule errors metric %v, want 1", v)
			}
		})
	}
}

// TestHostMustMatchSNI (case 6): on a terminate route the Host header is tied to the SNI the
// route was chosen by, or to the destination when the client sent none: another host gets 421.
func TestHostMustMatchSNI(t *testing.T) {
	p := newTestPKI(t)
	up := tlsUpstream(t, p)
	h := newHarnessWith(t, up, Limits{}, &Routing{Routes: []*Route{{Name: "t", TLS: Terminate, Level: 1}}}, withTestCA(p))
	tests := []struct {
		name, serverName, host string
		want                   int
	}{
		{"host is the sni", "mcp.test", "mcp.test", 200},
		{"host with port", "mcp.test", "mcp.test:443", 200},
		{"another host", "mcp.test", "admin.internal", 421},
		{"no sni, host is the destination", "127.0.0.1", "127.0.0.1", 200},
		{"no sni, a name", "127.0.0.1", "mcp.test", 421},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := dialTLSHTTP(t, h.addr, tt.serverName, p)
			c.host = tt.host
			if s := c.get(); s != tt.want {
				t.Fatalf("status %d, want %d", s, tt.want)
			}
		})
	}
}

// TestRouteLevel1Options: the route's strict_mcp_headers and allow_upgrade reach level1.
func TestRouteLevel1Options(t *testing.T) {
	up := okServer(t)
	jsonPost := "POST /mcp HTTP/1.1\r\nHost: mcp.test\r\nContent-Type: application/json\r\nContent-Length: 2\r\n"
	tests := []struct {
		name  string
		route Route
		head  string
		extra []string
		want  int
	}{
		{"strict, no Mcp-Method", Route{Stages: stage.Options{level1.ClassifyName: &level1.RouteOptions{StrictMCPHeaders: true}}}, jsonPost, nil, 400},
		{"not strict, no Mcp-Method", Route{}, jsonPost, nil, 200},
		{"upgrade not allowed", Route{}, "GET / HTTP/1.1\r\nHost: mcp.test\r\n", []string{"Connection: Upgrade", "Upgrade: websocket"}, 403},
		{"upgrade allowed", Route{Stages: stage.Options{level1.ClassifyName: &level1.RouteOptions{AllowUpgrade: []string{"websocket"}}}}, "GET / HTTP/1.1\r\nHost: mcp.test\r\n", []string{"Connection: Upgrade", "Upgrade: websocket"}, 200},
		// http_methods: a method the route does not list is refused before the server sees it.
		{"method listed", Route{Stages: stage.Options{level1.ClassifyName: &level1.RouteOptions{HTTPMethods: []string{"POST", "GET"}}}}, "GET / HTTP/1.1\r\nHost: mcp.test\r\n", nil, 200},
		{"method not listed", Route{Stages: stage.Options{level1.ClassifyName: &level1.RouteOptions{HTTPMethods: []string{"POST", "GET"}}}}, "DELETE / HTTP/1.1\r\nHost: mcp.test\r\n", nil, 403},
		{"methods unset", Route{}, "DELETE / HTTP/1.1\r\nHost: mcp.test\r\n", nil, 200},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := tt.route
			r.Name, r.TLS, r.Level, r.Development = "l1", Plaintext, 1, true
			h := newRoutedHarness(t, up, Limits{}, &Routing{Routes: []*Route{&r}})
			c := dialHTTP(t, h.addr)
			head := tt.head
			if strings.HasPrefix(head, "POST") {
				// the body goes after the blank line do writes
				if s := c.doBody(head, "{}", tt.extra...); s != tt.want {
					t.Fatalf("status %d, want %d", s, tt.want)
				}
				return
			}
			if s := c.do(head, tt.extra...); s != tt.want {
				t.Fatalf("status %d, want %d", s, tt.want)
			}
		})
	}
}
