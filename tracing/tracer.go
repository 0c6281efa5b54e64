//go:build !notracing

package tracing

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlpmetric/otlpmetricgrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlpmetric/otlpmetrichttp"
	"go.opentelemetry.io/otel/metric"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/resource"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
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

func (s *Span) traceID() string { return s.tid.String() }
func (s *Span) spanID() string  { return s.sid.String() }

// maxEvents bounds a span's events (the OpenTelemetry SDK's default limit, 128).
const maxEvents = 128

// Tracer makes spans; safe for concurrent use.
type Tracer struct {
	proc   *queueProcessor
	ratio  float64 // of new roots (parent-based: a child follows its parent)
	mp     *sdkmetric.MeterProvider
	hist   metric.Float64Histogram
	prom   *prometheus.HistogramVec
	labels [3]boundedSet // method, error.type, tool

	smu    sync.RWMutex
	series map[seriesKey]*series // the histograms' series by raw label values, up to maxSeries
}

// seriesKey is a call's raw label values; series its histogram series, the label values bounded.
type seriesKey struct{ method, errTyp, tool string }

type series struct {
	prom prometheus.Observer
	opts []metric.RecordOption // the OTLP histogram's attribute set
}

// maxSeries bounds the cache of series (past it, the labels are looked up on every call).
const maxSeries = 4096

// Span is one call's span: the call as given, and what Decision and Status add, encoded at
// export (export.go).
type Span struct {
	t       *Tracer
	tid     trace.TraceID
	sid     trace.SpanID
	psid    trace.SpanID     // the parent's (invalid: a root)
	ts      trace.TraceState // the parent's
	remote  bool             // the parent came from a peer
	sampled bool
	flags   trace.TraceFlags // W3C: sampled, and the parent's random flag
	kind    Kind
	start   time.Time
	c       Call

	mu        sync.Mutex // Decision, Status and End may come from the two directions' goroutines
	ended     bool
	endT      time.Time
	denied    bool
	verdict   string // mcpintercept.decision
	rule      string
	rpcStatus int64
	errTyp    string
	stError   bool // status error, with stMsg
	stMsg     string
	late      [4]lateAttr // the attributes set after the start, in the order first set
	nlate     int
	events    []denialEvent
}

// lateAttr names an attribute set after the start.
type lateAttr uint8

const (
	lateDecision lateAttr = iota
	lateRule
	lateRPCStatus
	lateErrorType
)

// denialEvent is the mcpintercept.denied event.
type denialEvent struct {
	at                     time.Time
	decision, rule, reason string
}

