package telemetry

import (
	"slices"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
)

// gathered finds the series of family name whose labels include want; nil when there is none.
func gathered(t *testing.T, m *Metrics, name string, want map[string]string) *dto.Metric {
	t.Helper()
	fams, err := m.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range fams {
		if f.GetName() != name {
			continue
		}
	series:
		for _, s := range f.GetMetric() {
			have := map[string]string{}
			for _, l := range s.GetLabel() {
				have[l.GetName()] = l.GetValue()
			}
			for k, v := range want {
				if have[k] != v {
					continue series
				}
			}
			return s
		}
	}
	return nil
}

func counter(t *testing.T, m *Metrics, name string, labels map[string]string) float64 {
	t.Helper()
	if s := gathered(t, m, name, labels); s != nil {
		return s.GetCounter().GetValue()
	}
	return 0
}

func observations(t *testing.T, m *Metrics, name string, labels map[string]string) (uint64, float64) {
	t.Helper()
	if s := gathered(t, m, name, labels); s != nil {
		return s.GetHistogram().GetSampleCount(), s.GetHistogram().GetSampleSum()
	}
	return 0, 0
}

type kindRecord struct {
	sink string
	kind Kind
	rec  FlowRecord
}

// recording is a list of sinks that note what they are given, in the order they are given it.
type recording struct{ got []kindRecord }

func (r *recording) sink(name string) Sink {
	return SinkFunc(func(k Kind, rec FlowRecord) { r.got = append(r.got, kindRecord{name, k, rec}) })
}

// TestRecorderKinds: each kind of record goes to every sink in order, with its kind, its duration
// set from the call, and the metrics the engine's three writers updated: an exchange counts its
// bytes, its request and its duration; a message its request, and its duration only when it went
// client to server (a response's duration is its request's), never the exchange's bytes; the end
// of a flow its refusal, upstream error, bytes and lifetime, with or without a record.
func TestRecorderKinds(t *testing.T) {
	m := NewMetrics()
	var r recording
	rc := NewRecorder(m, r.sink("first"), nil, r.sink("second"))
	fr := rc.ForFlow("10.200.2.2:8080", "10.200.1.2")
	req := map[string]string{"orig_dst": "10.200.2.2:8080", "client": "10.200.1.2", "mcp_method": "tools/call",
		"mcp_name": "echo", "decision": "allow"}
	dur := map[string]string{"mcp_method": "tools/call", "status": "200"}

	ex := FlowRecord{Flow: "f1", Level: 1, MCPMethod: "tools/call", MCPName: "echo", Status: 200, Decision: "allow",
		BytesUp: 100, BytesDown: 200}
	fr.Exchange(&ex, 1500*time.Millisecond)
	if got := counter(t, m, "mcpintercept_requests_total", req); got != 1 {
		t.Fatalf("requests after an exchange: %v", got)
	}
	if n, sum := observations(t, m, "mcpintercept_request_duration_seconds", dur); n != 1 || sum != 1.5 {
		t.Fatalf("request duration after an exchange: %d observations, sum %v", n, sum)
	}
	if up, down := counter(t, m, "mcpintercept_bytes_total", map[string]string{"direction": "up"}),
		counter(t, m, "mcpintercept_bytes_total", map[string]string{"direction": "down"}); up != 100 || down != 200 {
		t.Fatalf("bytes after an exchange: up %v down %v", up, down)
	}

	call := FlowRecord{Flow: "f1", Level: 2, MCPMethod: "tools/call", MCPName: "echo", Status: 200, Decision: "allow",
		Direction: ClientToServer, BytesUp: 1000, BytesDown: 2000}
	resp := call
	resp.Direction, resp.BytesUp, resp.BytesDown = ServerToClient, 0, 0
	fr.Message(&call, 250*time.Millisecond)
	fr.Message(&resp, 250*time.Millisecond)
	if got := counter(t, m, "mcpintercept_requests_total", req); got != 3 {
		t.Fatalf("requests after two messages: %v, want 3", got)
	}
	if n, _ := observations(t, m, "mcpintercept_request_duration_seconds", dur); n != 2 {
		t.Fatalf("request duration after a request and its response: %d observations, want 2", n)
	}
	if up := counter(t, m, "mcpintercept_bytes_total", map[string]string{"direction": "up"}); up != 100 {
		t.Fatalf("a message counted its exchange's bytes: up %v", up)
	}
	fr.Bytes(1000, 2000)
	if up := counter(t, m, "mcpintercept_bytes_total", map[string]string{"direction": "up"}); up != 1100 {
		t.Fatalf("bytes after Bytes: up %v", up)
	}

	opaque := FlowRecord{Flow: "f2"}
	rc.Flow(&opaque, FlowEnd{UpstreamErr: "reset", Up: 7, Down: 9, Duration: 2 * time.Second, Dispatched: true})
	rc.End(FlowEnd{Refused: "max_flows", Duration: time.Second}) // refused before dispatch: no lifetime
	if got := counter(t, m, "mcpintercept_upstream_errors_total", map[string]string{"kind": "reset"}); got != 1 {
		t.Fatalf("upstream errors: %v", got)
	}
	if got := counter(t, m, "mcpintercept_flows_refused_total", map[string]string{"reason": "max_flows"}); got != 1 {
		t.Fatalf("refusals: %v", got)
	}
	if n, sum := observations(t, m, "mcpintercept_flow_duration_seconds", nil); n != 1 || sum != 2 {
		t.Fatalf("flow duration: %d observations, sum %v; want the dispatched flow's only", n, sum)
	}
	if up := counter(t, m, "mcpintercept_bytes_total", map[string]string{"direction": "up"}); up != 1107 {
		t.Fatalf("bytes after a flow: up %v", up)
	}

	type seen struct {
		sink, flow, dir string
		kind            Kind
		ms, up, down    int64
	}
	var got []seen
	for _, g := range r.got {
		got = append(got, seen{g.sink, g.rec.Flow, g.rec.Direction, g.kind, g.rec.DurationMS, g.rec.BytesUp, g.rec.BytesDown})
	}
	want := []seen{
		{"first", "f1", "", KindExchange, 1500, 100, 200}, {"second", "f1", "", KindExchange, 1500, 100, 200},
		{"first", "f1", ClientToServer, KindMessage, 250, 1000, 2000}, {"second", "f1", ClientToServer, KindMessage, 250, 1000, 2000},
		{"first", "f1", ServerToClient, KindMessage, 250, 0, 0}, {"second", "f1", ServerToClient, KindMessage, 250, 0, 0},
		{"first", "f2", "", KindFlow, 2000, 7, 9}, {"second", "f2", "", KindFlow, 2000, 7, 9},
	}
	if !slices.Equal(got, want) {
		t.Fatalf("sinks got\n%v\nwant\n%v", got, want)
	}
}

