package tracing

import (
	"context"
	"net"
	"strings"
	"testing"
	"time"
)

// FuzzParent: whatever trace context a peer sends, Start makes a span (the parent's trace when
// valid), and Inject's tracestate is ours first and within the W3C bounds.
func FuzzParent(f *testing.F) {
	f.Add("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", "rojo=00f067aa0ba902b7,congo=t61rcWkgMzE", "userId=alice")
	f.Add("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00", "mcpi=1,mcpi=2", "")
	f.Add("ff-zz", ",,,=", "a=b;c")
	tr, err := build(Config{Ratio: 1}, nopExporter{}, nil, nil, nil)
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { tr.Shutdown(context.Background()) })
	f.Fuzz(func(t *testing.T, tp, ts, bag string) {
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
