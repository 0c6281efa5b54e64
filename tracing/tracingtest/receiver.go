// Package tracingtest is an in-process OTLP/HTTP receiver for tests of the code that makes spans
// (engine, level2): it keeps the spans it is sent and answers metric exports.
package tracingtest

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	colmetricpb "go.opentelemetry.io/proto/otlp/collector/metrics/v1"
	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/proto"

	"mcpintercept/tracing"
)

// Receiver keeps the spans exported to it.
type Receiver struct {
	srv   *httptest.Server
	mu    sync.Mutex
	spans []*tracepb.Span
}

// New starts a receiver, closed when t ends.
func New(t testing.TB) *Receiver {
	r := &Receiver{}
	r.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		body, _ := io.ReadAll(req.Body)
		var out []byte
		switch req.URL.Path {
		case "/v1/traces":
			var m coltracepb.ExportTraceServiceRequest
			if proto.Unmarshal(body, &m) != nil {
				w.WriteHeader(400)
				return
			}
			r.mu.Lock()
			for _, rs := range m.ResourceSpans {
				for _, ss := range rs.ScopeSpans {
					r.spans = append(r.spans, ss.Spans...)
				}
			}
			r.mu.Unlock()
			out, _ = proto.Marshal(&coltracepb.ExportTraceServiceResponse{})
		case "/v1/metrics":
			out, _ = proto.Marshal(&colmetricpb.ExportMetricsServiceResponse{})
		default:
			w.WriteHeader(404)
			return
		}
		w.Header().Set("Content-Type", "application/x-protobuf")
		w.Write(out)
	}))
	t.Cleanup(r.srv.Close)
	return r
}

// URL is the receiver's endpoint.
func (r *Receiver) URL() string { return r.srv.URL }

// Tracer is a real tracer exporting to r, every root sampled, shut down when t ends.
func (r *Receiver) Tracer(t testing.TB) *tracing.Tracer {
	t.Helper()
	tr, err := tracing.Open(context.Background(), tracing.Config{Endpoint: r.srv.URL, Insecure: true, Ratio: 1,
		Interval: 50 * time.Millisecond}, nil, nil)
	if err != nil || tr == nil {
		t.Fatalf("tracing.Open: %v %v", tr, err)
	}
	t.Cleanup(func() { tr.Shutdown(context.Background()) })
	return tr
}

// Flushed shuts tr down (exporting what it holds) and returns the spans r got.
func (r *Receiver) Flushed(t testing.TB, tr *tracing.Tracer) []*tracepb.Span {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := tr.Shutdown(ctx); err != nil {
		t.Fatalf("shutdown: %v", err)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]*tracepb.Span(nil), r.spans...)
}
