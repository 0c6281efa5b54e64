package tracing

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/baggage"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/exporters/otlp/otlpmetric/otlpmetricgrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlpmetric/otlpmetrichttp"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/propagation"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	"mcpintercept/mcp"
)

// Defaults of Config's zero fields.
const (
	DefaultMaxQueue    = 2048
	DefaultMaxBatch    = 512
	DefaultInterval    = 5 * time.Second
	DefaultServiceName = "mcpintercept"
	ProtocolHTTP       = "http/protobuf"
	ProtocolGRPC       = "grpc"
)

// DurationBuckets are the explicit bucket boundaries (seconds) the MCP conventions give
// mcp.client.operation.duration.
var DurationBuckets = []float64{0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1, 2, 5, 10, 30, 60, 120, 300}

// Label bounds: a metric label takes the first maxLabelValues distinct values it sees, the rest
// are counted under "_OTHER" (tool names and error codes come from the peers).
const (
	maxLabelValues = 128
	maxLabelLen    = 128
	otherLabel     = "_OTHER"
)

// Tracer makes spans; safe for concurrent use.
type Tracer struct {
	tp     *sdktrace.TracerProvider
	tr     trace.Tracer
	proc   *queueProcessor
	mp     *sdkmetric.MeterProvider
	hist   metric.Float64Histogram
	prom   *prometheus.HistogramVec
	tc     propagation.TraceContext
	labels [3]boundedSet // method, error.type, tool
}

// Span is one call's span.
type Span struct {
	t      *Tracer
	s      trace.Span
	sc     trace.SpanContext
	start  time.Time
	method string
	tool   string
	errTyp string
	denied bool
	mu     sync.Mutex // Decision, Status and End may come from the two directions' goroutines
	ended  bool
}

func (c *Config) defaults() {
	if c.Protocol == "" {
		c.Protocol = ProtocolHTTP
	}
	if c.MaxQueue <= 0 {
		c.MaxQueue = DefaultMaxQueue
	}
	if c.MaxBatch <= 0 {
		c.MaxBatch = DefaultMaxBatch
	}
	if c.MaxBatch > c.MaxQueue {
		c.MaxBatch = c.MaxQueue
	}
	if c.Interval <= 0 {
		c.Interval = DefaultInterval
	}
	if c.ServiceName == "" {
		c.ServiceName = DefaultServiceName
	}
	if c.Ratio < 0 {
		c.Ratio = 0
	}
	if c.Ratio > 1 {
		c.Ratio = 1
	}
	if c.Dial == nil {
		c.Dial = (&net.Dialer{Timeout: 10 * time.Second}).DialContext
	}
}

// endpoint is cfg.Endpoint resolved: host:port, whether plaintext, and the URL paths of the
// trace and metric exports (http/protobuf; "" the defaults). A URL is a base as
// OTEL_EXPORTER_OTLP_ENDPOINT is ("http://collector:4318" → /v1/traces, /v1/metrics), or the
// traces URL itself when it ends in /v1/traces.
type endpoint struct {
	hostport            string
	insecure            bool
	tracePath, metrPath string
}

func parseEndpoint(cfg Config) (endpoint, error) {
	e := endpoint{hostport: cfg.Endpoint, insecure: cfg.Insecure}
	if strings.Contains(cfg.Endpoint, "://") {
		u, err := url.Parse(cfg.Endpoint)
		if err != nil {
			return e, fmt.Errorf("telemetry.otlp.endpoint: %v", err)
		}
		switch u.Scheme {
		case "http":
			e.insecure = true
		case "https":
		default:
			return e, fmt.Errorf("telemetry.otlp.endpoint: scheme %q (want http or https)", u.Scheme)
		}
		if u.Host == "" {
			return e, errors.New("telemetry.otlp.endpoint: no host")
		}
		e.hostport = u.Host
		if u.Port() == "" {
			port := "4318"
			if cfg.Protocol == ProtocolGRPC {
				port = "4317"
			}
			e.hostport = net.JoinHostPort(u.Hostname(), port)
		}
		p := strings.TrimSuffix(u.Path, "/")
		if p != "" {
			if base, ok := strings.CutSuffix(p, "/v1/traces"); ok {
				e.tracePath, e.metrPath = p, base+"/v1/metrics"
			} else {
				e.tracePath, e.metrPath = p+"/v1/traces", p+"/v1/metrics"
			}
		}
		return e, nil
	}
	if _, _, err := net.SplitHostPort(cfg.Endpoint); err != nil {
		return e, fmt.Errorf("telemetry.otlp.endpoint %q: want host:port or a URL", cfg.Endpoint)
	}
	return e, nil
}

