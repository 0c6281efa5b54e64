package engine

import (
	"github.com/prometheus/client_golang/prometheus"

	"mcpintercept/policy"
	"mcpintercept/telemetry"
)

// shadowMetrics is mcpintercept_shadow_decisions_total: what shadow rules (mode: shadow) would
// have decided, by rule set, rule and would (deny, rate_limited). The labels come from the
// configuration, so the series are bounded by it.
type shadowMetrics struct{ total *prometheus.CounterVec }

func newShadowMetrics(reg prometheus.Registerer) *shadowMetrics {
	m := &shadowMetrics{total: prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "mcpintercept_shadow_decisions_total", Help: "Decisions shadow rules (mode: shadow) would have made and did not enforce, by rule set, rule and would (deny, rate_limited)."},
		[]string{"rule_set", "rule", "would"})}
	m.total = telemetry.Registered(reg, m.total)
	return m
}

// noteShadow counts what the shadow rules of one evaluation would have decided. The record says
// the same in its reason (policy appends "would_deny by RULE (shadow): ...").
func (e *Engine) noteShadow(f *flow, d *policy.Decision) {
	for _, h := range d.Shadow {
		e.shadow.total.WithLabelValues(f.rules.name, h.Rule, string(h.Would)).Inc()
	}
}

// shadowSet is the flow's rule set (flowRules.current at each call) as Level 1 and Level 2
// evaluate it, counting the shadow rules' would-be decisions of every evaluation.
type shadowSet struct {
	e *Engine
	f *flow
}

func (s *shadowSet) Evaluate(in *policy.Input) policy.Decision {
	rs := s.f.rules.current(s.e)
	if rs == nil {
		return policy.Decision{Action: policy.ActionAllow, Reason: policy.ReasonNoMatch}
	}
	d := rs.Evaluate(in)
	if len(d.Shadow) > 0 {
		s.e.noteShadow(s.f, &d)
	}
	return d
}

func (s *shadowSet) Needs() policy.Needs {
	if rs := s.f.rules.current(s.e); rs != nil {
		return rs.Needs()
	}
	return policy.Needs{}
}
