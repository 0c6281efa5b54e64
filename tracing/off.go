//go:build notracing

package tracing

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// This build has no OpenTelemetry export (built with -tags notracing, as `make demo` builds the
// binary: the OTLP exporters and gRPC are a sixth of a cold build and the demo exports no span).
// A nil *Tracer is tracing off, so the rest of the appliance is the same; a configured
// telemetry.otlp.endpoint is refused at start, never silently ignored.

// ErrNotInBuild is Open's answer when an endpoint is configured.
var ErrNotInBuild = errors.New("telemetry.otlp: this binary is built without OpenTelemetry export (-tags notracing, as `make demo` builds it); `make build` builds the full binary")

// Tracer is never made in this build.
type Tracer struct{}

// Span is never made in this build.
type Span struct{}

func open(_ context.Context, cfg Config, _ prometheus.Registerer, _ *slog.Logger) (*Tracer, error) {
	if cfg.Endpoint == "" {
		return nil, nil
	}
	return nil, ErrNotInBuild
}

func (t *Tracer) start(Parent, Kind, Call, time.Time) *Span { return nil }
func (t *Tracer) shutdown(context.Context) error            { return nil }
func (s *Span) decision(string, string, string)             {}
func (s *Span) status(int64, int, bool)                     {}
func (s *Span) end(time.Time)                               {}
func (s *Span) traceID() string                             { return "" }
func (s *Span) spanID() string                              { return "" }
func (s *Span) inject() (string, string, bool)              { return "", "", false }