func tlsConfig(cfg Config) (*tls.Config, error) {
	tc := &tls.Config{MinVersion: tls.VersionTLS12}
	if cfg.CAFile != "" {
		pem, err := os.ReadFile(cfg.CAFile)
		if err != nil {
			return nil, fmt.Errorf("telemetry.otlp.ca_file: %v", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("telemetry.otlp.ca_file %s: no PEM certificate", cfg.CAFile)
		}
		tc.RootCAs = pool
	}
	return tc, nil
}

func open(ctx context.Context, cfg Config, reg prometheus.Registerer, log *slog.Logger) (*Tracer, error) {
	if cfg.Endpoint == "" {
		return nil, nil
	}
	cfg.defaults()
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	ep, err := parseEndpoint(cfg)
	if err != nil {
		return nil, err
	}
	var tc *tls.Config
	if !ep.insecure {
		if tc, err = tlsConfig(cfg); err != nil {
			return nil, err
		}
	}
	var (
		sexp sdktrace.SpanExporter
		mexp sdkmetric.Exporter
	)
	switch cfg.Protocol {
	case ProtocolHTTP:
		hc := &http.Client{Transport: &http.Transport{
			DialContext:         cfg.Dial,
			TLSClientConfig:     tc,
			MaxIdleConnsPerHost: 2,
			IdleConnTimeout:     90 * time.Second,
			TLSHandshakeTimeout: 10 * time.Second,
			ForceAttemptHTTP2:   tc != nil,
		}}
		topts := []otlptracehttp.Option{otlptracehttp.WithEndpoint(ep.hostport), otlptracehttp.WithHTTPClient(hc)}
		mopts := []otlpmetrichttp.Option{otlpmetrichttp.WithEndpoint(ep.hostport), otlpmetrichttp.WithHTTPClient(hc)}
		if ep.insecure {
			topts = append(topts, otlptracehttp.WithInsecure())
			mopts = append(mopts, otlpmetrichttp.WithInsecure())
		}
		if ep.tracePath != "" {
			topts = append(topts, otlptracehttp.WithURLPath(ep.tracePath))
			mopts = append(mopts, otlpmetrichttp.WithURLPath(ep.metrPath))
		}
		if len(cfg.Headers) > 0 {
			topts = append(topts, otlptracehttp.WithHeaders(cfg.Headers))
			mopts = append(mopts, otlpmetrichttp.WithHeaders(cfg.Headers))
		}
		if sexp, err = otlptracehttp.New(ctx, topts...); err != nil {
			return nil, fmt.Errorf("otlp trace exporter: %w", err)
		}
		if mexp, err = otlpmetrichttp.New(ctx, mopts...); err != nil {
			return nil, fmt.Errorf("otlp metric exporter: %w", err)
		}
	case ProtocolGRPC:
		dial := grpc.WithContextDialer(func(ctx context.Context, addr string) (net.Conn, error) {
			return cfg.Dial(ctx, "tcp", addr)
		})
		topts := []otlptracegrpc.Option{otlptracegrpc.WithEndpoint(ep.hostport), otlptracegrpc.WithDialOption(dial)}
		mopts := []otlpmetricgrpc.Option{otlpmetricgrpc.WithEndpoint(ep.hostport), otlpmetricgrpc.WithDialOption(dial)}
		if ep.insecure {
			topts = append(topts, otlptracegrpc.WithInsecure())
			mopts = append(mopts, otlpmetricgrpc.WithInsecure())
		} else {
			creds := credentials.NewTLS(tc)
			topts = append(topts, otlptracegrpc.WithTLSCredentials(creds))
			mopts = append(mopts, otlpmetricgrpc.WithTLSCredentials(creds))
		}
		if len(cfg.Headers) > 0 {
			topts = append(topts, otlptracegrpc.WithHeaders(cfg.Headers))
			mopts = append(mopts, otlpmetricgrpc.WithHeaders(cfg.Headers))
		}
		if sexp, err = otlptracegrpc.New(ctx, topts...); err != nil {
			return nil, fmt.Errorf("otlp trace exporter: %w", err)
		}
		if mexp, err = otlpmetricgrpc.New(ctx, mopts...); err != nil {
			_ = sexp.Shutdown(ctx)
			return nil, fmt.Errorf("otlp metric exporter: %w", err)
		}
	default:
		return nil, fmt.Errorf("telemetry.otlp.protocol %q: want %s or %s", cfg.Protocol, ProtocolHTTP, ProtocolGRPC)
	}
	return build(cfg, sexp, mexp, reg, log)
}

// build assembles the tracer around its exporters (the tests give their own).
func build(cfg Config, sexp sdktrace.SpanExporter, mexp sdkmetric.Exporter, reg prometheus.Registerer, log *slog.Logger) (*Tracer, error) {
	cfg.defaults()
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	dropped := prometheus.NewCounter(prometheus.CounterOpts{
		Name: "mcpintercept_spans_dropped_total",
		Help: "Spans not exported: the export queue (telemetry.otlp.max_queue) was full, or their export failed (the OTLP receiver is slow, down or refusing).",
	})
	hist := prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "mcp_client_operation_duration_seconds",
		Help:    "mcp.client.operation.duration: an MCP request's time from the appliance forwarding it to its answer (OpenTelemetry MCP semantic conventions).",
		Buckets: DurationBuckets,
	}, []string{"mcp_method_name", "error_type", "gen_ai_tool_name"})
	if reg != nil {
		dropped = registerOr(reg, dropped).(prometheus.Counter)
		hist = registerOr(reg, hist).(*prometheus.HistogramVec)
	}
	res, err := resource.Merge(resource.Default(), resource.NewSchemaless(
		attribute.String("service.name", cfg.ServiceName)))
	if err != nil {
		res = resource.NewSchemaless(attribute.String("service.name", cfg.ServiceName))
	}
	proc := newQueueProcessor(sexp, cfg.MaxQueue, cfg.MaxBatch, cfg.Interval, func(n int) { dropped.Add(float64(n)) }, log)
	tp := sdktrace.NewTracerProvider(
		sdktrace.WithResource(res),
		sdktrace.WithSampler(sdktrace.ParentBased(sdktrace.TraceIDRatioBased(cfg.Ratio))),
		sdktrace.WithSpanProcessor(proc),
	)
	t := &Tracer{tp: tp, tr: tp.Tracer("mcpintercept/tracing"), proc: proc, prom: hist}
	if mexp != nil {
		t.mp = sdkmetric.NewMeterProvider(sdkmetric.WithResource(res),
			sdkmetric.WithReader(sdkmetric.NewPeriodicReader(mexp, sdkmetric.WithInterval(metricInterval(cfg.Interval)))))
		h, err := t.mp.Meter("mcpintercept/tracing").Float64Histogram("mcp.client.operation.duration",
			metric.WithUnit("s"),
			metric.WithDescription("The duration of the MCP request as observed by the appliance, from forwarding it until its answer."),
			metric.WithExplicitBucketBoundaries(DurationBuckets...))
		if err != nil {
			_ = tp.Shutdown(context.Background())
			return nil, err
		}
		t.hist = h
	}
	otel.SetErrorHandler(otel.ErrorHandlerFunc(rateLimited(log)))
	return t, nil
}

