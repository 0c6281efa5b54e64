package level2

import (
	"bufio"
	"bytes"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"

	"mcpintercept/exchange"
	"mcpintercept/mcp"
	"mcpintercept/policy"
	"mcpintercept/tracing"
	"mcpintercept/tracing/tracingtest"
)

type otlpReceiver = tracingtest.Receiver

var newOTLPReceiver = tracingtest.New

// openTracer is a real tracer exporting to r, every root sampled.
func openTracer(t *testing.T, r *otlpReceiver) *tracing.Tracer { return r.Tracer(t) }

func spanAttrs(s *tracepb.Span) map[string]string {
	m := map[string]string{}
	for _, a := range s.Attributes {
		switch v := a.Value.Value.(type) {
		case *commonpb.AnyValue_StringValue:
			m[a.Key] = v.StringValue
		case *commonpb.AnyValue_IntValue:
			m[a.Key] = fmt.Sprint(v.IntValue)
		case *commonpb.AnyValue_BoolValue:
			m[a.Key] = fmt.Sprint(v.BoolValue)
		}
	}
	return m
}

const (
	metaTrace   = "4bf92f3577b34da6a3ce929d0e0e4736"
	metaSpan    = "00f067aa0ba902b7"
	headerTrace = "0af7651916cd43dd8448eb211c80319c"
	headerSpan  = "b7ad6b7169203331"
)

func callWithMeta(id int, tool string) string {
	return fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":%q,"arguments":{"text":"hi"},`+
		`"_meta":{"progressToken":"p","traceparent":"00-%s-%s-01","tracestate":"vendor=x"}}}`, id, tool, metaTrace, metaSpan)
}

var headerTP = "traceparent: 00-" + headerTrace + "-" + headerSpan + "-01\r\n"

// traceHarness is a Level 2 harness whose flows trace into a real tracer exporting to r.
func traceHarness(t *testing.T, u *upstream, inject bool) (*harness, *tracing.Tracer, *otlpReceiver) {
	return traceHarnessRules(t, u, inject, denyRules)
}

func traceHarnessRules(t *testing.T, u *upstream, inject bool, rules []policy.RuleSpec) (*harness, *tracing.Tracer, *otlpReceiver) {
	r := newOTLPReceiver(t)
	tr := openTracer(t, r)
	h := newHarnessWith(t, u, rules, Options{}, NewSessions(0), func(f *Flow) {
		f.Tracer, f.TraceInject = tr, inject
		f.Trace = tracing.Call{Route: "lab", TLS: "plaintext", ServerAddress: "mcp.example", ServerPort: 443}
	})
	return h, tr, r
}

func recordOf(t *testing.T, h *harness, kind, id string) *Record {
	t.Helper()
	return h.awaitRecord(t, func(r *Record) bool { return r.Kind == kind && r.ID == id })
}

// A request gets one span, named and attributed per the MCP conventions, its parent the
// client's _meta.traceparent (over the header's); a notification gets none; the record names it.
func TestTraceSpanPerRequest(t *testing.T) {
	u := newUpstream(t, echoServer)
	h, tr, rc := traceHarness(t, u, false)
	if r := post(t, h.addr, jsonHeaders+headerTP, callWithMeta(5, "echo")); r.status != 200 {
		t.Fatalf("call: %d %s", r.status, r.body)
	}
	post(t, h.addr, jsonHeaders, `{"jsonrpc":"2.0","method":"notifications/initialized"}`)
	rec := recordOf(t, h, "request", "5")
	h.awaitRecord(t, func(r *Record) bool { return r.Kind == "notification" })
	spans := rc.Flushed(t, tr)
	if len(spans) != 1 {
		t.Fatalf("%d spans, want 1 (a request's; none for the notification)", len(spans))
	}
	s := spans[0]
	a := spanAttrs(s)
	if s.Name != "tools/call echo" || s.Kind != tracepb.Span_SPAN_KIND_CLIENT {
		t.Fatalf("span %q kind %v", s.Name, s.Kind)
	}
	for k, want := range map[string]string{"mcp.method.name": "tools/call", "gen_ai.tool.name": "echo",
		"jsonrpc.request.id": "5", "mcpintercept.decision": "allow", "mcpintercept.route": "lab",
		"mcpintercept.direction": ClientToServer, "server.address": "mcp.example"} {
		if a[k] != want {
			t.Errorf("%s = %q, want %q (all: %v)", k, a[k], want, a)
		}
	}
	if hex.EncodeToString(s.TraceId) != metaTrace || hex.EncodeToString(s.ParentSpanId) != metaSpan {
		t.Fatalf("parent %x/%x, want _meta's %s/%s", s.TraceId, s.ParentSpanId, metaTrace, metaSpan)
	}
	if rec.TraceID != hex.EncodeToString(s.TraceId) || rec.SpanID != hex.EncodeToString(s.SpanId) {
		t.Fatalf("record names %s/%s, the span is %x/%x", rec.TraceID, rec.SpanID, s.TraceId, s.SpanId)
	}
	if s.Status.GetCode() == tracepb.Status_STATUS_CODE_ERROR {
		t.Fatalf("allowed call with error status %v", s.Status)
	}
}

