//go:build !notracing

package tracing

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/protobuf/encoding/prototext"
	"google.golang.org/protobuf/proto"

	"mcpintercept/mcp"
)

// captureExporter keeps the requests it is sent.
type captureExporter struct {
	mu     sync.Mutex
	bodies [][]byte
}

func (c *captureExporter) Export(_ context.Context, b []byte) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.bodies = append(c.bodies, append([]byte(nil), b...))
	return nil
}
func (c *captureExporter) Shutdown(context.Context) error { return nil }

// The SDK's way of making the spans, as the tracer did before export.go: the reference of
// TestEncodeMatchesSDK.

func sdkSpanName(c *Call) string {
	switch {
	case c.Method != "" && c.Tool != "":
		return c.Method + " " + c.Tool
	case c.Method != "" && c.Prompt != "":
		return c.Method + " " + c.Prompt
	case c.Method != "":
		return c.Method
	case c.HTTPMethod != "":
		return "HTTP " + c.HTTPMethod
	}
	return "connection"
}

func sdkAttrs(c *Call) []attribute.KeyValue {
	var a []attribute.KeyValue
	str := func(k, v string) {
		if v != "" {
			a = append(a, attribute.String(k, v))
		}
	}
	num := func(k string, v int) {
		if v > 0 {
			a = append(a, attribute.Int(k, v))
		}
	}
	str("mcp.method.name", c.Method)
	if c.Method == mcp.MethodToolsCall {
		a = append(a, attribute.String("gen_ai.operation.name", "execute_tool"))
	}
	str("gen_ai.tool.name", c.Tool)
	str("gen_ai.prompt.name", c.Prompt)
	str("mcp.resource.uri", c.ResourceURI)
	str("jsonrpc.request.id", c.RequestID)
	str("mcp.protocol.version", c.ProtocolVersion)
	str("mcp.session.id", c.SessionID)
	str("server.address", c.ServerAddress)
	num("server.port", c.ServerPort)
	a = append(a, attribute.String("network.transport", "tcp"))
	str("client.address", c.ClientAddress)
	num("client.port", c.ClientPort)
	str("http.request.method", c.HTTPMethod)
	str("url.path", c.Path)
	str("mcpintercept.route", c.Route)
	str("mcpintercept.tls", c.TLS)
	str("mcpintercept.mechanism", c.Mechanism)
	str("mcpintercept.direction", c.Direction)
	num("process.pid", int(c.PID))
	num("process.user.id", int(c.UID))
	str("process.executable.name", c.Comm)
	str("process.executable.path", c.Exe)
	return a
}

var sdkKinds = [...]trace.SpanKind{KindClient: trace.SpanKindClient, KindServer: trace.SpanKindServer, KindInternal: trace.SpanKindInternal}

// fixedIDs hands the SDK the ids of the span it must reproduce.
type fixedIDs struct {
	tid trace.TraceID
	sid trace.SpanID
}

func (f *fixedIDs) NewIDs(context.Context) (trace.TraceID, trace.SpanID) { return f.tid, f.sid }
func (f *fixedIDs) NewSpanID(context.Context, trace.TraceID) trace.SpanID {
	return f.sid
}

// step is one call on a span: a decision or a status.
type step struct {
	decision, rule, reason string
	isStatus               bool
	code                   int64
	http                   int
	toolErr                bool
}

type encCase struct {
	parent Parent
	kind   Kind
	call   Call
	steps  []step
}

