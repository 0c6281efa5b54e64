//go:build !notracing

package tracing

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	colmetricpb "go.opentelemetry.io/proto/otlp/collector/metrics/v1"
	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/proto"
)

// receiver is an in-process OTLP/HTTP receiver: it decodes the export requests and keeps the
// spans and metric names it got.
type receiver struct {
	srv     *httptest.Server
	mu      sync.Mutex
	spans   []*tracepb.Span
	metrics map[string]*colmetricpb.ExportMetricsServiceRequest
	headers http.Header
}

func newReceiver(t *testing.T) *receiver {
	r := &receiver{metrics: map[string]*colmetricpb.ExportMetricsServiceRequest{}}
	r.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		body, err := io.ReadAll(req.Body)
		if err != nil {
			w.WriteHeader(400)
			return
		}
		r.mu.Lock()
		defer r.mu.Unlock()
		r.headers = req.Header.Clone()
		switch req.URL.Path {
		case "/v1/traces":
			var m coltracepb.ExportTraceServiceRequest
			if err := proto.Unmarshal(body, &m); err != nil {
				w.WriteHeader(400)
				return
			}
			for _, rs := range m.ResourceSpans {
				for _, ss := range rs.ScopeSpans {
					r.spans = append(r.spans, ss.Spans...)
				}
			}
			out, _ := proto.Marshal(&coltracepb.ExportTraceServiceResponse{})
			w.Header().Set("Content-Type", "application/x-protobuf")
			w.Write(out)
		case "/v1/metrics":
			var m colmetricpb.ExportMetricsServiceRequest
			if err := proto.Unmarshal(body, &m); err != nil {
				w.WriteHeader(400)
				return
			}
			for _, rm := range m.ResourceMetrics {
				for _, sm := range rm.ScopeMetrics {
					for _, mt := range sm.Metrics {
						r.metrics[mt.Name] = &m
					}
				}
			}
			out, _ := proto.Marshal(&colmetricpb.ExportMetricsServiceResponse{})
			w.Header().Set("Content-Type", "application/x-protobuf")
			w.Write(out)
		default:
			w.WriteHeader(404)
		}
	}))
	t.Cleanup(r.srv.Close)
	return r
}

func (r *receiver) got() []*tracepb.Span {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]*tracepb.Span(nil), r.spans...)
}

func openTest(t *testing.T, cfg Config, reg prometheus.Registerer) *Tracer {
	t.Helper()
	tr, err := Open(context.Background(), cfg, reg, nil)
	if err != nil {
		t.Fatal(err)
	}
	if tr == nil {
		t.Fatal("nil tracer")
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		tr.Shutdown(ctx)
	})
	return tr
}

// exported flushes tr and returns the spans r holds, the one named name first.
func exported(t *testing.T, tr *Tracer, r *receiver, want int) []*tracepb.Span {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := tr.proc.ForceFlush(ctx); err != nil {
		t.Fatal(err)
	}
	s := r.got()
	if len(s) != want {
		t.Fatalf("receiver got %d spans, want %d", len(s), want)
	}
	return s
}