func metricInterval(d time.Duration) time.Duration {
	if d < 10*time.Second {
		return 10 * time.Second
	}
	return d
}

// rateLimited logs the SDK's own errors (a failed metric export) at most once a minute.
func rateLimited(log *slog.Logger) func(error) {
	var mu sync.Mutex
	var last time.Time
	return func(err error) {
		mu.Lock()
		defer mu.Unlock()
		if time.Since(last) < time.Minute {
			return
		}
		last = time.Now()
		log.Warn("opentelemetry", "err", err)
	}
}

func registerOr(reg prometheus.Registerer, c prometheus.Collector) prometheus.Collector {
	if err := reg.Register(c); err != nil {
		var are prometheus.AlreadyRegisteredError
		if errors.As(err, &are) {
			return are.ExistingCollector
		}
	}
	return c
}

func (t *Tracer) shutdown(ctx context.Context) error {
	err := t.tp.Shutdown(ctx)
	if t.mp != nil {
		if e := t.mp.Shutdown(ctx); err == nil {
			err = e
		}
	}
	return err
}

// flush exports the queued spans and metrics (tests).
func (t *Tracer) flush(ctx context.Context) error {
	err := t.proc.ForceFlush(ctx)
	if t.mp != nil {
		if e := t.mp.ForceFlush(ctx); err == nil {
			err = e
		}
	}
	return err
}

