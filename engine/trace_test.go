package engine

import (
	"encoding/hex"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"

	"mcpintercept/audit/auditstage"
	"mcpintercept/chain"
	"mcpintercept/policy"
	"mcpintercept/stage"
	"mcpintercept/telemetry"
	"mcpintercept/tracing"
	"mcpintercept/tracing/tracestage"
	"mcpintercept/tracing/tracingtest"
)

type otlpReceiver = tracingtest.Receiver

var newOTLPReceiver = tracingtest.New

// tracedHarness runs an engine with rt whose tracer exports to a receiver.
func tracedHarness(t *testing.T, up string, rt *Routing) (*harness, *tracing.Tracer, *otlpReceiver) {
	t.Helper()
	rc := newOTLPReceiver(t)
	tr := rc.Tracer(t)
	h := newHarnessWith(t, up, Limits{}, rt, func(o *Options) { withChain(o, chain.Deps{Tracer: tr}) })
	return h, tr, rc
}

func spanAttrs(s *tracepb.Span) map[string]string {
	m := map[string]string{}
	for _, a := range s.Attributes {
		switch v := a.Value.Value.(type) {
		case *commonpb.AnyValue_StringValue:
			m[a.Key] = v.StringValue
		case *commonpb.AnyValue_IntValue:
			m[a.Key] = fmt.Sprint(v.IntValue)
		}
	}
	return m
}

func sameSpan(rec telemetry.FlowRecord, s *tracepb.Span) bool {
	return rec.TraceID == hex.EncodeToString(s.TraceId) && rec.SpanID == hex.EncodeToString(s.SpanId)
}

const (
	clientTrace = "4bf92f3577b34da6a3ce929d0e0e4736"
	clientSpan  = "00f067aa0ba902b7"
)

// headerUpstream answers 200 and reports each request's traceparent.
func headerUpstream(t *testing.T) (string, chan string) {
	seen := make(chan string, 10)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		seen <- r.Header.Get("traceparent")
		io.WriteString(w, "ok")
	}))
	t.Cleanup(srv.Close)
	return strings.TrimPrefix(srv.URL, "http://"), seen
}

// Level 1: a span per HTTP request, named from the MCP headers, the client's traceparent its
// parent; with inject the server sees the appliance's span as the parent; the record names it.
func TestTraceLevel1Span(t *testing.T) {
	up, seen := headerUpstream(t)
	h, tr, rc := tracedHarness(t, up, &Routing{Routes: []*Route{{Name: "l1", TLS: Plaintext, Level: 1, Development: true, Stages: stage.Options{tracestage.Name: &tracestage.Options{Inject: true}}}}})
	c := dialHTTP(t, h.addr)
	c.body = "{}"
	if s := c.do("POST /mcp HTTP/1.1\r\nHost: mcp.test\r\n", "Content-Length: 2", "Mcp-Method: tools/call", "Mcp-Name: echo",
		"traceparent: 00-"+clientTrace+"-"+clientSpan+"-01"); s != 200 {
		t.Fatalf("status %d", s)
	}
	upTP := <-seen
	rec := h.sink.next(t)
	spans := rc.Flushed(t, tr)
	if len(spans) != 1 {
		t.Fatalf("%d spans, want 1", len(spans))
	}
	s := spans[0]
	a := spanAttrs(s)
	if s.Name != "tools/call echo" || s.Kind != tracepb.Span_SPAN_KIND_CLIENT || a["http.request.method"] != "POST" ||
		a["mcpintercept.route"] != "l1" || a["mcpintercept.tls"] != "plaintext" || a["client.address"] != "127.0.0.1" ||
		a["mcpintercept.decision"] != "allow" || a["rpc.response.status_code"] != "200" {
		t.Fatalf("span %q kind %v attrs %v", s.Name, s.Kind, a)
	}
	if hex.EncodeToString(s.TraceId) != clientTrace || hex.EncodeToString(s.ParentSpanId) != clientSpan {
		t.Fatalf("span %x parent %x, want a child of the client's", s.TraceId, s.ParentSpanId)
	}
	if want := "00-" + hex.EncodeToString(s.TraceId) + "-" + hex.EncodeToString(s.SpanId) + "-01"; upTP != want {
		t.Fatalf("upstream traceparent %q, want the appliance's span %q", upTP, want)
	}
	if !sameSpan(rec, s) {
		t.Fatalf("record %s/%s, span %x/%x", rec.TraceID, rec.SpanID, s.TraceId, s.SpanId)
	}
}

// A Level 1 denial is a span with error status and the rule; nothing reaches the server.
func TestTraceLevel1Denial(t *testing.T) {
	up, seen := headerUpstream(t)
	h, tr, rc := tracedHarness(t, up, &Routing{Routes: []*Route{{Name: "l1", TLS: Plaintext, Level: 1, Development: true, RuleSet: "d"}},
		RuleSets: map[string]RuleSet{"d": compileSet(t, policy.RuleSpec{Name: "deny-all", Action: policy.RuleDeny})}})
	if s := dialHTTP(t, h.addr).get(); s != 403 {
		t.Fatalf("status %d, want 403", s)
	}
	rec := h.sink.next(t)
	spans := rc.Flushed(t, tr)
	if len(spans) != 1 || len(seen) != 0 {
		t.Fatalf("%d spans, %d upstream requests", len(spans), len(seen))
	}
	s := spans[0]
	if a := spanAttrs(s); s.Status.GetCode() != tracepb.Status_STATUS_CODE_ERROR || a["mcpintercept.rule"] != "deny-all" || s.Name != "HTTP GET" {
		t.Fatalf("span %q status %v attrs %v", s.Name, s.Status, a)
	}
	if !sameSpan(rec, s) || rec.Decision != "deny" {
		t.Fatalf("record %+v, span %x/%x", rec, s.TraceId, s.SpanId)
	}
}