func attrMap(kv []*commonpb.KeyValue) map[string]string {
	m := map[string]string{}
	for _, a := range kv {
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
	parentTrace = "4bf92f3577b34da6a3ce929d0e0e4736"
	parentSpan  = "00f067aa0ba902b7"
)

func TestNilIsOff(t *testing.T) {
	tr, err := Open(context.Background(), Config{}, prometheus.NewRegistry(), nil)
	if tr != nil || err != nil {
		t.Fatalf("Open of no endpoint = %v, %v", tr, err)
	}
	sp := tr.Start(Parent{Traceparent: "00-" + parentTrace + "-" + parentSpan + "-01"}, KindClient, Call{Method: "ping"}, time.Now())
	if sp != nil {
		t.Fatal("nil tracer made a span")
	}
	sp.Decision("deny", "r", "x")
	sp.Status(-32601, 0, false)
	sp.End(time.Now())
	if sp.TraceID() != "" || sp.SpanID() != "" {
		t.Fatal("nil span has ids")
	}
	if _, _, ok := sp.Inject(); ok {
		t.Fatal("nil span injects")
	}
	if err := tr.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	// Tracing off costs no allocation.
	call := Call{Method: "tools/call", Tool: "echo", RequestID: "1", Route: "lab"}
	if n := testing.AllocsPerRun(100, func() {
		sp := tr.Start(Parent{Traceparent: "00-" + parentTrace + "-" + parentSpan + "-01"}, KindClient, call, time.Time{})
		sp.Decision("allow", "", "")
		sp.Status(0, 200, false)
		sp.Inject()
		sp.End(time.Time{})
		_ = sp.TraceID() + sp.SpanID()
	}); n != 0 {
		t.Errorf("%v allocations per span with tracing off", n)
	}
}

func TestSpanExported(t *testing.T) {
	r := newReceiver(t)
	var dials atomic.Int32
	dial := func(ctx context.Context, network, addr string) (net.Conn, error) {
		dials.Add(1)
		return (&net.Dialer{}).DialContext(ctx, network, addr)
	}
	reg := prometheus.NewRegistry()
	tr := openTest(t, Config{Endpoint: r.srv.URL, Ratio: 1, Headers: map[string]string{"x-api-key": "k1"}, Dial: dial, ServiceName: "svc-test"}, reg)

	start := time.Unix(1700000000, 0)
	call := Call{Method: "tools/call", Tool: "echo", RequestID: "7", ProtocolVersion: "2025-06-18", SessionID: "abc",
		ServerAddress: "mcp.example", ServerPort: 443, Direction: "client_to_server", Route: "lab", TLS: "terminate",
		Mechanism: "ebpf", ClientAddress: "10.0.0.2", ClientPort: 5555, PID: 42, UID: 1000, Comm: "node", Exe: "/usr/bin/node"}
	sp := tr.Start(Parent{Traceparent: "00-" + parentTrace + "-" + parentSpan + "-01", Tracestate: "vendor=x"}, KindClient, call, start)
	if sp.TraceID() != parentTrace {
		t.Fatalf("trace id %s, want the parent's %s", sp.TraceID(), parentTrace)
	}
	sp.Decision("allow", "default", "no rule matched")
	sp.Status(0, 200, true)
	sp.End(start.Add(150 * time.Millisecond))

	got := exported(t, tr, r, 1)[0]
	if got.Name != "tools/call echo" {
		t.Errorf("name %q", got.Name)
	}
	if got.Kind != tracepb.Span_SPAN_KIND_CLIENT {
		t.Errorf("kind %v", got.Kind)
	}
	if hex.EncodeToString(got.TraceId) != parentTrace || hex.EncodeToString(got.ParentSpanId) != parentSpan {
		t.Errorf("trace %x parent %x", got.TraceId, got.ParentSpanId)
	}
	if hex.EncodeToString(got.SpanId) != sp.SpanID() {
		t.Errorf("span id %x, SpanID %s", got.SpanId, sp.SpanID())
	}
	if got.EndTimeUnixNano-got.StartTimeUnixNano != uint64(150*time.Millisecond) {
		t.Errorf("duration %d", got.EndTimeUnixNano-got.StartTimeUnixNano)
	}
	want := map[string]string{
		"mcp.method.name": "tools/call", "gen_ai.tool.name": "echo", "gen_ai.operation.name": "execute_tool",
		"jsonrpc.request.id": "7", "mcp.protocol.version": "2025-06-18", "mcp.session.id": "abc",
		"server.address": "mcp.example", "server.port": "443", "network.transport": "tcp",
		"client.address": "10.0.0.2", "client.port": "5555", "mcpintercept.route": "lab",
		"mcpintercept.tls": "terminate", "mcpintercept.mechanism": "ebpf", "mcpintercept.direction": "client_to_server",
		"process.pid": "42", "process.user.id": "1000", "process.executable.name": "node",
		"process.executable.path": "/usr/bin/node", "mcpintercept.decision": "allow", "mcpintercept.rule": "default",
		"rpc.response.status_code": "200", "error.type": "tool_error",
	}
	am := attrMap(got.Attributes)
	for k, v := range want {
		if am[k] != v {
			t.Errorf("%s = %q, want %q", k, am[k], v)
		}
	}
	for _, k := range []string{"gen_ai.prompt.name", "mcp.resource.uri", "http.request.method", "url.path"} {
		if _, ok := am[k]; ok {
			t.Errorf("empty attribute %s present", k)
		}
	}
	if got.Status.GetCode() != tracepb.Status_STATUS_CODE_ERROR {
		t.Errorf("tool error status %v", got.Status)
	}
	r.mu.Lock()
	if r.headers.Get("x-api-key") != "k1" {
		t.Errorf("header not sent: %v", r.headers)
	}
	r.mu.Unlock()
	if dials.Load() == 0 {
		t.Error("Dial not used")
	}

	// The histogram, on Prometheus and over OTLP.
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var h *dto.Histogram
	for _, mf := range mfs {
		if mf.GetName() == "mcp_client_operation_duration_seconds" {
			for _, m := range mf.Metric {
				l := map[string]string{}
				for _, lp := range m.Label {
					l[lp.GetName()] = lp.GetValue()
				}
				if l["mcp_method_name"] == "tools/call" && l["error_type"] == "tool_error" && l["gen_ai_tool_name"] == "echo" {
					h = m.Histogram
				}
			}
		}
	}
	if h == nil || h.GetSampleCount() != 1 || h.GetSampleSum() < 0.149 || h.GetSampleSum() > 0.151 {
		t.Fatalf("prometheus histogram %v", h)
	}
	if len(h.Bucket) != len(DurationBuckets) {
		t.Errorf("%d buckets", len(h.Bucket))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := tr.mp.ForceFlush(ctx); err != nil {
		t.Fatal(err)
	}
	r.mu.Lock()
	m := r.metrics["mcp.client.operation.duration"]
	r.mu.Unlock()
	if m == nil {
		t.Fatal("no OTLP mcp.client.operation.duration")
	}
	rm := m.ResourceMetrics[0]
	if attrMap(rm.Resource.Attributes)["service.name"] != "svc-test" {
		t.Errorf("resource %v", rm.Resource.Attributes)
	}
	hm := rm.ScopeMetrics[0].Metrics[0]
	if hm.Unit != "s" {
		t.Errorf("unit %q", hm.Unit)
	}
	dp := hm.GetHistogram().GetDataPoints()
	if len(dp) != 1 || dp[0].Count != 1 || len(dp[0].ExplicitBounds) != len(DurationBuckets) {
		t.Fatalf("OTLP data points %v", dp)
	}
	if a := attrMap(dp[0].Attributes); a["mcp.method.name"] != "tools/call" || a["error.type"] != "tool_error" || a["gen_ai.tool.name"] != "echo" {
		t.Errorf("OTLP histogram attributes %v", a)
	}
}

func TestRootWhenParentInvalid(t *testing.T) {
	r := newReceiver(t)
	tr := openTest(t, Config{Endpoint: r.srv.URL, Ratio: 1}, nil)
	for _, p := range []Parent{
		{},
		{Traceparent: "garbage"},
		{Traceparent: "00-00000000000000000000000000000000-" + parentSpan + "-01"},
		{Traceparent: "00-" + parentTrace + "-0000000000000000-01"},
	} {
		sp := tr.Start(p, KindInternal, Call{}, time.Now())
		if sp.TraceID() == parentTrace || len(sp.TraceID()) != 32 {
			t.Errorf("%q: trace id %s", p.Traceparent, sp.TraceID())
		}
		sp.End(time.Now())
	}
	for _, s := range exported(t, tr, r, 4) {
		if len(s.ParentSpanId) != 0 {
			t.Errorf("root has parent %x", s.ParentSpanId)
		}
		if s.Name != "connection" || s.Kind != tracepb.Span_SPAN_KIND_INTERNAL {
			t.Errorf("name %q kind %v", s.Name, s.Kind)
		}
	}
}

func TestDenial(t *testing.T) {
	r := newReceiver(t)
	tr := openTest(t, Config{Endpoint: r.srv.URL, Ratio: 1}, nil)
	sp := tr.Start(Parent{}, KindServer, Call{Method: "prompts/get", Prompt: "p1", HTTPMethod: "POST", Path: "/mcp"}, time.Now())
	sp.Decision("deny", "no-prompts", "prompts are off")
	sp.Status(-32003, 0, false)
	sp.End(time.Now())
	got := exported(t, tr, r, 1)[0]
	if got.Name != "prompts/get p1" || got.Kind != tracepb.Span_SPAN_KIND_SERVER {
		t.Errorf("name %q kind %v", got.Name, got.Kind)
	}
	if got.Status.GetCode() != tracepb.Status_STATUS_CODE_ERROR || got.Status.GetMessage() != "prompts are off" {
		t.Errorf("status %v", got.Status)
	}
	am := attrMap(got.Attributes)
	if am["mcpintercept.decision"] != "deny" || am["mcpintercept.rule"] != "no-prompts" || am["error.type"] != "-32003" ||
		am["rpc.response.status_code"] != "-32003" || am["http.request.method"] != "POST" || am["url.path"] != "/mcp" {
		t.Errorf("attributes %v", am)
	}
	if len(got.Events) != 1 || got.Events[0].Name != "mcpintercept.denied" || attrMap(got.Events[0].Attributes)["mcpintercept.rule"] != "no-prompts" {
		t.Errorf("events %v", got.Events)
	}
}

func TestInject(t *testing.T) {
	r := newReceiver(t)
	tr := openTest(t, Config{Endpoint: r.srv.URL, Ratio: 1}, nil)
	sp := tr.Start(Parent{Traceparent: "00-" + parentTrace + "-" + parentSpan + "-01", Tracestate: "mcpi=1111111111111111,rojo=00f067aa0ba902b7,congo=t61rcWkgMzE"},
		KindClient, Call{Method: "tools/list"}, time.Now())
	tp, ts, ok := sp.Inject()
	if !ok {
		t.Fatal("not ok")
	}
	if tp != "00-"+parentTrace+"-"+sp.SpanID()+"-01" {
		t.Errorf("traceparent %q", tp)
	}
	if ts != "mcpi="+sp.SpanID()+",rojo=00f067aa0ba902b7,congo=t61rcWkgMzE" {
		t.Errorf("tracestate %q", ts)
	}
	sp.End(time.Now())

	// 32 members of the caller's: one is dropped from the right for ours.
	var members []string
	for i := range 32 {
		members = append(members, fmt.Sprintf("k%d=v%d", i, i))
	}
	sp = tr.Start(Parent{Traceparent: "00-" + parentTrace + "-" + parentSpan + "-01", Tracestate: strings.Join(members, ",")}, KindClient, Call{Method: "ping"}, time.Now())
	_, ts, _ = sp.Inject()
	if n := strings.Count(ts, ",") + 1; n != 32 || !strings.HasPrefix(ts, "mcpi="+sp.SpanID()+",k0=v0,") || strings.Contains(ts, "k31=") {
		t.Errorf("32 members: %d %q", n, ts)
	}
	sp.End(time.Now())

	// Long members: trimmed to 512 bytes from the right.
	members = members[:0]
	for i := range 8 {
		members = append(members, fmt.Sprintf("k%d=%s", i, strings.Repeat("v", 100)))
	}
	sp = tr.Start(Parent{Traceparent: "00-" + parentTrace + "-" + parentSpan + "-01", Tracestate: strings.Join(members, ",")}, KindClient, Call{Method: "ping"}, time.Now())
	_, ts, _ = sp.Inject()
	if len(ts) > 512 || !strings.HasPrefix(ts, "mcpi="+sp.SpanID()+",k0=") {
		t.Errorf("512 bytes: %d %q", len(ts), ts)
	}
	sp.End(time.Now())

	// No caller state: ours alone; a new root injects its own trace.
	sp = tr.Start(Parent{}, KindClient, Call{Method: "ping"}, time.Now())
	tp, ts, ok = sp.Inject()
	if !ok || ts != "mcpi="+sp.SpanID() || tp != "00-"+sp.TraceID()+"-"+sp.SpanID()+"-01" {
		t.Errorf("root: %q %q %v", tp, ts, ok)
	}
	sp.End(time.Now())
}

func TestSamplingRatioZero(t *testing.T) {
	r := newReceiver(t)
	tr := openTest(t, Config{Endpoint: r.srv.URL, Ratio: 0}, nil)
	root := tr.Start(Parent{}, KindClient, Call{Method: "ping"}, time.Now())
	if _, _, ok := root.Inject(); ok {
		t.Error("unsampled root injects")
	}
	root.Decision("deny", "r", "x")
	root.End(time.Now())
	child := tr.Start(Parent{Traceparent: "00-" + parentTrace + "-" + parentSpan + "-01"}, KindClient, Call{Method: "ping"}, time.Now())
	child.End(time.Now())
	unsampledParent := tr.Start(Parent{Traceparent: "00-" + parentTrace + "-" + parentSpan + "-00"}, KindClient, Call{Method: "ping"}, time.Now())
	unsampledParent.End(time.Now())
	got := exported(t, tr, r, 1) // the child of a sampled parent only (parent-based)
	if hex.EncodeToString(got[0].ParentSpanId) != parentSpan {
		t.Errorf("exported %x", got[0].ParentSpanId)
	}
}

func TestQueueFullDropsCounted(t *testing.T) {
	release := make(chan struct{})
	var reqs atomic.Int32
	dead := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		reqs.Add(1)
		select { // never answers while the test runs
		case <-release:
		case <-req.Context().Done():
		}
	}))
	defer dead.Close()
	defer close(release)
	reg := prometheus.NewRegistry()
	tr, err := Open(context.Background(), Config{Endpoint: dead.URL, Ratio: 1, MaxQueue: 4, MaxBatch: 1, Interval: time.Hour}, reg, nil)
	if err != nil {
		t.Fatal(err)
	}
	const n = 500
	for i := range n {
		sp := tr.Start(Parent{}, KindClient, Call{Method: "tools/call", Tool: fmt.Sprint("t", i)}, time.Now())
		sp.Decision("allow", "", "")
		sp.Status(0, 0, false)
		sp.End(time.Now())
	}
	// At most one batch (1 span) is in the stuck export and 4 queued: the rest were dropped.
	dropped := counterValue(t, reg, "mcpintercept_spans_dropped_total")
	if dropped < n-5 || dropped > n {
		t.Fatalf("dropped %v of %d", dropped, n)
	}
	// Tool names past the label bound are counted under _OTHER.
	if c := histCount(t, reg, otherLabel); c != n-maxLabelValues {
		t.Errorf("_OTHER count %d, want %d", c, n-maxLabelValues)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	tr.Shutdown(ctx) // returns once ctx ends even though the export hangs
}

