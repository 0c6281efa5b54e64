package telemetry

import (
	"testing"
	"time"
)

// TestInterceptorPoints: a record of a flow with a mode (Sidecar) names the draft's interceptor
// point it was written at — pre-request for a client message, pre-response for a server message,
// post-response for the exchange and the connection — and a Transparent flow's records carry
// neither field.
func TestInterceptorPoints(t *testing.T) {
	var got []FlowRecord
	r := NewRecorder(NewMetrics(), SinkFunc(func(_ Kind, rec FlowRecord) { got = append(got, rec) }))
	f := r.ForFlow("10.0.0.1:3000", "10.0.0.2:4000")
	for _, mode := range []string{"Sidecar", ""} {
		got = nil
		base := FlowRecord{Mode: mode, MCPMethod: "tools/call"}
		up, down, ex := base, base, base
		up.Direction, down.Direction = ClientToServer, ServerToClient
		f.Message(&up, time.Millisecond)
		f.Message(&down, time.Millisecond)
		f.Exchange(&ex, time.Millisecond)
		want := []string{PointPreRequest, PointPreResponse, PointPostResponse}
		if mode == "" {
			want = []string{"", "", ""}
		}
		if len(got) != 3 {
			t.Fatalf("mode %q: %d records", mode, len(got))
		}
		for i, rec := range got {
			if rec.Point != want[i] || rec.Mode != mode {
				t.Errorf("mode %q record %d: mode %q point %q, want point %q", mode, i, rec.Mode, rec.Point, want[i])
			}
		}
	}
}
