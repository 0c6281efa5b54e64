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
	// address and decision (mcpintercept_requests_total), its series bounded jointly
	// (DefaultRequestSeries).
	Requests *RequestSeries
	// RequestDuration is mcpintercept_request_duration_seconds by MCP method and status, its
	// series bounded jointly (DefaultDurationSeries).
	RequestDuration *DurationSeries
	// SeriesFolded counts, by metric name, the observations recorded under a folded series
	// ("other" in place of some label values) because the metric had reached its series bound.
	SeriesFolded *prometheus.CounterVec
	// RuleErrors counts rule evaluations that failed at run time, by rule set and rule. Both come
	// from the configuration, so the series are bounded by it.
	RuleErrors *prometheus.CounterVec
}

// MetricsOptions sizes the bounded metrics; zero values take the defaults.
type MetricsOptions struct {
	RequestSeries  int                   // DefaultRequestSeries
	DurationSeries int                   // DefaultDurationSeries
	Keep           func(dst string) bool // configured destinations; see NewRequestSeries
}

// NewMetrics registers every series on a fresh registry, with the default bounds.
func NewMetrics() *Metrics { return NewMetricsWith(MetricsOptions{}) }

// NewMetricsWith is NewMetrics with other bounds.
func NewMetricsWith(opt MetricsOptions) *Metrics {
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
	m.SeriesFolded = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "mcpintercept_metric_series_folded_total",
		Help: "Observations recorded under a folded series (some labels \"other\") because the metric reached its series bound, by metric."},
		[]string{"metric"})
	m.RuleErrors = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "mcpintercept_rule_errors_total", Help: "Rule evaluations that failed at run time, by rule set and rule."},
		[]string{"rule_set", "rule"})
	m.Requests = NewRequestSeries(m.SeriesFolded.WithLabelValues("mcpintercept_requests_total"),
		opt.RequestSeries, opt.Keep)
	m.RequestDuration = NewDurationSeries(m.SeriesFolded.WithLabelValues("mcpintercept_request_duration_seconds"),
		opt.DurationSeries)
	m.Registry.MustRegister(m.Requests, m.RequestDuration, m.SeriesFolded, m.RuleErrors)
	m.Registry.MustRegister(m.FlowsActive, m.FlowsTotal, m.FlowsRefused, m.UpstreamErrors, m.Bytes,
		m.FlowDuration, m.LogDropped,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}
