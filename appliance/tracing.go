package appliance

import (
	"context"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strings"
	"time"

	"mcpintercept/config"
	"mcpintercept/intercept/upstream"
	"mcpintercept/tracing"
)

// tracingConfig is the telemetry.otlp section as the tracing package takes it. Exports are
// dialled through the bypass dialer, so the appliance never intercepts its own spans.
func tracingConfig(cfg *config.Config) tracing.Config {
	o := cfg.Telemetry.OTLP
	return tracing.Config{
		Endpoint:    o.Endpoint,
		Protocol:    o.Protocol,
		Headers:     maps.Clone(o.Headers),
		Insecure:    o.Insecure,
		CAFile:      o.CAFile,
		Ratio:       o.SamplingRatio,
		MaxQueue:    o.MaxQueue,
		MaxBatch:    o.MaxBatch,
		Interval:    o.Interval.Duration,
		ServiceName: o.ServiceName,
		Dial:        upstream.BypassDialer(cfg.Steering.BypassMark, cfg.Limits.ConnectTimeout.Duration).DialContext,
	}
}

// openTracer opens the OTLP exporter when telemetry.otlp.endpoint is set; before the engine, so
// that every flow is traced. Nothing is dialled here: a receiver that is down only drops spans.
func (a *Appliance) openTracer(ctx context.Context, cfg *config.Config) error {
	a.telemetryCfg = cfg.Telemetry
	if !cfg.Telemetry.On() {
		return nil
	}
	t, err := tracing.Open(ctx, tracingConfig(cfg), a.metrics.Registry, a.log.With("component", "tracing"))
	if err != nil {
		return err
	}
	a.tracer = t
	o := cfg.Telemetry.OTLP
	// The endpoint and the header names only: header values are credentials.
	a.info("tracing: exporting spans over OTLP", "endpoint", o.Endpoint, "protocol", o.Protocol,
		"sampling_ratio", o.SamplingRatio, "headers", strings.Join(sortedKeys(o.Headers), ","))
	return nil
}

// closeTracer flushes the spans still queued (the drain has ended every flow's) within a few
// seconds, and stops exporting.
func (a *Appliance) closeTracer(ctx context.Context) {
	t := a.tracer
	if t == nil {
		return
	}
	a.tracer = nil
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 3*time.Second)
	defer cancel()
	if err := t.Shutdown(sctx); err != nil {
		a.log.Warn("tracing: flush on stop", "err", err)
		return
	}
	a.info("tracing stopped")
}

// telemetryChanged reports whether a reload changed the telemetry section, which the running
// exporter keeps.
func telemetryChanged(old, next config.TelemetryConfig) bool {
	return !reflect.DeepEqual(old, next)
}

// TracingOf states what the appliance traces and where the spans go: the exporter's endpoint,
// never its headers (their names only), and per route whether the request upstream carries the
// appliance's span (inject) or the client's context unchanged (record).
func TracingOf(cfg *config.Config) string {
	if cfg == nil || !cfg.Telemetry.On() {
		return "off (telemetry.otlp.endpoint unset): no spans, no trace context changed"
	}
	o := cfg.Telemetry.OTLP
	s := fmt.Sprintf("a span per MCP call (OpenTelemetry MCP semantic conventions; Level 2: per JSON-RPC request, Level 1: per HTTP request, otherwise per connection) exported over OTLP %s to %s", o.Protocol, o.Endpoint)
	if len(o.Headers) > 0 {
		s += " with headers " + strings.Join(sortedKeys(o.Headers), ", ") + " (values not shown)"
	}
	s += fmt.Sprintf("; sampling ratio %g of new traces (a request's sampled parent is followed); at most %d spans queued, the rest dropped and counted (mcpintercept_spans_dropped_total); mcp.client.operation.duration on /metrics and over OTLP", o.SamplingRatio, o.MaxQueue)
	var inject, record, conn []string
	for _, r := range declaredRoutes(cfg) {
		switch {
		case r.TraceInjectOn():
			inject = append(inject, r.Name)
		case r.TLS != config.TLSPassthrough && r.LevelOrDefault() >= 1:
			record = append(record, r.Name)
		default:
			conn = append(conn, r.Name)
		}
	}
	if len(inject) > 0 {
		s += "; trace_propagation inject (the request upstream carries the appliance's span as parent, tracestate mcpi) on routes " + strings.Join(inject, ", ")
	}
	if len(record) > 0 {
		s += "; trace_propagation record (trace context forwarded unchanged) on routes " + strings.Join(record, ", ")
	}
	if len(conn) > 0 {
		s += "; a span per connection, nothing changed, on routes " + strings.Join(conn, ", ")
	}
	return s
}

func sortedKeys(m map[string]string) []string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	slices.Sort(ks)
	return ks
}
