//go:build !notracing

package tracing

import (
	"context"
	"encoding/hex"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/protobuf/proto"
)

// FuzzParent: whatever trace context a peer sends, Start makes a span (the parent's trace when
// valid), and Inject's tracestate is ours first and within the W3C bounds.
func FuzzParent(f *testing.F) {
	f.Add("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", "rojo=00f067aa0ba902b7,congo=t61rcWkgMzE", "userId=alice")
	f.Add("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00", "mcpi=1,mcpi=2", "")
	f.Add("ff-zz", ",,,=", "a=b;c")
	f.Add("00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01", "", "")
	f.Add("01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-03-x", "a=1", "")
	f.Add("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-05", "", "")
	tr, err := build(Config{Ratio: 1}, nopExporter{}, nil, nil, nil)
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { tr.Shutdown(context.Background()) })
	f.Fuzz(func(t *testing.T, tp, ts, bag string) {
		// parentContext reads the context as the SDK's W3C propagator does.
		want := trace.SpanContextFromContext(propagation.TraceContext{}.Extract(context.Background(),
			propagation.MapCarrier{"traceparent": tp, "tracestate": ts}))
		if got := tr.parentContext(Parent{Traceparent: tp, Tracestate: ts}); !got.Equal(want) {
			t.Fatalf("parentContext(%q, %q) = %v, the propagator's %v", tp, ts, got, want)
		}
		sp := tr.Start(Parent{Traceparent: tp, Tracestate: ts, Baggage: bag}, KindClient, Call{Method: "ping"}, time.Now())
		if len(sp.TraceID()) != 32 || len(sp.SpanID()) != 16 {
			t.Fatalf("ids %q %q", sp.TraceID(), sp.SpanID())
		}
		if p, s, ok := sp.Inject(); ok {
			if !strings.HasPrefix(s, "mcpi="+sp.SpanID()) || len(s) > maxStateLen || strings.Count(s, ",") >= maxStateMembers {
				t.Fatalf("tracestate %q", s)
			}
			if strings.Count(s, "mcpi=") != 1 {
				t.Fatalf("mcpi twice: %q", s)
			}
			if len(p) != 55 || !strings.Contains(p, sp.TraceID()) {
				t.Fatalf("traceparent %q", p)
			}
		}
		sp.End(time.Now())
	})
}

// FuzzEndpoint: parseEndpoint never panics and what it accepts has a host and port.
func FuzzEndpoint(f *testing.F) {
	for _, s := range []string{"collector:4318", "http://c", "https://c.example:443/otlp/v1/traces", "ftp://x", "[::1]:4317", "http://[::1]/p"} {
		f.Add(s, false)
	}
	f.Fuzz(func(t *testing.T, ep string, grpc bool) {
		cfg := Config{Endpoint: ep}
		if grpc {
			cfg.Protocol = ProtocolGRPC
		}
		e, err := parseEndpoint(cfg)
		if err != nil {
			return
		}
		if _, _, err := splitHostPort(e.hostport); err != nil {
			t.Fatalf("%q → hostport %q: %v", ep, e.hostport, err)
		}
	})
}

func splitHostPort(s string) (string, string, error) { return net.SplitHostPort(s) }

// FuzzEncode: whatever the peers put in a call (invalid UTF-8 included), the export request
// decodes with the OTLP proto types and carries the values (invalid UTF-8 replaced).
func FuzzEncode(f *testing.F) {
	f.Add("tools/call", "echo", "file:///a", "deny", "r", "reason", int64(-32601), 443)
	f.Add("prompts/get", "p\xff", "\xc3(", "allow", "", "", int64(0), 0)
	f.Add("", "", "", "", "", "", int64(1)<<62, 1<<20)
	cap := &captureExporter{}
	tr, err := build(Config{Ratio: 1, Interval: time.Hour}, cap, nil, nil, nil)
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { tr.Shutdown(context.Background()) })
	f.Fuzz(func(t *testing.T, method, tool, uri, decision, rule, reason string, code int64, port int) {
		c := Call{Method: method, Tool: tool, ResourceURI: uri, ServerPort: port, Route: reason}
		sp := tr.Start(Parent{}, KindClient, c, time.Now())
		sp.Decision(decision, rule, reason)
		sp.Status(code, port, false)
		sp.End(time.Now())
		cap.mu.Lock()
		cap.bodies = cap.bodies[:0]
		cap.mu.Unlock()
		if err := tr.flush(context.Background()); err != nil {
			t.Fatal(err)
		}
		cap.mu.Lock()
		defer cap.mu.Unlock()
		if len(cap.bodies) != 1 {
			t.Fatalf("%d exports", len(cap.bodies))
		}
		var req coltracepb.ExportTraceServiceRequest
		if err := proto.Unmarshal(cap.bodies[0], &req); err != nil {
			t.Fatalf("request does not decode: %v", err)
		}
		s := req.ResourceSpans[0].ScopeSpans[0].Spans
		if len(s) != 1 || hex.EncodeToString(s[0].SpanId) != sp.SpanID() {
			t.Fatalf("spans %v", s)
		}
		am := attrMap(s[0].Attributes)
		for k, v := range map[string]string{"mcp.method.name": method, "mcp.resource.uri": uri, "mcpintercept.decision": decision,
			"mcpintercept.rule": rule, "mcpintercept.route": reason} {
			if am[k] != validUTF8(v) {
				t.Errorf("%s = %q, want %q", k, am[k], v)
			}
		}
		if port > 0 && am["server.port"] != strconv.Itoa(port) {
			t.Errorf("server.port %q", am["server.port"])
		}
		if method != "" && !strings.HasPrefix(s[0].Name, validUTF8(method)) {
			t.Errorf("name %q", s[0].Name)
		}
	})
}
