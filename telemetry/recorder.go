package telemetry

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Kind is what one record stands for.
type Kind uint8

const (
	// KindFlow is the one record of a whole connection that was not read as HTTP exchanges:
	// opaque, passthrough, or refused before its first exchange.
	KindFlow Kind = iota + 1
	// KindExchange is the record of one HTTP request and its response (Level 1, and Level 2
	// exchanges that carried no JSON-RPC message).
	KindExchange
	// KindMessage is the record of one JSON-RPC message (Level 2).
	KindMessage
)

func (k Kind) String() string {
	switch k {
	case KindFlow:
		return "flow"
	case KindExchange:
		return "exchange"
	case KindMessage:
		return "message"
	}
	return "unknown"
}

// The values of a record's direction key (FlowRecord.Direction).
const (
	ClientToServer = "client_to_server"
	ServerToClient = "server_to_client"
)

// Sink takes the records a Recorder writes. Record runs on the data path, on the flow's
// goroutine, once per record and in the order the flow made them; it must not block: a sink that
// does I/O queues and counts what it drops, as FlowLog does. The record is the sink's own copy.
type Sink interface {
	Record(k Kind, r FlowRecord)
}

// SinkFunc is a function used as a Sink.
type SinkFunc func(k Kind, r FlowRecord)

// Record implements Sink.
func (f SinkFunc) Record(k Kind, r FlowRecord) { f(k, r) }

// Recorder is the one place a flow record is written. Each of its methods updates the metrics
// that go with one kind of record (requests, request duration, bytes; for a flow's end, refusals,
// upstream errors and the flow's lifetime) and hands the record to every sink in order, so a new
// consumer of records (an audit trail, a tracer) is one more sink, not a change to the data path.
// It is safe for concurrent use.
type Recorder struct {
	m     *Metrics
	sinks []Sink
}

// NewRecorder writes records to sinks, in that order, and counts them in m (not nil). Nil sinks
// are left out, so that an optional one can be passed as it is.
func NewRecorder(m *Metrics, sinks ...Sink) *Recorder {
	r := &Recorder{m: m}
	for _, s := range sinks {
		if s != nil {
			r.sinks = append(r.sinks, s)
		}
	}
	return r
}

// Metrics is the metric set the recorder counts in.
func (r *Recorder) Metrics() *Metrics { return r.m }

func (r *Recorder) write(k Kind, rec *FlowRecord) {
	if rec.Mode != "" && rec.Point == "" {
		switch {
		case k == KindMessage && rec.Direction == ClientToServer:
			rec.Point = PointPreRequest
		case k == KindMessage:
			rec.Point = PointPreResponse
		default:
			rec.Point = PointPostResponse
		}
	}
	for _, s := range r.sinks {
		s.Record(k, *rec)
	}
}

// FlowEnd is how a flow ended, as its metrics count it.
type FlowEnd struct {
	// Refused is the mcpintercept_flows_refused_total reason of a refused flow, "" otherwise;
	// UpstreamErr the mcpintercept_upstream_errors_total kind (dial, tls, reset) of a failure on
	// the upstream side, "" otherwise.
	Refused, UpstreamErr string
	// Up and Down are the bytes forwarded each way that no exchange record counted.
	Up, Down int64
	// Duration is the flow's lifetime. Dispatched says the flow reached the pipeline; only then
	// is its lifetime observed in mcpintercept_flow_duration_seconds.
	Duration   time.Duration
	Dispatched bool
}

// End counts the end of a flow whose records were written per exchange or per message (or that
// gets none).
func (r *Recorder) End(e FlowEnd) {
	m := r.m
	if e.Refused != "" {
		m.FlowsRefused.WithLabelValues(e.Refused).Inc()
	}
	if e.UpstreamErr != "" {
		m.UpstreamErrors.WithLabelValues(e.UpstreamErr).Inc()
	}
	if e.Up > 0 {
		m.Bytes.WithLabelValues("up").Add(float64(e.Up))
	}
	if e.Down > 0 {
		m.Bytes.WithLabelValues("down").Add(float64(e.Down))
	}
	if e.Dispatched {
		m.FlowDuration.Observe(e.Duration.Seconds())
	}
}

// Flow counts the end of a flow as End does and writes its one record (KindFlow), whose bytes and
// duration it sets from e.
func (r *Recorder) Flow(rec *FlowRecord, e FlowEnd) {
	r.End(e)
	rec.BytesUp, rec.BytesDown = e.Up, e.Down
	rec.DurationMS = e.Duration.Milliseconds()
	r.write(KindFlow, rec)
}

// FlowRecorder writes the records of one connection's exchanges and messages. Its metric
// children are resolved once, when the connection starts; it is a small value, safe for
// concurrent use (a flow's request and response sides may record at the same time).
type FlowRecorder struct {
	r        *Recorder
	reqs     *FlowRequests
	up, down prometheus.Counter
}

// ForFlow is the recorder of one connection from client to origDst (both "addr:port" as the
// requests counter labels them).
func (r *Recorder) ForFlow(origDst, client string) FlowRecorder {
	return FlowRecorder{r: r, reqs: r.m.Requests.ForFlow(origDst, client),
		up: r.m.Bytes.WithLabelValues("up"), down: r.m.Bytes.WithLabelValues("down")}
}

// Exchange writes the record of one HTTP exchange (KindExchange) that took d: it counts the
// exchange's bytes (rec.BytesUp, rec.BytesDown), the request under its MCP method, name and
// decision, and its duration under its MCP method and status, and sets rec's duration from d.
func (f FlowRecorder) Exchange(rec *FlowRecord, d time.Duration) {
	f.Bytes(rec.BytesUp, rec.BytesDown)
	f.reqs.Inc(rec.MCPMethod, rec.MCPName, rec.Decision)
	f.r.m.RequestDuration.Observe(rec.MCPMethod, rec.Status, d.Seconds())
	rec.DurationMS = d.Milliseconds()
	f.r.write(KindExchange, rec)
}

// Message writes the record of one JSON-RPC message (KindMessage): it counts the message under
// its MCP method, name and decision and, for a client→server message, d (its request's duration)
// under its MCP method and status, and sets rec's duration from d. The exchange's bytes are not
// counted here but by Bytes, once per exchange, whatever number of messages it carried.
func (f FlowRecorder) Message(rec *FlowRecord, d time.Duration) {
	f.reqs.Inc(rec.MCPMethod, rec.MCPName, rec.Decision)
	if rec.Direction == ClientToServer {
		f.r.m.RequestDuration.Observe(rec.MCPMethod, rec.Status, d.Seconds())
	}
	rec.DurationMS = d.Milliseconds()
	f.r.write(KindMessage, rec)
}

// Bytes counts the bytes of an exchange whose records were its messages'.
func (f FlowRecorder) Bytes(up, down int64) {
	f.up.Add(float64(up))
	f.down.Add(float64(down))
}
