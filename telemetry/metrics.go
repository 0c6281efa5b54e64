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
	// Requests counts HTTP requests at Level 1 by original destination, MCP method, tool, client
	// address and decision. The client label grows with the number of distinct clients; an
	// appliance in front of a very large network should drop it with metric relabelling.
	Requests        *prometheus.CounterVec
	RequestDuration *prometheus.HistogramVec // by MCP method and status
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
	m.Requests = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "mcpintercept_requests_total", Help: "HTTP requests seen at Level 1."},
		[]string{"orig_dst", "mcp_method", "mcp_name", "client", "decision"})
	m.RequestDuration = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name: "mcpintercept_request_duration_seconds", Help: "Request head to response end, at Level 1.",
		Buckets: prometheus.ExponentialBuckets(0.0005, 2, 16)}, []string{"mcp_method", "status"})
	m.Registry.MustRegister(m.Requests, m.RequestDuration)
	m.Registry.MustRegister(m.FlowsActive, m.FlowsTotal, m.FlowsRefused, m.UpstreamErrors, m.Bytes,
		m.FlowDuration, m.LogDropped,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}