func counterValue(t *testing.T, g prometheus.Gatherer, name string) float64 {
	mfs, err := g.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name {
			return mf.Metric[0].GetCounter().GetValue()
		}
	}
	t.Fatalf("no %s", name)
	return 0
}

func histCount(t *testing.T, g prometheus.Gatherer, tool string) uint64 {
	mfs, _ := g.Gather()
	for _, mf := range mfs {
		if mf.GetName() != "mcp_client_operation_duration_seconds" {
			continue
		}
		for _, m := range mf.Metric {
			for _, lp := range m.Label {
				if lp.GetName() == "gen_ai_tool_name" && lp.GetValue() == tool {
					return m.Histogram.GetSampleCount()
				}
			}
		}
	}
	return 0
}

func TestParseEndpoint(t *testing.T) {
	for _, c := range []struct {
		cfg               Config
		hostport, tp, mp  string
		insecure, wantErr bool
	}{
		{cfg: Config{Endpoint: "collector:4318"}, hostport: "collector:4318"},
		{cfg: Config{Endpoint: "collector:4318", Insecure: true}, hostport: "collector:4318", insecure: true},
		{cfg: Config{Endpoint: "http://collector"}, hostport: "collector:4318", insecure: true},
		{cfg: Config{Endpoint: "http://collector", Protocol: "grpc"}, hostport: "collector:4317", insecure: true},
		{cfg: Config{Endpoint: "https://c.example:443/otlp"}, hostport: "c.example:443", tp: "/otlp/v1/traces", mp: "/otlp/v1/metrics"},
		{cfg: Config{Endpoint: "https://c.example/v1/traces"}, hostport: "c.example:4318", tp: "/v1/traces", mp: "/v1/metrics"},
		{cfg: Config{Endpoint: "ftp://c.example"}, wantErr: true},
		{cfg: Config{Endpoint: "collector"}, wantErr: true},
		{cfg: Config{Endpoint: "http://"}, wantErr: true},
	} {
		e, err := parseEndpoint(c.cfg)
		if (err != nil) != c.wantErr {
			t.Errorf("%q: err %v", c.cfg.Endpoint, err)
			continue
		}
		if err == nil && (e.hostport != c.hostport || e.insecure != c.insecure || e.tracePath != c.tp || e.metrPath != c.mp) {
			t.Errorf("%q: %+v", c.cfg.Endpoint, e)
		}
	}
	if _, err := Open(context.Background(), Config{Endpoint: "c:1", Protocol: "thrift"}, nil, nil); err == nil {
		t.Error("protocol thrift accepted")
	}
	if _, err := Open(context.Background(), Config{Endpoint: "c:1", CAFile: "/nonexistent"}, nil, nil); err == nil {
		t.Error("missing ca_file accepted")
	}
}

