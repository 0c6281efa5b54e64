//go:build !notracing

package tracing

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// BenchmarkSpan is one call's span (Start, Decision, Status, End) with the exporter sending to
// a receiver that discards.
func BenchmarkSpan(b *testing.B) {
	srv := discardingReceiver(b)
	tr, err := Open(context.Background(), Config{Endpoint: srv.URL, Ratio: 1}, prometheus.NewRegistry(), nil)
	if err != nil {
		b.Fatal(err)
	}
	defer tr.Shutdown(context.Background())
	b.ReportAllocs()
	for b.Loop() {
		benchSpan(tr)
	}
}

// BenchmarkSpanNoExport is BenchmarkSpan's span work alone: the exporter discards in-process.
func BenchmarkSpanNoExport(b *testing.B) {
	tr, err := build(Config{Ratio: 1}, nopExporter{}, nil, prometheus.NewRegistry(), nil)
	if err != nil {
		b.Fatal(err)
	}
	defer tr.Shutdown(context.Background())
	b.ReportAllocs()
	for b.Loop() {
		benchSpan(tr)
	}
}

// BenchmarkSpanCPU is BenchmarkSpan with the export counted: b.N spans, then a flush, and the
// process CPU time (user+system, every goroutine: the span work, the batching, the protobuf
// encoding, the HTTP client and the in-process receiver that discards) divided by b.N, reported
// as cpu-ns/span. On a shared 2-core appliance that, not wall time, is what tracing costs the
// data path.
func BenchmarkSpanCPU(b *testing.B) {
	srv := discardingReceiver(b)
	// A queue that holds every span of the run: none dropped, each one exported.
	tr, err := Open(context.Background(), Config{Endpoint: srv.URL, Ratio: 1, MaxQueue: 1 << 16}, prometheus.NewRegistry(), nil)
	if err != nil {
		b.Fatal(err)
	}
	defer tr.Shutdown(context.Background())
	ctx := context.Background()
	b.ReportAllocs()
	c0 := cpuTime()
	n := 0
	for b.Loop() {
		benchSpan(tr)
		if n++; n%4096 == 0 {
			tr.flush(ctx) // the export keeps up, as it does at the appliance's rate
		}
	}
	if err := tr.flush(ctx); err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(float64(cpuTime()-c0)/float64(n), "cpu-ns/span")
}

// cpuTime is the process's user+system CPU time in nanoseconds.
func cpuTime() int64 {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return ru.Utime.Nano() + ru.Stime.Nano()
}

// discardingReceiver is an OTLP/HTTP receiver that reads and discards every request.
func discardingReceiver(b *testing.B) *httptest.Server {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/x-protobuf")
	}))
	b.Cleanup(srv.Close)
	return srv
}

var (
	benchParent = Parent{Traceparent: "00-" + parentTrace + "-" + parentSpan + "-01"}
	benchCall   = Call{Method: "tools/call", Tool: "echo", RequestID: "1", SessionID: "s", ServerAddress: "mcp.example",
		ServerPort: 443, Direction: "client_to_server", Route: "lab", TLS: "terminate", Mechanism: "ebpf",
		ClientAddress: "10.0.0.2", ClientPort: 40000}
)

// benchSpan is one call's span: Start, Decision, Status, End.
func benchSpan(tr *Tracer) {
	now := time.Now()
	sp := tr.Start(benchParent, KindClient, benchCall, now)
	sp.Decision("allow", "", "no rule matched")
	sp.Status(0, 0, false)
	sp.End(now)
}
