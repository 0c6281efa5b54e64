package level2

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"mcpintercept/exchange"
	"mcpintercept/level1"
	"mcpintercept/tracing"
)

// BenchmarkExchangeLevel2Tracing is BenchmarkExchangeLevel2's exchange (no rules) with tracing
// off, on (every span sampled and exported to a receiver that answers without decoding), and
// on with inject (header and _meta rewritten, the body re-framed), in one run.
func BenchmarkExchangeLevel2Tracing(b *testing.B) {
	sink := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/x-protobuf")
	}))
	defer sink.Close()
	for _, c := range []struct {
		name       string
		on, inject bool
	}{{"off", false, false}, {"on", true, false}, {"inject", true, true}} {
		b.Run(c.name, func(b *testing.B) {
			var tr *tracing.Tracer
			if c.on {
				var err error
				tr, err = tracing.Open(context.Background(), tracing.Config{Endpoint: sink.URL, Insecure: true, Ratio: 1,
					Interval: 100 * time.Millisecond}, nil, nil)
				if err != nil {
					b.Fatal(err)
				}
				defer tr.Shutdown(context.Background())
			}
			benchExchange(b, func() []exchange.Stage {
				f := &Flow{Sessions: NewSessions(0), Record: func(*Record) {}, Tracer: tr, TraceInject: c.inject,
					Trace: tracing.Call{Route: "bench", TLS: "plaintext", ServerAddress: "mcp.example", ServerPort: 443}}
				return []exchange.Stage{level1.NewClassifier(level1.Guards{}), f.Stage()}
			})
		})
	}
}
