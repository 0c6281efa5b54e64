// Package tracing is the appliance's OpenTelemetry: one span per MCP call (Level 2: per
// JSON-RPC request in either direction; Level 1: per HTTP request; opaque and passthrough: per
// connection) with the MCP semantic conventions (OpenTelemetry docs/gen-ai/mcp.md), exported
// over OTLP (http/protobuf or grpc) by the package's own encoder (export.go: the SDK's span and
// export path cost ~25 µs of CPU per span, too much at line rate; the wire content is the
// same), and the mcp.client.operation.duration histogram on the Prometheus endpoint and over
// OTLP (the SDK's metrics). Export
// never blocks the data path: spans go through a bounded queue (queue.go: the SDK's batch
// processor does not say what it drops, so ours stands in its place) and those it drops (the
// queue full, or their export failed) are counted in mcpintercept_spans_dropped_total.
//
// A nil *Tracer is tracing off: every method is a no-op on it and on the nil *Span it returns,
// so callers need no checks.
package tracing

import (
	"context"
	"log/slog"
	"net"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Config is the telemetry.otlp section.
type Config struct {
	Endpoint    string            // host:port or URL of the OTLP receiver ("" off)
	Protocol    string            // "http/protobuf" (default) or "grpc"
	Headers     map[string]string // sent with every export (e.g. an API key; never logged)
	Insecure    bool              // plaintext to the receiver (default: TLS)
	CAFile      string            // PEM roots for the receiver's certificate (default: system)
	Ratio       float64           // parent-based ratio sampling of new roots, 0..1 (config's default 1; 0 here is 0: set it)
	MaxQueue    int               // spans held for export (default 2048); past it dropped, counted
	MaxBatch    int               // spans per export (default 512)
	Interval    time.Duration     // batch timeout (default 5s)
	ServiceName string            // service.name (default "mcpintercept")
	// Dial, when set, reaches the receiver (the bypass dialer, so that the appliance never
	// intercepts its own exports).
	Dial func(ctx context.Context, network, addr string) (net.Conn, error)
}

// Kind says where a span's call goes.
type Kind int

const (
	KindClient   Kind = iota // toward the server (a client→server request)
	KindServer               // a server→client request, answered by the client
	KindInternal             // a connection (opaque, passthrough)
)

// Call is what a span is about; the tracer turns it into the conventions' attributes.
type Call struct {
	Method          string // mcp.method.name ("" for a Level 1 request without one, or a connection)
	Tool            string // gen_ai.tool.name (tools/call)
	Prompt          string // gen_ai.prompt.name (prompts/get)
	ResourceURI     string // mcp.resource.uri (resources/read), credentials already scrubbed
	RequestID       string // jsonrpc.request.id (the id as its JSON text, quotes removed for a string)
	ProtocolVersion string // mcp.protocol.version
	SessionID       string // mcp.session.id (Level 2 passes its hashed session key, never the raw id)
	ServerAddress   string // server.address: the name the client addressed (SNI, Host) or the IP
	ServerPort      int    // server.port
	Direction       string // client_to_server | server_to_client (ours: mcpintercept.direction)
	HTTPMethod      string // Level 1: http.request.method
	Path            string // Level 1: url.path
	// Flow-level attributes, ours.
	Route, TLS, Mechanism string
	ClientAddress         string // client.address
	ClientPort            int
	PID, UID              uint32 // process identity when eBPF knows it (0: absent)
	Comm, Exe             string
}

// Parent is the W3C trace context a request carried: params._meta's when it had one, else the
// HTTP headers'. Invalid or empty values make the span a new root. Baggage is accepted and not
// recorded (the SDK put none on its spans either).
type Parent struct {
	Traceparent, Tracestate, Baggage string
}

// Open builds the tracer of cfg (nil, nil when cfg.Endpoint is ""); reg receives
// mcp_client_operation_duration_seconds and mcpintercept_spans_dropped_total.
func Open(ctx context.Context, cfg Config, reg prometheus.Registerer, log *slog.Logger) (*Tracer, error) {
	return open(ctx, cfg, reg, log)
}

// Start begins the span of one call with parent as its parent (a root when invalid), at start.
// Its name is the conventions' "{mcp.method.name} {target}" (target: the tool or prompt; the
// conventions keep the resource URI out of the name by default, for its cardinality), plain
// "{mcp.method.name}" without a target, or "HTTP {method}" / "connection" when there is no MCP
// method.
func (t *Tracer) Start(parent Parent, kind Kind, c Call, start time.Time) *Span {
	if t == nil {
		return nil
	}
	return t.start(parent, kind, c, start)
}

// Shutdown flushes what it can within ctx and stops exporting.
func (t *Tracer) Shutdown(ctx context.Context) error {
	if t == nil {
		return nil
	}
	return t.shutdown(ctx)
}

// Decision records the appliance's judgement: mcpintercept.decision and .rule, and for a
// denial (deny, rate_limited, quarantine) an error status with the reason and an event.
func (s *Span) Decision(decision, rule, reason string) {
	if s == nil {
		return
	}
	s.decision(decision, rule, reason)
}

// Status records the answer: rpc.response.status_code (the JSON-RPC error code, or the HTTP
// status at Level 1), error.type ("tool_error" for a result with isError, the code otherwise).
func (s *Span) Status(jsonrpcCode int64, httpStatus int, toolError bool) {
	if s == nil {
		return
	}
	s.status(jsonrpcCode, httpStatus, toolError)
}

// End ends the span at end and records mcp.client.operation.duration for it.
func (s *Span) End(end time.Time) {
	if s == nil {
		return
	}
	s.end(end)
}

// TraceID and SpanID are the span's ids in lower-case hex ("" on a nil span).
func (s *Span) TraceID() string {
	if s == nil {
		return ""
	}
	return s.traceID()
}

func (s *Span) SpanID() string {
	if s == nil {
		return ""
	}
	return s.spanID()
}

// Inject is the W3C context that makes this span the parent of the next hop: traceparent, and
// tracestate with an "mcpi" member naming the appliance's hop put first (the caller's members
// kept, bounded as W3C says). ok false on a nil or unsampled span.
func (s *Span) Inject() (traceparent, tracestate string, ok bool) {
	if s == nil {
		return "", "", false
	}
	return s.inject()
}
