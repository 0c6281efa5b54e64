package engine

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"mcpintercept/policy"
)

func shadowRules(t *testing.T) RuleSet {
	return compileSet(t,
		policy.RuleSpec{Name: "shadow-echo", When: `mcp.name == "echo"`, Action: policy.RuleDeny, Mode: policy.ModeShadow},
		policy.RuleSpec{Name: "deny-delete", When: `mcp.name == "delete"`, Action: policy.RuleDeny})
}

// A shadow deny at Level 1 and Level 2: the request reaches the server, the record says
// would_deny by the rule, the metric counts it; an enforced deny in the same set still denies.
func TestShadowDenyThroughEngine(t *testing.T) {
	for _, level := range []int{1, 2} {
		t.Run(fmt.Sprintf("level %d", level), func(t *testing.T) {
			var calls atomic.Int64
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				calls.Add(1)
				w.Header().Set("Content-Type", "application/json")
				io.WriteString(w, `{"jsonrpc":"2.0","id":1,"result":{"content":[]}}`)
			}))
			t.Cleanup(srv.Close)
			h := newRoutedHarness(t, strings.TrimPrefix(srv.URL, "http://"), Limits{}, &Routing{
				Routes:   []*Route{{Name: "r", TLS: Plaintext, Level: level, Development: true, RuleSet: "s"}},
				RuleSets: map[string]RuleSet{"s": shadowRules(t)}})
			c := dialHTTP(t, h.addr)
			call := func(tool string) (int, string, string) {
				c.body = `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"` + tool + `","arguments":{}}}`
				s := c.do("POST /mcp HTTP/1.1\r\nHost: mcp.test\r\n", fmt.Sprintf("Content-Length: %d", len(c.body)),
					"Content-Type: application/json", "Accept: application/json, text/event-stream",
					"Mcp-Method: tools/call", "Mcp-Name: "+tool, "MCP-Protocol-Version: 2026-07-28")
				rec := h.sink.next(t)
				return s, rec.Decision, rec.Reason
			}
			s, dec, reason := call("echo")
			if s != 200 || dec != "allow" || !strings.Contains(reason, "would_deny by shadow-echo (shadow)") || calls.Load() != 1 {
				t.Fatalf("echo: status %d, decision %s, reason %q, server calls %d", s, dec, reason, calls.Load())
			}
			if v := testutil.ToFloat64(h.eng.shadow.total.WithLabelValues("s", "shadow-echo", "deny")); v != 1 {
				t.Fatalf("shadow metric %v, want 1", v)
			}
			s, dec, reason = call("delete")
			if dec != "deny" || strings.Contains(reason, "would_") || calls.Load() != 1 {
				t.Fatalf("delete: status %d, decision %s, reason %q, server calls %d", s, dec, reason, calls.Load())
			}
			if v := testutil.ToFloat64(h.eng.shadow.total.WithLabelValues("s", "shadow-echo", "deny")); v != 1 {
				t.Fatalf("shadow metric after the enforced deny %v, want 1", v)
			}
		})
	}
}

// A shadow connection rule on an opaque route: the flow is forwarded, its record says would_deny.
func TestShadowConnectionRule(t *testing.T) {
	up := upstreamServer(t, func(c *net.TCPConn) { io.Copy(c, c); c.Close() })
	h := newRoutedHarness(t, up, Limits{}, &Routing{
		Routes: []*Route{{Name: "o", TLS: Plaintext, Level: 0, Development: true, RuleSet: "c"}},
		RuleSets: map[string]RuleSet{"c": compileSet(t,
			policy.RuleSpec{Name: "shadow-all", Action: policy.RuleDeny, Mode: policy.ModeShadow})}})
	c, err := net.Dial("tcp", h.addr)
	if err != nil {
		t.Fatal(err)
	}
	io.WriteString(c, "hello")
	buf := make([]byte, 5)
	if _, err := io.ReadFull(c, buf); err != nil {
		t.Fatalf("echo: %v", err)
	}
	c.Close()
	rec := h.sink.next(t)
	if rec.Decision != "allow" || !strings.Contains(rec.Reason, "would_deny by shadow-all (shadow)") {
		t.Fatalf("record %+v", rec)
	}
	if v := testutil.ToFloat64(h.eng.shadow.total.WithLabelValues("c", "shadow-all", "deny")); v != 1 {
		t.Fatalf("shadow metric %v, want 1", v)
	}
}