// TestEncodeMatchesSDK is the differential test of export.go: the same spans made by the
// tracer and by the SDK (sdktrace, exported by otlptracehttp), both requests decoded with the
// OTLP proto types, are equal.
func TestEncodeMatchesSDK(t *testing.T) {
	const tp = "00-" + parentTrace + "-" + parentSpan + "-01"
	full := Call{Method: "tools/call", Tool: "echo", RequestID: "7", ProtocolVersion: "2025-06-18", SessionID: "abc",
		ServerAddress: "mcp.example", ServerPort: 443, Direction: "client_to_server", Route: "lab", TLS: "terminate",
		Mechanism: "ebpf", ClientAddress: "10.0.0.2", ClientPort: 5555, PID: 42, UID: 1000, Comm: "node", Exe: "/usr/bin/node"}
	cases := []encCase{
		{Parent{Traceparent: tp, Tracestate: "vendor=x,rojo=00f067aa0ba902b7"}, KindClient, full,
			[]step{{decision: "allow", rule: "default", reason: "no rule matched"}, {isStatus: true, http: 200, toolErr: true}}},
		{Parent{}, KindServer, Call{Method: "prompts/get", Prompt: "p1", HTTPMethod: "POST", Path: "/mcp", RequestID: "x-1"},
			[]step{{decision: "deny", rule: "no-prompts", reason: "prompts are off"}, {isStatus: true, code: -32003}}},
		{Parent{Traceparent: tp}, KindClient, Call{Method: "resources/read", ResourceURI: "file:///etc/ü", ServerPort: 70000},
			[]step{{decision: "rate_limited"}, {isStatus: true, http: 503}}},
		{Parent{}, KindInternal, Call{Route: "r", TLS: "passthrough", Mechanism: "nft", ClientAddress: "::1", ClientPort: 1, PID: 1 << 31},
			[]step{{decision: "allow"}}},
		{Parent{Traceparent: tp, Tracestate: "a=1"}, KindClient, Call{HTTPMethod: "GET", Path: "/sse"},
			[]step{{isStatus: true, http: 404}, {decision: "allow", rule: "r1"}}},
		{Parent{Traceparent: "garbage", Tracestate: "a=1"}, KindClient, Call{Method: "ping"},
			[]step{{isStatus: true, code: -32601}, {decision: "quarantine", reason: "tool changed"}, {decision: "deny", rule: "r2", reason: "second"}}},
		{Parent{}, KindServer, Call{Method: "sampling/createMessage", Direction: "server_to_client"}, nil},
		// The random flag (W3C level 2) is kept; a later version's extra fields are ignored.
		{Parent{Traceparent: "00-" + parentTrace + "-" + parentSpan + "-03"}, KindClient, Call{Method: "tools/list"}, nil},
		{Parent{Traceparent: "01-" + parentTrace + "-" + parentSpan + "-01-extra", Tracestate: "bad state"}, KindClient, Call{Method: "tools/list"}, nil},
	}

	cap := &captureExporter{}
	tr, err := build(Config{Ratio: 1, Interval: time.Hour}, cap, nil, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Shutdown(context.Background())
	var spans []*Span
	base := time.Unix(1700000000, 123456789)
	for i, c := range cases {
		sp := tr.Start(c.parent, c.kind, c.call, base.Add(time.Duration(i)*time.Second))
		for _, s := range c.steps {
			if s.isStatus {
				sp.Status(s.code, s.http, s.toolErr)
			} else {
				sp.Decision(s.decision, s.rule, s.reason)
			}
		}
		sp.End(base.Add(time.Duration(i)*time.Second + time.Duration(i+1)*time.Millisecond))
		spans = append(spans, sp)
	}
	if err := tr.flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	if len(cap.bodies) != 1 {
		t.Fatalf("%d exports", len(cap.bodies))
	}

	// The SDK's spans, with the same ids, times and calls.
	ids := &fixedIDs{}
	mem := tracetest.NewInMemoryExporter()
	tp2 := sdktrace.NewTracerProvider(sdktrace.WithResource(newResource(DefaultServiceName)), sdktrace.WithIDGenerator(ids),
		sdktrace.WithSampler(sdktrace.ParentBased(sdktrace.AlwaysSample())), sdktrace.WithSyncer(mem))
	str := tp2.Tracer(scopeName)
	for i, c := range cases {
		my := spans[i]
		ids.tid, ids.sid = my.tid, my.sid
		ctx := propagation.TraceContext{}.Extract(context.Background(), propagation.MapCarrier{"traceparent": c.parent.Traceparent, "tracestate": c.parent.Tracestate})
		_, sp := str.Start(ctx, sdkSpanName(&c.call), trace.WithSpanKind(sdkKinds[c.kind]), trace.WithTimestamp(my.start),
			trace.WithAttributes(sdkAttrs(&c.call)...))
		denied, ev := false, 0
		errTyp := ""
		for _, s := range c.steps {
			if s.isStatus {
				switch {
				case s.toolErr:
					errTyp = "tool_error"
				case s.code != 0:
					errTyp = strconv.FormatInt(s.code, 10)
				case s.http >= 400:
					errTyp = strconv.Itoa(s.http)
				}
				switch {
				case s.code != 0:
					sp.SetAttributes(attribute.String("rpc.response.status_code", strconv.FormatInt(s.code, 10)))
				case s.http != 0:
					sp.SetAttributes(attribute.String("rpc.response.status_code", strconv.Itoa(s.http)))
				}
				if errTyp != "" {
					sp.SetAttributes(attribute.String("error.type", errTyp))
					if !denied {
						sp.SetStatus(codes.Error, errTyp)
					}
				}
				continue
			}
			if s.decision != "" {
				sp.SetAttributes(attribute.String("mcpintercept.decision", s.decision))
			}
			if s.rule != "" {
				sp.SetAttributes(attribute.String("mcpintercept.rule", s.rule))
			}
			if denial(s.decision) {
				denied = true
				desc := s.reason
				if desc == "" {
					desc = s.decision
				}
				sp.SetStatus(codes.Error, desc)
				a := []attribute.KeyValue{attribute.String("mcpintercept.decision", s.decision)}
				if s.rule != "" {
					a = append(a, attribute.String("mcpintercept.rule", s.rule))
				}
				if s.reason != "" {
					a = append(a, attribute.String("mcpintercept.reason", s.reason))
				}
				sp.AddEvent("mcpintercept.denied", trace.WithAttributes(a...), trace.WithTimestamp(my.events[ev].at))
				ev++
			}
		}
		sp.End(trace.WithTimestamp(my.endT))
	}
	var sdkBody []byte
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		sdkBody, _ = io.ReadAll(r.Body)
	}))
	defer srv.Close()
	exp, err := otlptracehttp.New(context.Background(), otlptracehttp.WithEndpointURL(srv.URL+"/v1/traces"))
	if err != nil {
		t.Fatal(err)
	}
	if err := exp.ExportSpans(context.Background(), mem.GetSpans().Snapshots()); err != nil {
		t.Fatal(err)
	}

	var mine, sdk coltracepb.ExportTraceServiceRequest
	if err := proto.Unmarshal(cap.bodies[0], &mine); err != nil {
		t.Fatalf("our request does not decode: %v", err)
	}
	if err := proto.Unmarshal(sdkBody, &sdk); err != nil {
		t.Fatal(err)
	}
	if n := len(sdk.ResourceSpans[0].ScopeSpans[0].Spans); n != len(cases) {
		t.Fatalf("SDK exported %d spans", n)
	}
	if !proto.Equal(&mine, &sdk) {
		t.Errorf("requests differ\nours: %s\nSDK:  %s", prototext.Format(&mine), prototext.Format(&sdk))
	}
}