// Without _meta the header's traceparent is the parent.
func TestTraceParentFromHeader(t *testing.T) {
	u := newUpstream(t, echoServer)
	h, tr, rc := traceHarness(t, u, false)
	post(t, h.addr, jsonHeaders+headerTP, call(6, "echo", `{}`))
	recordOf(t, h, "request", "6")
	spans := rc.Flushed(t, tr)
	if len(spans) != 1 || hex.EncodeToString(spans[0].TraceId) != headerTrace || hex.EncodeToString(spans[0].ParentSpanId) != headerSpan {
		t.Fatalf("spans %v, want one child of the header's %s/%s", spans, headerTrace, headerSpan)
	}
}

// A denial is a span with error status and the rule; the record of the denial names it.
func TestTraceDenial(t *testing.T) {
	u := newUpstream(t, echoServer)
	h, tr, rc := traceHarness(t, u, false)
	r := post(t, h.addr, jsonHeaders, call(7, "denied_delete", `{}`))
	denial(t, r, "7", CodeDenied, "no-delete")
	rec := recordOf(t, h, "request", "7")
	spans := rc.Flushed(t, tr)
	if len(spans) != 1 {
		t.Fatalf("%d spans, want 1", len(spans))
	}
	s := spans[0]
	a := spanAttrs(s)
	if s.Status.GetCode() != tracepb.Status_STATUS_CODE_ERROR || a["mcpintercept.rule"] != "no-delete" || a["mcpintercept.decision"] != "deny" {
		t.Fatalf("denied span status %v attrs %v", s.Status, a)
	}
	if rec.SpanID != hex.EncodeToString(s.SpanId) {
		t.Fatalf("record span %s, span %x", rec.SpanID, s.SpanId)
	}
}

