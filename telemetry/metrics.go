package telemetry

import (
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
)

// Metrics are the appliance's Prometheus series. A private registry keeps tests independent and
// avoids the global default registry.
type Metrics struct {
	Registry       *prometheus.Registry
	FlowsActive    prometheus.Gauge
	FlowsTotal     *prometheus.CounterVec // by mechanism
	FlowsRefused   *prometheus.CounterVec // by reason
	UpstreamErrors *prometheus.CounterVec // by kind (dial, reset)
	Bytes          *prometheus.CounterVec // by direction (up, down)
	FlowDuration   prometheus.Histogram
	LogDropped     prometheus.Counter
}

// NewMetrics registers every series on a fresh registry.
func NewMetrics() *Metrics {
	m := &Metrics{
		Registry: prometheus.NewRegistry(),
		FlowsActive: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "mcpintercept_flows_active", Help: "Flows currently being forwarded."}),
		FlowsTotal: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "mcpintercept_flows_total", Help: "Flows accepted, by steering mechanism."}, []string{"mechanism"}),
		FlowsRefused: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "mcpintercept_flows_refused_total", Help: "Flows refused before forwarding, by reason."}, []string{"reason"}),
		UpstreamErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "mcpintercept_upstream_errors_total", Help: "Upstream dial failures and resets, by kind."}, []string{"kind"}),
		Bytes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "mcpintercept_bytes_total", Help: "Bytes forwarded, by direction (up: client to server)."}, []string{"direction"}),
		FlowDuration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "mcpintercept_flow_duration_seconds", Help: "Lifetime of forwarded flows.",
			Buckets: prometheus.ExponentialBuckets(0.001, 4, 12)}),
		LogDropped: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "mcpintercept_flow_log_dropped_total", Help: "Flow log records dropped because the writer fell behind."}),
	}
	m.Registry.MustRegister(m.FlowsActive, m.FlowsTotal, m.FlowsRefused, m.UpstreamErrors, m.Bytes,
		m.FlowDuration, m.LogDropped,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}
