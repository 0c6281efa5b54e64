package federation

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Metrics are the federation's series, per downstream.
type Metrics struct {
	calls      *prometheus.CounterVec
	seconds    *prometheus.HistogramVec
	refreshes  *prometheus.CounterVec
	tools      *prometheus.GaugeVec
	generation prometheus.Gauge
	rejected   *prometheus.CounterVec
	cleanups   *prometheus.CounterVec
	active     prometheus.Gauge
}

// NewMetrics registers the series with reg (nil: a private registry).
func NewMetrics(reg prometheus.Registerer) *Metrics {
	if reg == nil {
		reg = prometheus.NewRegistry()
	}
	m := &Metrics{
		calls: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "mcpintercept_federation_calls_total",
			Help: "Federated tools/call by downstream and outcome (result, error, uncertain, denied, audit_unavailable)."}, []string{"downstream", "outcome"}),
		seconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "mcpintercept_federation_dispatch_seconds",
			Help: "Time from the durable authorization to the downstream's terminal answer.", Buckets: prometheus.ExponentialBuckets(0.0005, 2, 16)}, []string{"downstream"}),
		refreshes: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "mcpintercept_federation_refreshes_total",
			Help: "Catalog refreshes by downstream and result (ok, failed)."}, []string{"downstream", "result"}),
		tools: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "mcpintercept_federation_tools",
			Help: "Tools of each downstream in the published generation."}, []string{"downstream"}),
		generation: prometheus.NewGauge(prometheus.GaugeOpts{Name: "mcpintercept_federation_generation",
			Help: "Number of the published aggregate generation (0: none yet)."}),
		rejected: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "mcpintercept_federation_generations_rejected_total",
			Help: "Aggregate generations not published, by reason (collision, aggregate_limit, malformed)."}, []string{"reason"}),
		cleanups: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "mcpintercept_federation_session_cleanups_total",
			Help: "Cleanup DELETEs of sessions a call created, by downstream and result (ok, failed)."}, []string{"downstream", "result"}),
		active: prometheus.NewGauge(prometheus.GaugeOpts{Name: "mcpintercept_federation_dispatching",
			Help: "Calls authorized and sent to their downstream, not yet answered."}),
	}
	for _, c := range []prometheus.Collector{m.active, m.calls, m.seconds, m.refreshes, m.tools, m.generation, m.rejected, m.cleanups} {
		_ = reg.Register(c)
	}
	return m
}

func (m *Metrics) call(ds, outcome string) {
	if m != nil {
		m.calls.WithLabelValues(ds, outcome).Inc()
	}
}

func (m *Metrics) observe(ds string, d time.Duration) {
	if m != nil {
		m.seconds.WithLabelValues(ds).Observe(d.Seconds())
	}
}

func (m *Metrics) cleanup(ds string, ok bool) {
	if m == nil {
		return
	}
	r := "ok"
	if !ok {
		r = "failed"
	}
	m.cleanups.WithLabelValues(ds, r).Inc()
}

func (m *Metrics) refreshed(ds string, ok bool) {
	if m == nil {
		return
	}
	r := "ok"
	if !ok {
		r = "failed"
		m.tools.WithLabelValues(ds).Set(0)
	}
	m.refreshes.WithLabelValues(ds, r).Inc()
}

func (m *Metrics) reject(reason string) {
	if m != nil {
		m.rejected.WithLabelValues(reason).Inc()
	}
}

func (m *Metrics) published(g *Generation) {
	if m == nil {
		return
	}
	m.generation.Set(float64(g.N))
	per := map[string]int{}
	for _, id := range g.Downstreams {
		per[id] = 0
	}
	for _, t := range g.Tools {
		per[t.Downstream]++
	}
	for id, n := range per {
		m.tools.WithLabelValues(id).Set(float64(n))
	}
}

func (m *Metrics) dispatching(delta float64) {
	if m != nil {
		m.active.Add(delta)
	}
}
