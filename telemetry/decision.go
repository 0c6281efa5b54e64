package telemetry

import (
	"fmt"
	"strings"
)

// The decisions a record carries (FlowRecord.Decision, the decision label of
// mcpintercept_requests_total), spelled as policy's actions are: one spelling everywhere a
// decision is printed or filtered on (observe, log, audit show, the metrics).
const (
	DecisionAllow       = "allow"
	DecisionDeny        = "deny"
	DecisionRateLimited = "rate_limited"
)

// The filter values that select records a shadow rule (mode: shadow) would have decided: the
// record's reason carries "would_deny by RULE (shadow)" (or would_rate_limit).
const (
	FilterWouldDeny      = "would_deny"
	FilterWouldRateLimit = "would_rate_limit"
)

// decisionAliases are the other spellings accepted on input: rate_limit (the rule's action,
// which earlier observe help named) and ratelimited (what the audit log wrote before).
var decisionAliases = map[string]string{
	"rate_limit":  DecisionRateLimited,
	"ratelimited": DecisionRateLimited,
}

// DecisionFilterValues are the values a --decision filter takes, as an error message lists them.
const DecisionFilterValues = "allow, deny, rate_limited, would_deny or would_rate_limit"

// CanonicalDecision is s in its one spelling (an alias replaced); any other string unchanged.
func CanonicalDecision(s string) string {
	if c, ok := decisionAliases[s]; ok {
		return c
	}
	return s
}

// ParseDecisions reads a comma-separated decision filter (blank items skipped): each value is a
// decision, a shadow value or an alias, returned in its one spelling. An unknown value is an
// error naming the valid ones.
func ParseDecisions(s string) ([]string, error) {
	var out []string
	for _, v := range strings.Split(s, ",") {
		raw := strings.TrimSpace(v)
		if raw == "" {
			continue
		}
		switch v := CanonicalDecision(strings.ToLower(raw)); v {
		case DecisionAllow, DecisionDeny, DecisionRateLimited, FilterWouldDeny, FilterWouldRateLimit:
			out = append(out, v)
		default:
			return nil, fmt.Errorf("decision %q: want %s", raw, DecisionFilterValues)
		}
	}
	return out, nil
}

// MatchDecision says whether r carries one of the decisions in want (ParseDecisions' values);
// an empty want matches every record.
func MatchDecision(want []string, r *FlowRecord) bool {
	if len(want) == 0 {
		return true
	}
	d := CanonicalDecision(r.Decision)
	for _, w := range want {
		switch w {
		case FilterWouldDeny, FilterWouldRateLimit:
			if strings.Contains(r.Reason, w+" by ") {
				return true
			}
		default:
			if d == w {
				return true
			}
		}
	}
	return false
}

// Denied says whether d denies the request (deny or rate_limited, in any spelling).
func Denied(d string) bool {
	d = CanonicalDecision(d)
	return d == DecisionDeny || d == DecisionRateLimited
}

// KindOf is the kind of a record read back from a flow log (which does not write the kind): a
// JSON-RPC message carries a direction, an HTTP exchange an HTTP method, a flow neither.
func KindOf(r *FlowRecord) Kind {
	switch {
	case r.Direction != "":
		return KindMessage
	case r.HTTPMethod != "":
		return KindExchange
	}
	return KindFlow
}