// spanName is the conventions' span name.
func spanName(c *Call) string {
	switch {
	case c.Method != "" && c.Tool != "":
		return c.Method + " " + c.Tool
	case c.Method != "" && c.Prompt != "":
		return c.Method + " " + c.Prompt
	case c.Method != "":
		return c.Method
	case c.HTTPMethod != "":
		return "HTTP " + c.HTTPMethod
	}
	return "connection"
}

// attrs are c's attributes, the empty ones left out.
func attrs(c *Call) []attribute.KeyValue {
	a := make([]attribute.KeyValue, 0, 24)
	str := func(k, v string) {
		if v != "" {
			a = append(a, attribute.String(k, v))
		}
	}
	num := func(k string, v int) {
		if v > 0 {
			a = append(a, attribute.Int(k, v))
		}
	}
	str("mcp.method.name", c.Method)
	if c.Method == mcp.MethodToolsCall {
		a = append(a, attribute.String("gen_ai.operation.name", "execute_tool"))
	}
	str("gen_ai.tool.name", c.Tool)
	str("gen_ai.prompt.name", c.Prompt)
	str("mcp.resource.uri", c.ResourceURI)
	str("jsonrpc.request.id", c.RequestID)
	str("mcp.protocol.version", c.ProtocolVersion)
	str("mcp.session.id", c.SessionID)
	str("server.address", c.ServerAddress)
	num("server.port", c.ServerPort)
	a = append(a, attribute.String("network.transport", "tcp"))
	str("client.address", c.ClientAddress)
	num("client.port", c.ClientPort)
	str("http.request.method", c.HTTPMethod)
	str("url.path", c.Path)
	str("mcpintercept.route", c.Route)
	str("mcpintercept.tls", c.TLS)
	str("mcpintercept.mechanism", c.Mechanism)
	str("mcpintercept.direction", c.Direction)
	num("process.pid", int(c.PID))
	num("process.user.id", int(c.UID))
	str("process.executable.name", c.Comm)
	str("process.executable.path", c.Exe)
	return a
}

var spanKinds = [...]trace.SpanKind{KindClient: trace.SpanKindClient, KindServer: trace.SpanKindServer, KindInternal: trace.SpanKindInternal}

func (t *Tracer) start(parent Parent, kind Kind, c Call, start time.Time) *Span {
	ctx := context.Background()
	if parent.Traceparent != "" {
		carrier := propagation.MapCarrier{"traceparent": parent.Traceparent}
		if parent.Tracestate != "" {
			carrier["tracestate"] = parent.Tracestate
		}
		ctx = t.tc.Extract(ctx, carrier)
		if parent.Baggage != "" {
			// baggage.Parse rather than the Baggage propagator, which hands a malformed header to
			// the global error handler (the log); a peer's bad baggage is just none.
			if b, err := baggage.Parse(parent.Baggage); err == nil {
				ctx = baggage.ContextWithBaggage(ctx, b)
			}
		}
	}
	sk := trace.SpanKindInternal
	if kind >= 0 && int(kind) < len(spanKinds) {
		sk = spanKinds[kind]
	}
	if start.IsZero() {
		start = time.Now()
	}
	_, sp := t.tr.Start(ctx, spanName(&c), trace.WithSpanKind(sk), trace.WithTimestamp(start),
		trace.WithAttributes(attrs(&c)...))
	return &Span{t: t, s: sp, sc: sp.SpanContext(), start: start, method: c.Method, tool: c.Tool}
}

// denial says whether a decision refuses the call.
func denial(decision string) bool {
	return decision != "" && decision != "allow"
}

func (s *Span) decision(decision, rule, reason string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ended || !s.s.IsRecording() {
		return
	}
	if decision != "" {
		s.s.SetAttributes(attribute.String("mcpintercept.decision", decision))
	}
	if rule != "" {
		s.s.SetAttributes(attribute.String("mcpintercept.rule", rule))
	}
	if denial(decision) {
		s.denied = true
		desc := reason
		if desc == "" {
			desc = decision
		}
		s.s.SetStatus(codes.Error, desc)
		ev := []attribute.KeyValue{attribute.String("mcpintercept.decision", decision)}
		if rule != "" {
			ev = append(ev, attribute.String("mcpintercept.rule", rule))
		}
		if reason != "" {
			ev = append(ev, attribute.String("mcpintercept.reason", reason))
		}
		s.s.AddEvent("mcpintercept.denied", trace.WithAttributes(ev...))
	}
}

