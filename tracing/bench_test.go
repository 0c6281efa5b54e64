package tracing

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
)

// BenchmarkSpan is one call's span (Start, Decision, Status, End) with the exporter sending to
// a receiver that discards.
func BenchmarkSpan(b *testing.B) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/x-protobuf")
	}))
	defer srv.Close()
	tr, err := Open(context.Background(), Config{Endpoint: srv.URL, Ratio: 1}, prometheus.NewRegistry(), nil)
	if err != nil {
		b.Fatal(err)
	}
	defer tr.Shutdown(context.Background())
	parent := Parent{Traceparent: "00-" + parentTrace + "-" + parentSpan + "-01"}
	call := Call{Method: "tools/call", Tool: "echo", RequestID: "1", SessionID: "s", ServerAddress: "mcp.example",
		ServerPort: 443, Direction: "client_to_server", Route: "lab", TLS: "terminate", Mechanism: "ebpf",
		ClientAddress: "10.0.0.2", ClientPort: 40000}
	b.ReportAllocs()
	for b.Loop() {
		now := time.Now()
		sp := tr.Start(parent, KindClient, call, now)
		sp.Decision("allow", "", "no rule matched")
		sp.Status(0, 0, false)
		sp.End(now)
	}
}

// BenchmarkSpanNoExport is BenchmarkSpan's span work alone: the exporter discards in-process.
func BenchmarkSpanNoExport(b *testing.B) {
	tr, err := build(Config{Ratio: 1}, tracetest.NewNoopExporter(), nil, prometheus.NewRegistry(), nil)
	if err != nil {
		b.Fatal(err)
	}
	defer tr.Shutdown(context.Background())
	parent := Parent{Traceparent: "00-" + parentTrace + "-" + parentSpan + "-01"}
	call := Call{Method: "tools/call", Tool: "echo", RequestID: "1", SessionID: "s", ServerAddress: "mcp.example",
		ServerPort: 443, Direction: "client_to_server", Route: "lab", TLS: "terminate", Mechanism: "ebpf",
		ClientAddress: "10.0.0.2", ClientPort: 40000}
	b.ReportAllocs()
	for b.Loop() {
		now := time.Now()
		sp := tr.Start(parent, KindClient, call, now)
		sp.Decision("allow", "", "no rule matched")
		sp.Status(0, 0, false)
		sp.End(now)
	}
}