// A tools/call result with isError ends its span as a tool error.
func TestTraceToolError(t *testing.T) {
	u := newUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"jsonrpc":"2.0","id":8,"result":{"content":[],"isError":true}}`)
	})
	h, tr, rc := traceHarness(t, u, false)
	post(t, h.addr, jsonHeaders, call(8, "echo", `{}`))
	recordOf(t, h, "request", "8")
	spans := rc.Flushed(t, tr)
	if len(spans) != 1 || spanAttrs(spans[0])["error.type"] != "tool_error" {
		t.Fatalf("spans %v, want one with error.type tool_error", spans)
	}
}

// With inject, the server sees the appliance's span as the parent, in the header and in _meta,
// and the body it reads is valid JSON of the length it was told.
func TestTraceInject(t *testing.T) {
	type seen struct {
		header, state string
		body          []byte
		length        int64
	}
	got := make(chan seen, 1)
	u := newUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		got <- seen{r.Header.Get("traceparent"), r.Header.Get("tracestate"), b, r.ContentLength}
		echoServer(w, &http.Request{Body: io.NopCloser(bytes.NewReader(b))})
	})
	h, tr, rc := traceHarness(t, u, true)
	if r := post(t, h.addr, jsonHeaders+headerTP, callWithMeta(9, "echo")); r.status != 200 {
		t.Fatalf("call: %d %s", r.status, r.body)
	}
	sv := <-got
	spans := rc.Flushed(t, tr)
	if len(spans) != 1 {
		t.Fatalf("%d spans", len(spans))
	}
	want := "00-" + hex.EncodeToString(spans[0].TraceId) + "-" + hex.EncodeToString(spans[0].SpanId) + "-01"
	if sv.header != want || !strings.Contains(sv.state, "mcpi") || !strings.Contains(sv.state, "vendor=x") {
		t.Fatalf("server's traceparent %q tracestate %q, want %q with mcpi and the client's member", sv.header, sv.state, want)
	}
	if sv.length != int64(len(sv.body)) {
		t.Fatalf("Content-Length %d, body %d bytes", sv.length, len(sv.body))
	}
	m, err := mcp.DecodeMessage(sv.body, mcp.DecodeOptions{})
	if err != nil {
		t.Fatalf("server got invalid JSON-RPC %q: %v", sv.body, err)
	}
	meta, _ := m.Param("_meta")
	tp, _ := mcp.StringMember(meta, "traceparent")
	ts, _ := mcp.StringMember(meta, "tracestate")
	pt, _ := mcp.StringMember(meta, "progressToken")
	if tp != want || ts != sv.state || pt != "p" {
		t.Fatalf("_meta %s: traceparent %q tracestate %q, want %q, %q and the progress token kept", meta, tp, ts, want, sv.state)
	}
	var v map[string]any
	if json.Unmarshal(sv.body, &v) != nil {
		t.Fatalf("body %q not JSON", sv.body)
	}
}

// Without inject the server gets the client's bytes and headers.
func TestTraceRecordOnlyForwardsUnchanged(t *testing.T) {
	got := make(chan string, 1)
	u := newUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		got <- r.Header.Get("traceparent")
		echoServer(w, r)
	})
	h, tr, rc := traceHarness(t, u, false)
	body := callWithMeta(10, "echo")
	post(t, h.addr, jsonHeaders+headerTP, body)
	if tp := <-got; tp != "00-"+headerTrace+"-"+headerSpan+"-01" {
		t.Fatalf("server's traceparent %q changed", tp)
	}
	if b := u.last.Load().([]byte); string(b) != body {
		t.Fatalf("server got %q", b)
	}
	rc.Flushed(t, tr)
}

// A batch of two requests: a span each, nothing injected (one header cannot name two parents).
func TestTraceBatchNotInjected(t *testing.T) {
	got := make(chan string, 1)
	u := newUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		got <- r.Header.Get("traceparent")
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `[{"jsonrpc":"2.0","id":1,"result":{}},{"jsonrpc":"2.0","id":2,"result":{}}]`)
	})
	h, tr, rc := traceHarness(t, u, true)
	body := "[" + call(1, "echo", `{}`) + "," + call(2, "echo", `{}`) + "]"
	post(t, h.addr, jsonHeaders, body)
	if tp := <-got; tp != "" {
		t.Fatalf("batch injected %q", tp)
	}
	if b := u.last.Load().([]byte); string(b) != body {
		t.Fatalf("batch rewritten: %q", b)
	}
	recordOf(t, h, "request", "2")
	if spans := rc.Flushed(t, tr); len(spans) != 2 {
		t.Fatalf("%d spans, want 2", len(spans))
	}
}

// injectMeta rewrites only _meta's traceparent (and tracestate when there), byte for byte
// elsewhere, and leaves a message without one alone.
func TestInjectMeta(t *testing.T) {
	in := []byte(`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"a", "_meta" : {"x":1,"traceparent":"00-aa-bb-01"}}}`)
	out, ok := injectMeta(in, "00-new-01", "mcpi=1")
	if !ok || string(out) != `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"a", "_meta" : {"x":1,"traceparent":"00-new-01"}}}` {
		t.Fatalf("%v %s", ok, out)
	}
	if _, ok := injectMeta([]byte(`{"jsonrpc":"2.0","id":1,"method":"x","params":{"_meta":{}}}`), "t", "s"); ok {
		t.Fatal("injected into a _meta without traceparent")
	}
	if _, ok := injectMeta([]byte(`{"jsonrpc":"2.0","id":1,"method":"x"}`), "t", "s"); ok {
		t.Fatal("injected without params")
	}
}

// With tracing off the trace steps allocate nothing and set no ids.
func TestTraceOffAllocatesNothing(t *testing.T) {
	m, err := mcp.DecodeMessage([]byte(callWithMeta(1, "echo")), mcp.DecodeOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, inject := range []bool{false, true} {
		s := &conn{f: &Flow{TraceInject: inject}}
		x := &exchange.Exchange{Req: &exchange.Head{Method: "POST", Target: "/mcp"}}
		r := &Record{}
		st := &xstate{callState: callState{reqs: []*Record{r}}}
		b := &requestBody{msgs: []*mcp.Message{m}, out: [][]byte{m.Raw}}
		allocs := testing.AllocsPerRun(100, func() {
			traceRequests(s, x, st, b)
			injectTrace(s, x, st, b)
			endRequestSpans(s, x, st)
		})
		if allocs != 0 || r.TraceID != "" || r.SpanID != "" || r.span != nil {
			t.Fatalf("inject %v: %v allocations, ids %q/%q", inject, allocs, r.TraceID, r.SpanID)
		}
	}
}

// A server→client request is a SERVER span, child of the client request it came with; policy
// dropping it ends it with error status.
func TestTraceServerRequest(t *testing.T) {
	u := newUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		fmt.Fprintf(w, "event: message\ndata: %s\n\n", samplingRequest)
		io.WriteString(w, "event: message\ndata: {\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{\"content\":[]}}\n\n")
	})
	h, tr, rc := traceHarnessRules(t, u, false, peerRules)
	post(t, h.addr, jsonHeaders, call(1, "echo", `{}`))
	srec := h.awaitRecord(t, isSampling)
	recordOf(t, h, "request", "1")
	spans := rc.Flushed(t, tr)
	if len(spans) != 2 {
		t.Fatalf("%d spans, want 2", len(spans))
	}
	var client, server *tracepb.Span
	for _, s := range spans {
		switch s.Kind {
		case tracepb.Span_SPAN_KIND_CLIENT:
			client = s
		case tracepb.Span_SPAN_KIND_SERVER:
			server = s
		}
	}
	if client == nil || server == nil || server.Name != "sampling/createMessage" {
		t.Fatalf("spans %v", spans)
	}
	if !bytes.Equal(server.TraceId, client.TraceId) || !bytes.Equal(server.ParentSpanId, client.SpanId) {
		t.Fatalf("server request span %x/%x, want a child of %x/%x", server.TraceId, server.ParentSpanId, client.TraceId, client.SpanId)
	}
	a := spanAttrs(server)
	if server.Status.GetCode() != tracepb.Status_STATUS_CODE_ERROR || a["mcpintercept.direction"] != ServerToClient || a["jsonrpc.request.id"] != "s1" {
		t.Fatalf("server span status %v attrs %v", server.Status, a)
	}
	if srec.SpanID != hex.EncodeToString(server.SpanId) {
		t.Fatalf("sampling record span %s, span %x", srec.SpanID, server.SpanId)
	}
}

// The open spans of server requests are bounded per connection, ended when answered, evicted
// oldest first past the bound, and all ended with the flow: none is left unexported.
func TestServerSpansBounded(t *testing.T) {
	rc := newOTLPReceiver(t)
	tr := openTracer(t, rc)
	var ss serverSpans
	for i := range maxServerSpans + 3 {
		ss.add(fmt.Sprint(i), &openSpan{sp: tr.Start(tracing.Parent{}, tracing.KindServer, tracing.Call{Method: "ping"}, time.Now())})
	}
	if len(ss.byKey) != maxServerSpans || len(ss.order) != maxServerSpans {
		t.Fatalf("%d open, %d ordered, want %d", len(ss.byKey), len(ss.order), maxServerSpans)
	}
	if ss.take("0") != nil || ss.take("3") == nil {
		t.Fatal("the oldest were not the ones evicted")
	}
	ss.endAll(time.Now())
	if len(ss.byKey) != 0 {
		t.Fatal("endAll left spans open")
	}
	// 3 evicted and ended, "3" taken (not ended by this test), the rest ended by endAll.
	if got := len(rc.Flushed(t, tr)); got != maxServerSpans+3-1 {
		t.Fatalf("%d spans exported, want %d", got, maxServerSpans+2)
	}
}

// An audited call's authorization and outcome records carry the call's span ids beside the
// client's traceparent; so does a denial's record.
func TestTraceAuditRecords(t *testing.T) {
	u := newUpstream(t, echoServer)
	rc := newOTLPReceiver(t)
	tr := openTracer(t, rc)
	a := newFakeAuditor()
	h := newHarnessWith(t, u, denyRules, Options{}, nil, func(f *Flow) { f.Tracer, f.Audit = tr, a })
	post(t, h.addr, jsonHeaders, callWithMeta(3, "echo"))
	out := a.nextOutcome(t)
	post(t, h.addr, jsonHeaders, call(4, "denied_x", `{}`))
	recordOf(t, h, "request", "4")
	spans := rc.Flushed(t, tr)
	ids := map[string]string{} // span id → trace id
	for _, s := range spans {
		ids[hex.EncodeToString(s.SpanId)] = hex.EncodeToString(s.TraceId)
	}
	recs := a.all()
	if len(spans) != 2 || len(recs) != 3 {
		t.Fatalf("%d spans, %d audit records", len(spans), len(recs))
	}
	for _, r := range recs {
		if r.SpanID == "" || ids[r.SpanID] != r.TraceID {
			t.Fatalf("audit record %+v names no exported span (%v)", r, ids)
		}
	}
	if out.SpanID != recs[0].SpanID || recs[0].Traceparent != "00-"+metaTrace+"-"+metaSpan+"-01" || recs[0].TraceID != metaTrace {
		t.Fatalf("authorization %+v, outcome %+v", recs[0], out)
	}
}

// FuzzInjectMeta: whatever request the decoder accepts, injecting into it leaves a message the
// decoder accepts, with the same method and id, _meta.traceparent the injected one and every
// other member as it was.
func FuzzInjectMeta(f *testing.F) {
	f.Add([]byte(callWithMeta(1, "echo")))
	f.Add([]byte(`{"jsonrpc":"2.0","id":"a","method":"x","params":{"_meta":{"traceparent":1,"tracestate":"a=b"}}}`))
	f.Add([]byte(`{"params":{"_meta":{"traceparent":"t"}},"jsonrpc":"2.0","id":2,"method":"x"}`))
	const tp, ts = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", `mcpi=00f067aa0ba902b7,v="q\\`
	f.Fuzz(func(t *testing.T, msg []byte) {
		m, err := mcp.DecodeMessage(msg, mcp.DecodeOptions{})
		if err != nil || m.Kind != mcp.KindRequest {
			return
		}
		out, ok := injectMeta(m.Raw, tp, ts)
		meta, hasMeta := m.Param("_meta")
		_, hasTP := mcp.Member(meta, "traceparent")
		if ok != (hasMeta && mcp.IsObject(meta) && hasTP) {
			t.Fatalf("injected %v, _meta %q", ok, meta)
		}
		if !ok {
			return
		}
		n, err := mcp.DecodeMessage(out, mcp.DecodeOptions{})
		if err != nil {
			t.Fatalf("%q became %q: %v", m.Raw, out, err)
		}
		nmeta, _ := n.Param("_meta")
		got, _ := mcp.StringMember(nmeta, "traceparent")
		if n.Method != m.Method || string(n.ID) != string(m.ID) || got != tp {
			t.Fatalf("%q became %q", m.Raw, out)
		}
		if _, had := mcp.Member(meta, "tracestate"); had {
			if s, _ := mcp.StringMember(nmeta, "tracestate"); s != ts {
				t.Fatalf("tracestate %q, want %q", s, ts)
			}
		}
	})
}

