//go:build !notracing

package main

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
)

// Tracing (-otlp URL), off by default: the server is then a traced service of its own, as an
// operator's MCP server would be. Each echo call is a span "server echo" (kind SERVER) whose
// parent is the W3C context the call carried — params._meta.traceparent/tracestate (SEP-414),
// else the request's traceparent/tracestate headers, else none (a root) — exported with the
// OpenTelemetry Go SDK over OTLP/HTTP to URL as service.name lab-mcp-server. The span says
// where its parent came from (lab.trace_context.source: _meta, header or none), so a test can
// tell which carrier an intermediary rewrote. Spans are batched for at most 200ms and flushed
// when the server stops. Every traced echo also prints a line on stderr:
//
//	TRACE echo source=_meta trace_id=... span_id=... parent_span_id=...

// serviceName is the service.name of the server's spans.
const serviceName = "lab-mcp-server"

// tracer is the span maker of -otlp (nil: tracing off).
var tracer trace.Tracer

// propagator reads W3C traceparent and tracestate.
var propagator = propagation.TraceContext{}

// startTracing sets tracer up to export to url; the returned function flushes and stops it.
func startTracing(ctx context.Context, url string) (func(context.Context) error, error) {
	exp, err := otlptracehttp.New(ctx, otlptracehttp.WithEndpointURL(url))
	if err != nil {
		return nil, fmt.Errorf("-otlp %s: %w", url, err)
	}
	tp := sdktrace.NewTracerProvider(
		sdktrace.WithBatcher(exp, sdktrace.WithBatchTimeout(200*time.Millisecond)),
		sdktrace.WithResource(resource.NewSchemaless(attribute.String("service.name", serviceName))),
		sdktrace.WithSampler(sdktrace.AlwaysSample()),
	)
	tracer = tp.Tracer("mcpintercept/e2e/peers/mcpserver")
	return tp.Shutdown, nil
}

// metaCarrier reads trace context from params._meta (string values only).
type metaCarrier mcp.Meta

func (m metaCarrier) Get(key string) string { s, _ := m[key].(string); return s }
func (m metaCarrier) Set(key, value string) { m[key] = value }
func (m metaCarrier) Keys() []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	return keys
}

// callParent is the context carrying the call's remote parent span, and where it came from.
func callParent(ctx context.Context, req *mcp.CallToolRequest) (context.Context, string) {
	if req != nil && req.Params != nil {
		if c := propagator.Extract(ctx, metaCarrier(req.Params.Meta)); trace.SpanContextFromContext(c).IsValid() {
			return c, "_meta"
		}
	}
	if req != nil && req.Extra != nil && req.Extra.Header != nil {
		if c := propagator.Extract(ctx, propagation.HeaderCarrier(http.Header(req.Extra.Header))); trace.SpanContextFromContext(c).IsValid() {
			return c, "header"
		}
	}
	return ctx, "none"
}

// traceEcho starts echo's span (a no-op without -otlp); the caller ends it before answering.
func traceEcho(ctx context.Context, req *mcp.CallToolRequest) trace.Span {
	if tracer == nil {
		return trace.SpanFromContext(context.Background()) // the no-op span
	}
	parentCtx, source := callParent(ctx, req)
	_, span := tracer.Start(parentCtx, "server echo",
		trace.WithSpanKind(trace.SpanKindServer),
		trace.WithAttributes(
			attribute.String("lab.trace_context.source", source),
			attribute.String("mcp.method.name", "tools/call"),
			attribute.String("gen_ai.tool.name", "echo"),
		))
	sc := span.SpanContext()
	fmt.Fprintf(os.Stderr, "TRACE echo source=%s trace_id=%s span_id=%s parent_span_id=%s\n",
		source, sc.TraceID(), sc.SpanID(), trace.SpanContextFromContext(parentCtx).SpanID())
	return span
}