type grpcTraces struct {
	coltracepb.UnimplementedTraceServiceServer
	got chan *coltracepb.ExportTraceServiceRequest
}

func (g *grpcTraces) Export(_ context.Context, r *coltracepb.ExportTraceServiceRequest) (*coltracepb.ExportTraceServiceResponse, error) {
	g.got <- r
	return &coltracepb.ExportTraceServiceResponse{}, nil
}

// TestGRPC: protocol grpc exports through cfg.Dial with the headers as metadata.
func TestGRPC(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var md atomic.Value
	srv := grpc.NewServer(grpc.UnaryInterceptor(func(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		if m, ok := metadata.FromIncomingContext(ctx); ok {
			md.Store(m)
		}
		return h(ctx, req)
	}))
	g := &grpcTraces{got: make(chan *coltracepb.ExportTraceServiceRequest, 4)}
	coltracepb.RegisterTraceServiceServer(srv, g)
	go srv.Serve(ln)
	defer srv.Stop()
	var dials atomic.Int32
	dial := func(ctx context.Context, network, addr string) (net.Conn, error) {
		dials.Add(1)
		return (&net.Dialer{}).DialContext(ctx, network, addr)
	}
	tr := openTest(t, Config{Endpoint: ln.Addr().String(), Protocol: ProtocolGRPC, Insecure: true, Ratio: 1, Dial: dial,
		Headers: map[string]string{"x-api-key": "k2"}}, nil)
	sp := tr.Start(Parent{}, KindClient, Call{Method: "tools/call", Tool: "echo"}, time.Now())
	sp.End(time.Now())
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := tr.proc.ForceFlush(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case r := <-g.got:
		s := r.ResourceSpans[0].ScopeSpans[0].Spans[0]
		if s.Name != "tools/call echo" || hex.EncodeToString(s.SpanId) != sp.SpanID() {
			t.Errorf("span %q %x", s.Name, s.SpanId)
		}
	case <-ctx.Done():
		t.Fatal("no export")
	}
	if m, _ := md.Load().(metadata.MD); len(m.Get("x-api-key")) != 1 || m.Get("x-api-key")[0] != "k2" {
		t.Errorf("metadata %v", m)
	}
	if dials.Load() == 0 {
		t.Error("Dial not used")
	}
	// Shut down while the receiver is up (a down one makes Shutdown wait for its ctx).
	if err := tr.Shutdown(ctx); err != nil {
		t.Logf("shutdown: %v", err) // the final metric export meets no metrics service
	}
}