// set records that a is set (its first setting fixes its place, as the SDK's attribute dedupe
// does).
func (s *Span) set(a lateAttr) {
	for _, x := range s.late[:s.nlate] {
		if x == a {
			return
		}
	}
	s.late[s.nlate] = a
	s.nlate++
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
		sexp exporter
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
		mopts := []otlpmetrichttp.Option{otlpmetrichttp.WithEndpoint(ep.hostport), otlpmetrichttp.WithHTTPClient(hc)}
		if ep.insecure {
			mopts = append(mopts, otlpmetrichttp.WithInsecure())
		}
		if ep.tracePath != "" {
			mopts = append(mopts, otlpmetrichttp.WithURLPath(ep.metrPath))
		}
		if len(cfg.Headers) > 0 {
			mopts = append(mopts, otlpmetrichttp.WithHeaders(cfg.Headers))
		}
		sexp = newHTTPExporter(hc, ep, cfg.Headers)
		if mexp, err = otlpmetrichttp.New(ctx, mopts...); err != nil {
			return nil, fmt.Errorf("otlp metric exporter: %w", err)
		}
	case ProtocolGRPC:
		dial := grpc.WithContextDialer(func(ctx context.Context, addr string) (net.Conn, error) {
			return cfg.Dial(ctx, "tcp", addr)
		})
		mopts := []otlpmetricgrpc.Option{otlpmetricgrpc.WithEndpoint(ep.hostport), otlpmetricgrpc.WithDialOption(dial)}
		if ep.insecure {
			mopts = append(mopts, otlpmetricgrpc.WithInsecure())
		} else {
			mopts = append(mopts, otlpmetricgrpc.WithTLSCredentials(credentials.NewTLS(tc)))
		}
		if len(cfg.Headers) > 0 {
			mopts = append(mopts, otlpmetricgrpc.WithHeaders(cfg.Headers))
		}
		g, err := newGRPCExporter(ep, tc, cfg.Headers, dial)
		if err != nil {
			return nil, fmt.Errorf("otlp trace exporter: %w", err)
		}
		sexp = g
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
func build(cfg Config, sexp exporter, mexp sdkmetric.Exporter, reg prometheus.Registerer, log *slog.Logger) (*Tracer, error) {
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
	res := newResource(cfg.ServiceName)
	proc := newQueueProcessor(sexp, newEncoder(res, scopeName), cfg.MaxQueue, cfg.MaxBatch, cfg.Interval, func(n int) { dropped.Add(float64(n)) }, log)
	t := &Tracer{proc: proc, ratio: cfg.Ratio, prom: hist, series: map[seriesKey]*series{}}
	if mexp != nil {
		t.mp = sdkmetric.NewMeterProvider(sdkmetric.WithResource(res),
			sdkmetric.WithReader(sdkmetric.NewPeriodicReader(mexp, sdkmetric.WithInterval(metricInterval(cfg.Interval)))))
		h, err := t.mp.Meter(scopeName).Float64Histogram("mcp.client.operation.duration",
			metric.WithUnit("s"),
			metric.WithDescription("The duration of the MCP request as observed by the appliance, from forwarding it until its answer."),
			metric.WithExplicitBucketBoundaries(DurationBuckets...))
		if err != nil {
			_ = proc.Shutdown(context.Background())
			return nil, err
		}
		t.hist = h
	}
	otel.SetErrorHandler(otel.ErrorHandlerFunc(rateLimited(log)))
	return t, nil
}

// newResource is the SDK's default resource with service.name.
func newResource(serviceName string) *resource.Resource {
	res, err := resource.Merge(resource.Default(), resource.NewSchemaless(
		attribute.String("service.name", serviceName)))
	if err != nil {
		res = resource.NewSchemaless(attribute.String("service.name", serviceName))
	}
	return res
}

// scopeName is the instrumentation scope of the spans and the metric.
const scopeName = "mcpintercept/tracing"

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
	err := t.proc.Shutdown(ctx)
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

// parentContext is parent's span context as the W3C TraceContext propagator reads it (invalid:
// none), without its carrier and context allocations (FuzzParent compares the two).
func (t *Tracer) parentContext(parent Parent) trace.SpanContext {
	h := parent.Traceparent
	if h == "" {
		return trace.SpanContext{}
	}
	var ver [1]byte
	if !hexPart(ver[:], &h, 2) || ver[0] > 254 {
		return trace.SpanContext{}
	}
	var scc trace.SpanContextConfig
	if !hexPart(scc.TraceID[:], &h, 32) || !hexPart(scc.SpanID[:], &h, 16) {
		return trace.SpanContext{}
	}
	var opts [1]byte
	if !hexPart(opts[:], &h, 2) {
		return trace.SpanContext{}
	}
	if ver[0] == 0 && (h != "" || opts[0] > 3) {
		return trace.SpanContext{} // version 0 has no more fields, nor other flags
	}
	scc.TraceFlags = trace.TraceFlags(opts[0]) & (trace.FlagsSampled | trace.FlagsRandom)
	if parent.Tracestate != "" {
		scc.TraceState, _ = trace.ParseTraceState(parent.Tracestate) // a bad one is none
	}
	scc.Remote = true
	sc := trace.NewSpanContext(scc)
	if !sc.IsValid() {
		return trace.SpanContext{}
	}
	return sc
}

// hexPart decodes the next "-"-delimited part of *h, of n lower-case hex digits, into dst.
func hexPart(dst []byte, h *string, n int) bool {
	part, left, _ := strings.Cut(*h, "-")
	*h = left
	if len(part) != n {
		return false
	}
	for i := 0; i < n; i += 2 {
		hi, ok1 := unhex(part[i])
		lo, ok2 := unhex(part[i+1])
		if !ok1 || !ok2 {
			return false
		}
		dst[i/2] = hi<<4 | lo
	}
	return true
}

func unhex(c byte) (byte, bool) {
	switch {
	case '0' <= c && c <= '9':
		return c - '0', true
	case 'a' <= c && c <= 'f':
		return c - 'a' + 10, true
	}
	return 0, false
}

// sampleRoot is TraceIDRatioBased's decision for a new root.
func (t *Tracer) sampleRoot(tid trace.TraceID) bool {
	switch {
	case t.ratio >= 1:
		return true
	case t.ratio <= 0:
		return false
	}
	return binary.BigEndian.Uint64(tid[8:16])>>1 < uint64(t.ratio*(1<<63))
}

func newTraceID() (id trace.TraceID) {
	for !id.IsValid() {
		binary.BigEndian.PutUint64(id[:8], rand.Uint64())
		binary.BigEndian.PutUint64(id[8:], rand.Uint64())
	}
	return id
}

func newSpanID() (id trace.SpanID) {
	for !id.IsValid() {
		binary.BigEndian.PutUint64(id[:], rand.Uint64())
	}
	return id
}

// start makes the span. The sampling is the SDK's ParentBased(TraceIDRatioBased(ratio)): a
// valid parent's sampled flag decides, a new root is sampled by its trace id. Baggage is not
// read: the SDK never put it on a span either.
func (t *Tracer) start(parent Parent, kind Kind, c Call, start time.Time) *Span {
	if start.IsZero() {
		start = time.Now()
	}
	s := &Span{t: t, kind: kind, start: start, c: c, sid: newSpanID()}
	if psc := t.parentContext(parent); psc.IsValid() {
		s.tid, s.psid, s.ts, s.remote, s.sampled = psc.TraceID(), psc.SpanID(), psc.TraceState(), psc.IsRemote(), psc.IsSampled()
		s.flags = psc.TraceFlags()
	} else {
		s.tid = newTraceID()
		s.sampled = t.sampleRoot(s.tid)
	}
	if s.sampled {
		s.flags |= trace.FlagsSampled
	}
	return s
}

// denial says whether a decision refuses the call.
func denial(decision string) bool {
	return decision != "" && decision != "allow"
}

// setError is the SDK's SetStatus(codes.Error, desc): the last description wins.
func (s *Span) setError(desc string) {
	s.stError, s.stMsg = true, desc
}

func (s *Span) decision(decision, rule, reason string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ended || !s.sampled {
		return
	}
	if decision != "" {
		s.verdict = decision
		s.set(lateDecision)
	}
	if rule != "" {
		s.rule = rule
		s.set(lateRule)
	}
	if denial(decision) {
		s.denied = true
		desc := reason
		if desc == "" {
			desc = decision
		}
		s.setError(desc)
		if len(s.events) < maxEvents { // the SDK's default span event limit
			s.events = append(s.events, denialEvent{at: time.Now(), decision: decision, rule: rule, reason: reason})
		}
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
	if !s.sampled {
		return
	}
	switch {
	case code != 0:
		s.rpcStatus = code
		s.set(lateRPCStatus)
	case httpStatus != 0:
		s.rpcStatus = int64(httpStatus)
		s.set(lateRPCStatus)
	}
	if s.errTyp != "" {
		s.set(lateErrorType)
		if !s.denied {
			s.setError(s.errTyp)
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
	if end.IsZero() {
		end = time.Now()
	}
	s.endT = end
	errTyp := s.errTyp
	s.mu.Unlock()
	t := s.t
	if s.sampled {
		t.proc.enqueue(s) // s is read-only from here on
	}
	if s.c.Method == "" {
		return // not an MCP operation (a Level 1 request without a method, a connection)
	}
	d := end.Sub(s.start).Seconds()
	if d < 0 {
		d = 0
	}
	se := t.seriesOf(seriesKey{s.c.Method, errTyp, s.c.Tool})
	se.prom.Observe(d)
	if t.hist != nil {
		t.hist.Record(context.Background(), d, se.opts...)
	}
}

// seriesOf is k's histogram series, its label values bounded (boundedSet).
func (t *Tracer) seriesOf(k seriesKey) *series {
	t.smu.RLock()
	se := t.series[k]
	t.smu.RUnlock()
	if se != nil {
		return se
	}
	m := t.labels[0].get(k.method)
	e := t.labels[1].get(k.errTyp)
	tool := t.labels[2].get(k.tool)
	se = &series{prom: t.prom.WithLabelValues(m, e, tool)}
	a := make([]attribute.KeyValue, 1, 3)
	a[0] = attribute.String("mcp.method.name", m)
	if e != "" {
		a = append(a, attribute.String("error.type", e))
	}
	if tool != "" {
		a = append(a, attribute.String("gen_ai.tool.name", tool))
	}
	se.opts = []metric.RecordOption{metric.WithAttributeSet(attribute.NewSet(a...))}
	if m == otherLabel || e == otherLabel || tool == otherLabel {
		return se // not cached: the values past the bound are many
	}
	t.smu.Lock()
	if len(t.series) < maxSeries {
		t.series[seriesKey{strings.Clone(k.method), strings.Clone(k.errTyp), strings.Clone(k.tool)}] = se
	}
	t.smu.Unlock()
	return se
}

// hopKey is the tracestate member naming the appliance's hop.
const hopKey = "mcpi"

// W3C bounds of tracestate.
const (
	maxStateMembers = 32
	maxStateLen     = 512
)

func (s *Span) inject() (string, string, bool) {
	if !s.sampled {
		return "", "", false
	}
	var b [55]byte
	tid, sid := s.tid, s.sid
	n := copy(b[:], "00-")
	n += hexEncode(b[n:], tid[:])
	b[n] = '-'
	n++
	n += hexEncode(b[n:], sid[:])
	n += copy(b[n:], "-01")
	tp := string(b[:n])
	return tp, hopState(s.ts, sid.String()), true
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
// otherLabel after (and for values longer than maxLabelLen or not UTF-8, which Prometheus
// refuses with a panic).
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
	if len(v) > maxLabelLen || !utf8.ValidString(v) {
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
