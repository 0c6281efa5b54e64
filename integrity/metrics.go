package integrity

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
)

type metrics struct {
	events  *prometheus.CounterVec
	dropped prometheus.Counter
}

var eventKinds = []string{EventPinned, EventChanged, EventAdded, EventRemoved, EventDivergence,
	EventKeyChanged, EventDropped, EventFindings, EventApproved}

// newMetrics makes the guard's metrics, registered with r when it is not nil:
// mcpintercept_tool_definitions{state} (the definitions remembered, by DefState.State),
// mcpintercept_tool_integrity_events_total{kind}, mcpintercept_tool_definitions_dropped_total
// (definitions not remembered because of MaxTools or their name's length, each time one is
// listed).
func newMetrics(g *Guard, r prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		events: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "mcpintercept_tool_integrity_events_total",
			Help: "Tool-integrity events (pinned, changed, added, removed, divergence, key_changed, dropped, findings, approved).",
		}, []string{"kind"}),
		dropped: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "mcpintercept_tool_definitions_dropped_total",
			Help: "Definitions listed but not remembered: tool_integrity.max_tools reached, or a name longer than 1 KiB.",
		}),
	}
	for _, k := range eventKinds {
		m.events.WithLabelValues(k)
	}
	if r == nil {
		return m, nil
	}
	cs := []prometheus.Collector{m.events, m.dropped}
	for st := range nStates {
		cs = append(cs, prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name:        "mcpintercept_tool_definitions",
			Help:        "Definitions remembered (pinned, changed, pending, quarantined, removed), over all servers.",
			ConstLabels: prometheus.Labels{"state": stateNames[st]},
		}, func() float64 {
			g.mu.Lock()
			defer g.mu.Unlock()
			return float64(g.counts[st])
		}))
	}
	for _, c := range cs {
		if err := r.Register(c); err != nil {
			return nil, fmt.Errorf("integrity: metrics: %w", err)
		}
	}
	return m, nil
}

func (m *metrics) event(kind string) {
	if m != nil {
		m.events.WithLabelValues(kind).Inc()
	}
}
