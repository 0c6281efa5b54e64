//go:build notracing

package main

import (
	"context"
	"errors"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"go.opentelemetry.io/otel/trace"
)

// The demo's build (-tags notracing) has no OTLP export: the OpenTelemetry SDK and its exporters
// are a large part of a cold build, and the demo exports no span.

func startTracing(context.Context, string) (func(context.Context) error, error) {
	return nil, errors.New("-otlp: this mcpserver is built without OTLP export (-tags notracing, as make demo builds it)")
}

// traceEcho is the no-op span.
func traceEcho(context.Context, *mcp.CallToolRequest) trace.Span {
	return trace.SpanFromContext(context.Background())
}