func (s *Span) status(code int64, httpStatus int, toolError bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ended {
		return
	}
	switch {
	case toolError:
		s.errTyp = "tool_error"
	case code != 0:
		s.errTyp = strconv.FormatInt(code, 10)
	case httpStatus >= 400:
		s.errTyp = strconv.Itoa(httpStatus)
	}
	if !s.s.IsRecording() {
		return
	}
	switch {
	case code != 0:
		s.s.SetAttributes(attribute.String("rpc.response.status_code", strconv.FormatInt(code, 10)))
	case httpStatus != 0:
		s.s.SetAttributes(attribute.String("rpc.response.status_code", strconv.Itoa(httpStatus)))
	}
	if s.errTyp != "" {
		s.s.SetAttributes(attribute.String("error.type", s.errTyp))
		if !s.denied {
			s.s.SetStatus(codes.Error, s.errTyp)
		}
	}
}

func (s *Span) end(end time.Time) {
	s.mu.Lock()
	if s.ended {
		s.mu.Unlock()
		return
	}
	s.ended = true
	errTyp := s.errTyp
	s.mu.Unlock()
	if end.IsZero() {
		end = time.Now()
	}
	s.s.End(trace.WithTimestamp(end))
	if s.method == "" {
		return // not an MCP operation (a Level 1 request without a method, a connection)
	}
	t := s.t
	d := end.Sub(s.start).Seconds()
	if d < 0 {
		d = 0
	}
	m := t.labels[0].get(s.method)
	e := t.labels[1].get(errTyp)
	tool := t.labels[2].get(s.tool)
	t.prom.WithLabelValues(m, e, tool).Observe(d)
	if t.hist != nil {
		a := make([]attribute.KeyValue, 1, 3)
		a[0] = attribute.String("mcp.method.name", m)
		if e != "" {
			a = append(a, attribute.String("error.type", e))
		}
		if tool != "" {
			a = append(a, attribute.String("gen_ai.tool.name", tool))
		}
		t.hist.Record(context.Background(), d, metric.WithAttributes(a...))
	}
}

// hopKey is the tracestate member naming the appliance's hop.
const hopKey = "mcpi"

// W3C bounds of tracestate.
const (
	maxStateMembers = 32
	maxStateLen     = 512
)

func (s *Span) inject() (string, string, bool) {
	sc := s.sc
	if !sc.IsValid() || !sc.IsSampled() {
		return "", "", false
	}
	var b [55]byte
	tid, sid := sc.TraceID(), sc.SpanID()
	n := copy(b[:], "00-")
	n += hexEncode(b[n:], tid[:])
	b[n] = '-'
	n++
	n += hexEncode(b[n:], sid[:])
	n += copy(b[n:], "-01")
	tp := string(b[:n])
	return tp, hopState(sc.TraceState(), sid.String()), true
}

// hopState is ts with the hop's member first (any earlier mcpi member removed), then the
// caller's members, trimmed from the right to 32 members and 512 bytes.
func hopState(ts trace.TraceState, sid string) string {
	ts, err := ts.Insert(hopKey, sid)
	if err != nil {
		return hopKey + "=" + sid
	}
	var keys []string
	ts.Walk(func(k, _ string) bool { keys = append(keys, k); return true })
	for i := len(keys) - 1; i > 0 && (ts.Len() > maxStateMembers || len(ts.String()) > maxStateLen); i-- {
		ts = ts.Delete(keys[i])
	}
	return ts.String()
}

func hexEncode(dst, src []byte) int {
	const digits = "0123456789abcdef"
	for i, c := range src {
		dst[2*i] = digits[c>>4]
		dst[2*i+1] = digits[c&0xf]
	}
	return 2 * len(src)
}

// boundedSet maps a label value to itself for the first maxLabelValues distinct values, and to
// otherLabel after (and for values longer than maxLabelLen).
type boundedSet struct {
	m sync.Map
	n sync.Mutex
	c int
}

func (b *boundedSet) get(v string) string {
	if v == "" {
		return ""
	}
	if _, ok := b.m.Load(v); ok {
		return v
	}
	if len(v) > maxLabelLen {
		return otherLabel
	}
	b.n.Lock()
	defer b.n.Unlock()
	if _, ok := b.m.Load(v); ok {
		return v
	}
	if b.c >= maxLabelValues {
		return otherLabel
	}
	b.c++
	b.m.Store(strings.Clone(v), struct{}{})
	return v
}