// A body Level 2 refuses unread still gets a span (the HTTP request's), with error status.
func TestTraceUnreadableRefusal(t *testing.T) {
	u := newUpstream(t, echoServer)
	h, tr, rc := traceHarness(t, u, false)
	r := post(t, h.addr, jsonHeaders, `{"jsonrpc":"2.0","id":1,"id":2,"method":"x"}`)
	if r.status != 400 {
		t.Fatalf("status %d", r.status)
	}
	rec := h.awaitRecord(t, func(r *Record) bool { return r.Rule == "level2" })
	spans := rc.Flushed(t, tr)
	if len(spans) != 1 || spans[0].Name != "HTTP POST" || spans[0].Status.GetCode() != tracepb.Status_STATUS_CODE_ERROR ||
		rec.SpanID != hex.EncodeToString(spans[0].SpanId) {
		t.Fatalf("spans %v, record %+v", spans, rec)
	}
}

// A request answered on another stream of its session (202 here, the response on the GET
// stream): its span stays open until that answer, which ends it and whose record names it.
func TestTraceAnsweredOnAnotherStream(t *testing.T) {
	u := newUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		if r.Method == "POST" {
			w.WriteHeader(202)
			return
		}
		w.Header().Set("Content-Type", "text/event-stream")
		io.WriteString(w, "event: message\ndata: {\"jsonrpc\":\"2.0\",\"id\":11,\"result\":{\"content\":[],\"isError\":true}}\n\n")
	})
	h, tr, rc := traceHarness(t, u, false)
	const sess = "Mcp-Session-Id: s-123\r\n"
	if r := post(t, h.addr, jsonHeaders+sess, call(11, "echo", `{}`)); r.status != 202 {
		t.Fatalf("POST status %d", r.status)
	}
	req := recordOf(t, h, "request", "11")
	c, err := net.Dial("tcp", h.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	fmt.Fprintf(c, "GET /mcp HTTP/1.1\r\nHost: x\r\nAccept: text/event-stream\r\n%s\r\n", sess)
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	res := h.awaitRecord(t, func(r *Record) bool { return r.Kind == "response" && r.ID == "11" })
	spans := rc.Flushed(t, tr)
	if len(spans) != 1 {
		t.Fatalf("%d spans, want 1", len(spans))
	}
	sid := hex.EncodeToString(spans[0].SpanId)
	if req.SpanID != sid || res.SpanID != sid || spanAttrs(spans[0])["error.type"] != "tool_error" {
		t.Fatalf("request %s, response %s, span %s attrs %v", req.SpanID, res.SpanID, sid, spanAttrs(spans[0]))
	}
}