// TestRefusedExportCounted: a receiver that refuses connections loses every span, counted.
func TestRefusedExportCounted(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close() // nothing listens there now
	reg := prometheus.NewRegistry()
	tr := openTest(t, Config{Endpoint: "http://" + addr, Ratio: 1, MaxBatch: 10}, reg)
	const n = 25
	for range n {
		tr.Start(Parent{}, KindClient, Call{Method: "ping"}, time.Now()).End(time.Now())
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := tr.proc.ForceFlush(ctx); err != nil {
		t.Fatal(err)
	}
	if d := counterValue(t, reg, "mcpintercept_spans_dropped_total"); d != n {
		t.Errorf("dropped %v, want %d", d, n)
	}
}

// nopExporter discards.
type nopExporter struct{}

func (nopExporter) Export(context.Context, []byte) error { return nil }
func (nopExporter) Shutdown(context.Context) error       { return nil }

// failingExporter fails every export and counts them.
type failingExporter struct{ calls atomic.Int32 }

func (f *failingExporter) Export(context.Context, []byte) error {
	f.calls.Add(1)
	return errors.New("receiver down")
}
func (f *failingExporter) Shutdown(context.Context) error { return nil }

// TestPauseAfterFailure: after a failed export, spans are dropped at OnEnd (counted, no export
// attempted) until the pause ends; the next failure doubles it; a success ends it.
func TestPauseAfterFailure(t *testing.T) {
	exp := &failingExporter{}
	reg := prometheus.NewRegistry()
	tr, err := build(Config{Ratio: 1, MaxBatch: 1, Interval: time.Hour}, exp, nil, reg, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Shutdown(context.Background())
	var now atomic.Int64
	now.Store(time.Unix(1000, 0).UnixNano())
	tr.proc.now = func() time.Time { return time.Unix(0, now.Load()) }
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	span := func() { tr.Start(Parent{}, KindClient, Call{Method: "ping"}, time.Now()).End(time.Now()) }

	span()
	tr.proc.ForceFlush(ctx) // the first export fails: paused for 1s
	if exp.calls.Load() != 1 {
		t.Fatalf("%d exports", exp.calls.Load())
	}
	for range 10 {
		span()
	}
	tr.proc.ForceFlush(ctx)
	if exp.calls.Load() != 1 || counterValue(t, reg, "mcpintercept_spans_dropped_total") != 11 {
		t.Fatalf("paused: %d exports, %v dropped", exp.calls.Load(), counterValue(t, reg, "mcpintercept_spans_dropped_total"))
	}
	now.Add(int64(1100 * time.Millisecond)) // past the pause: tried again, fails, paused 2s
	span()
	tr.proc.ForceFlush(ctx)
	if exp.calls.Load() != 2 || tr.proc.backoff != 2*time.Second {
		t.Fatalf("after the pause: %d exports, backoff %v", exp.calls.Load(), tr.proc.backoff)
	}
	now.Add(int64(1500 * time.Millisecond)) // within the 2s pause
	span()
	tr.proc.ForceFlush(ctx)
	if exp.calls.Load() != 2 || counterValue(t, reg, "mcpintercept_spans_dropped_total") != 13 {
		t.Fatalf("second pause: %d exports, %v dropped", exp.calls.Load(), counterValue(t, reg, "mcpintercept_spans_dropped_total"))
	}
}

// TestConcurrentDirections: Decision, Status and End of one span come from different goroutines
// (the two directions of a flow) while earlier spans are being exported; every span is exported
// once (run with -race).
func TestConcurrentDirections(t *testing.T) {
	r := newReceiver(t)
	tr := openTest(t, Config{Endpoint: r.srv.URL, Ratio: 1, MaxBatch: 7, Interval: time.Millisecond}, nil)
	const n = 200
	var wg sync.WaitGroup
	for i := range n {
		sp := tr.Start(Parent{}, KindClient, Call{Method: "tools/call", Tool: "echo", RequestID: fmt.Sprint(i)}, time.Now())
		wg.Add(2)
		go func() {
			defer wg.Done()
			sp.Decision("deny", "r", "x")
			sp.End(time.Now())
		}()
		go func() {
			defer wg.Done()
			sp.Status(-32000, 0, false)
			sp.Inject()
			sp.End(time.Now())
		}()
	}
	wg.Wait()
	seen := map[string]bool{}
	for _, s := range exported(t, tr, r, n) {
		id := attrMap(s.Attributes)["jsonrpc.request.id"]
		if seen[id] {
			t.Fatalf("span %s exported twice", id)
		}
		seen[id] = true
	}
}

// TestSpanEventsBounded: a span keeps at most maxEvents denial events (the SDK's limit), however
// many decisions it is given, and still exports.
func TestSpanEventsBounded(t *testing.T) {
	r := newReceiver(t)
	tr := openTest(t, Config{Endpoint: r.srv.URL, Ratio: 1}, prometheus.NewRegistry())
	start := time.Unix(1700000000, 0)
	sp := tr.Start(Parent{}, KindClient, Call{Method: "tools/call", Tool: "echo"}, start)
	for range maxEvents + 50 {
		sp.Decision("deny", "r", "x")
	}
	sp.End(start.Add(time.Millisecond))
	got := exported(t, tr, r, 1)[0]
	if len(got.Events) != maxEvents {
		t.Errorf("%d events, want %d", len(got.Events), maxEvents)
	}
}