// TestRecorderSinkOwnsItsCopy: a sink may keep the record it was given; the caller reusing its
// record for the next message does not change it.
func TestRecorderSinkOwnsItsCopy(t *testing.T) {
	var kept []FlowRecord
	rc := NewRecorder(NewMetrics(), SinkFunc(func(_ Kind, r FlowRecord) { kept = append(kept, r) }))
	fr := rc.ForFlow("10.0.0.2:80", "10.0.0.1")
	rec := FlowRecord{Flow: "f", JSONRPCID: "1"}
	fr.Message(&rec, 0)
	rec.JSONRPCID = "2"
	fr.Message(&rec, 0)
	if kept[0].JSONRPCID != "1" || kept[1].JSONRPCID != "2" {
		t.Fatalf("kept ids %q, %q", kept[0].JSONRPCID, kept[1].JSONRPCID)
	}
}

// TestRecorderToFlowLog: the flow log is one sink; a record goes through the recorder into the
// log as the line AppendJSON makes of it.
func TestRecorderToFlowLog(t *testing.T) {
	var w safeBuffer
	fl := NewFlowLog(&w, 16, quietLog(), nil)
	rc := NewRecorder(NewMetrics(), fl)
	rec := FlowRecord{Flow: "f", Level: 0, TLS: "passthrough", Decision: "allow"}
	rc.Flow(&rec, FlowEnd{Up: 3, Down: 4, Duration: 5 * time.Millisecond})
	fl.Close()
	want := FlowRecord{Flow: "f", TLS: "passthrough", Decision: "allow", BytesUp: 3, BytesDown: 4, DurationMS: 5}
	if got, line := w.String(), string(want.AppendJSON(nil))+"\n"; got != line {
		t.Fatalf("flow log\n got %q\nwant %q", got, line)
	}
}