// A pending request's span ends when its session forgets it (evicted past maxPending, or the
// whole session evicted), rather than never.
func TestPendingSpansEndWhenForgotten(t *testing.T) {
	rc := newOTLPReceiver(t)
	tr := openTracer(t, rc)
	ss := NewSessions(1)
	start := func() *openSpan {
		return &openSpan{sp: tr.Start(tracing.Parent{}, tracing.KindClient, tracing.Call{Method: "ping"}, time.Now())}
	}
	for i := range maxPending + 2 {
		ss.AddPending(nil, "a", fmt.Sprint(i), Pending{Method: "ping", span: start()})
	}
	ss.AddPending(nil, "b", "x", Pending{Method: "ping", span: start()}) // evicts session a
	p, ok := ss.TakePending(nil, "b", "x")
	if !ok {
		t.Fatal("b's request not pending")
	}
	p.span.end(nil, 0, 0, false, time.Now())
	if got := len(rc.Flushed(t, tr)); got != maxPending+3 {
		t.Fatalf("%d spans ended, want %d", got, maxPending+3)
	}
}

// A response Level 2 cannot read is replaced by the appliance's error: the span says so.
func TestTraceUnreadableResponse(t *testing.T) {
	u := newUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"jsonrpc":"2.0","id":1,"id":1,"result":{}}`)
	})
	h, tr, rc := traceHarness(t, u, false)
	denial(t, post(t, h.addr, jsonHeaders, call(1, "echo", `{}`)), "1", CodeUnreadable, "level2")
	recordOf(t, h, "request", "1")
	spans := rc.Flushed(t, tr)
	if len(spans) != 1 || spans[0].Status.GetCode() != tracepb.Status_STATUS_CODE_ERROR || spanAttrs(spans[0])["error.type"] != fmt.Sprint(CodeUnreadable) {
		t.Fatalf("spans %v", spans)
	}
}