// An opaque flow is one connection span without a parent, named on its record.
func TestTraceConnectionSpan(t *testing.T) {
	up := upstreamServer(t, func(c *net.TCPConn) { io.Copy(c, c); c.Close() })
	h, tr, rc := tracedHarness(t, up, nil)
	c, err := net.Dial("tcp", h.addr)
	if err != nil {
		t.Fatal(err)
	}
	echo(t, c, "hello")
	c.Close()
	rec := h.sink.next(t)
	spans := rc.Flushed(t, tr)
	if len(spans) != 1 {
		t.Fatalf("%d spans, want 1", len(spans))
	}
	s := spans[0]
	if s.Name != "connection" || s.Kind != tracepb.Span_SPAN_KIND_INTERNAL || len(s.ParentSpanId) != 0 || spanAttrs(s)["client.address"] != "127.0.0.1" {
		t.Fatalf("span %q kind %v parent %x attrs %v", s.Name, s.Kind, s.ParentSpanId, spanAttrs(s))
	}
	if !sameSpan(rec, s) {
		t.Fatalf("record %+v, span %x/%x", rec, s.TraceId, s.SpanId)
	}
}

// Level 2 through the engine: the span has the flow's attributes (route, TLS, client, server),
// and the message record names it.
func TestTraceLevel2ThroughEngine(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"jsonrpc":"2.0","id":1,"result":{"content":[]}}`)
	}))
	t.Cleanup(srv.Close)
	up := strings.TrimPrefix(srv.URL, "http://")
	h, tr, rc := tracedHarness(t, up, &Routing{Routes: []*Route{{Name: "l2", TLS: Plaintext, Level: 2, Development: true}}})
	c := dialHTTP(t, h.addr)
	c.body = `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"echo","arguments":{}}}`
	if s := c.do("POST /mcp HTTP/1.1\r\nHost: mcp.test\r\n", fmt.Sprintf("Content-Length: %d", len(c.body)),
		"Content-Type: application/json", "Accept: application/json, text/event-stream"); s != 200 {
		t.Fatalf("status %d", s)
	}
	rec := h.sink.next(t)
	spans := rc.Flushed(t, tr)
	if len(spans) != 1 {
		t.Fatalf("%d spans, want 1", len(spans))
	}
	s := spans[0]
	a := spanAttrs(s)
	_, port, _ := net.SplitHostPort(up)
	if s.Name != "tools/call echo" || a["mcpintercept.route"] != "l2" || a["mcpintercept.tls"] != "plaintext" ||
		a["client.address"] != "127.0.0.1" || a["server.port"] != port || a["server.address"] != "127.0.0.1" {
		t.Fatalf("span %q attrs %v", s.Name, a)
	}
	if rec.Level != 2 || !sameSpan(rec, s) || a["mcpintercept.mechanism"] != rec.Mechanism {
		t.Fatalf("record %+v, span %x/%x", rec, s.TraceId, s.SpanId)
	}
}

// A Level 1 audited request: the authorization and its outcome carry the span's ids.
func TestTraceLevel1Audit(t *testing.T) {
	store := newFakeStore()
	up, _ := headerUpstream(t)
	h, tr, rc := tracedHarness(t, up, &Routing{Routes: []*Route{auditedRoute(&auditstage.Options{Store: store})}})
	if s := dialHTTP(t, h.addr).get(); s != 200 {
		t.Fatalf("status %d", s)
	}
	auth, out := store.next(t), store.next(t)
	h.sink.next(t)
	spans := rc.Flushed(t, tr)
	if len(spans) != 1 {
		t.Fatalf("%d spans", len(spans))
	}
	sid, tid := hex.EncodeToString(spans[0].SpanId), hex.EncodeToString(spans[0].TraceId)
	if auth.SpanID != sid || auth.TraceID != tid || out.SpanID != sid || out.TraceID != tid {
		t.Fatalf("audit %s/%s and %s/%s, span %s/%s", auth.TraceID, auth.SpanID, out.TraceID, out.SpanID, tid, sid)
	}
}

// Tracing off: no trace stage in the chain, no ids on records.
func TestTraceOff(t *testing.T) {
	up, _ := headerUpstream(t)
	h := newRoutedHarness(t, up, Limits{}, &Routing{Routes: []*Route{{Name: "l1", TLS: Plaintext, Level: 1, Development: true, Stages: stage.Options{tracestage.Name: &tracestage.Options{Inject: true}}}}})
	if s := dialHTTP(t, h.addr).get(); s != 200 {
		t.Fatalf("status %d", s)
	}
	if rec := h.sink.next(t); rec.TraceID != "" || rec.SpanID != "" {
		t.Fatalf("record with trace ids and tracing off: %+v", rec)
	}
	if s := tracestage.Factory(nil).New(&stage.Conn{Level: 1}); s != nil {
		t.Fatal("a trace stage with tracing off")
	}
}
