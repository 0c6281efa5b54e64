package engine

import (
	"mcpintercept/policy"
)

// flowRules is the rule set one flow is judged by.
//
// A reload (SIGHUP) swaps the routing table under open flows, which keep the route they were
// given. The flow keeps two things from the moment it picked its route: the NAME of the route's
// rule set, and the compiled set of that name current then. Each evaluation uses the set of that
// name in the current table when there is one, so a rule changed in place applies to the next
// request on an open keep-alive connection; when a reload renamed or removed the set, it uses the
// set the flow started with. It is never "no rules" while the route names a set: a name that no
// longer resolves must not turn an open flow into an unfiltered one (issue 8, case 4).
type flowRules struct {
	name     string  // the route's RuleSet; "" applies no rules
	start    RuleSet // the compiled set of that name when the flow chose its route
	failOpen bool    // route on_rule_error: open
}

// rulesFor resolves route's rule set in rt, once per flow.
func rulesFor(rt *Routing, route *Route) flowRules {
	r := flowRules{name: route.RuleSet, failOpen: route.OnRuleError == OnRuleErrorOpen}
	if r.name != "" {
		r.start = rt.RuleSets[r.name]
		if r.start == nil {
			r.start = missingRuleSet(r.name)
		}
	}
	return r
}

// current is the set to evaluate now; nil when the route names none.
func (r *flowRules) current(e *Engine) RuleSet {
	if r.name == "" {
		return nil
	}
	if s := e.routing.Load().RuleSets[r.name]; s != nil {
		return s
	}
	return r.start
}

// missingRuleSet stands for a rule set a route names but the table never had (a routing table
// built in code with a typo; config validation refuses it): every request is denied, never let
// through unjudged.
type missingRuleSet string

func (m missingRuleSet) Evaluate(*policy.Input) policy.Decision {
	return policy.Decision{Action: policy.ActionDeny, Reason: "rule set " + string(m) + " is not loaded"}
}

// Needs says it judges everything, server messages included: each is denied.
func (missingRuleSet) Needs() policy.Needs {
	return policy.Needs{Level: policy.LevelBody, Headers: true, Arguments: true, Result: true, ClientInfo: true, ServerMessages: true}
}

// noteRuleErrors counts and logs (rate-limited) the rules that failed to evaluate for one
// request. Only rule names are logged: the errors themselves may quote request data, header values
// included. The record names them through the decision's reason.
func (e *Engine) noteRuleErrors(f *flow, d *policy.Decision) {
	if len(d.Errors) == 0 {
		return
	}
	names := make([]string, len(d.Errors))
	for i, re := range d.Errors {
		names[i] = re.Rule
		if m := e.opt.Metrics; m != nil && m.RuleErrors != nil {
			m.RuleErrors.WithLabelValues(f.rules.name, re.Rule).Inc()
		}
	}
	e.refuseLog.warn("rule_error:"+f.rules.name+":"+names[0], "rules failed to evaluate",
		"flow", f.id, "rule_set", f.rules.name, "rules", names, "fail_open", f.rules.failOpen,
		"decision", d.Action)
}
