package policy

import "cel.dev/cel-go/common/types"

// What one rule made of a request, in Explain.
const (
	OutcomeMatch       = "match"        // its `when` is true
	OutcomeNoMatch     = "no_match"     // its `when` is false, or reads a field the request lacked
	OutcomeUnknown     = "unknown"      // it reads a field the input cannot supply (see Explain)
	OutcomeError       = "error"        // it failed to evaluate
	OutcomeSkipped     = "skipped"      // a server message, and the rule judges none
	OutcomeWithinLimit = "within_limit" // a rate limit that matched and had a token
	OutcomeLimited     = "limited"      // a rate limit that matched and had none
)

// RuleOutcome is one rule's part in an Explanation.
type RuleOutcome struct {
	Rule    string `json:"rule"`
	Action  string `json:"action"`  // allow, deny, rate_limit or redact
	Mode    string `json:"mode"`    // ModeEnforce or ModeShadow
	Outcome string `json:"outcome"` // one of the Outcome constants
	// Unknown lists the fields the rule reads that the input cannot supply (OutcomeUnknown);
	// Absent those it read and the request did not carry; Err the evaluation error.
	Unknown []string `json:"unknown,omitempty"`
	Absent  []string `json:"absent,omitempty"`
	Err     string   `json:"error,omitempty"`
	// Decided: this rule made the decision.
	Decided bool `json:"decided,omitempty"`
}

// HasRule reports whether the set has a rule of that name.
func (s *Set) HasRule(name string) bool {
	if s == nil {
		return false
	}
	for _, r := range s.rules {
		if r.name == name {
			return true
		}
	}
	return false
}

// Explanation is Explain's answer.
type Explanation struct {
	Decision Decision
	Rules    []RuleOutcome
	// Unknown says a rule reached before the decision could not be evaluated: Decision is what
	// the rules that could be evaluated decide, and the decision with every field known may
	// differ.
	Unknown bool
}

// Explain decides in as Evaluate does and says what each rule made of it, the rules after the
// deciding one included (they are evaluated, but a rate limit past the decision spends no token,
// as in Evaluate). known reports whether the input can supply a field, named as rules write it
// ("mcp.arguments", "http.headers", or a variable alone, "mcp", for a rule that uses it as a
// whole); a rule reading a field known refuses is OutcomeUnknown and is not evaluated. An
// offline replay (mcpintercept policy test) passes known for what a flow log record carries and
// compiles the set WithClock, set to each record's time, so that rate limits meter the records
// as the live set metered the requests.
func (s *Set) Explain(in *Input, known func(field string) bool) Explanation {
	var ex Explanation
	d := &ex.Decision
	if s == nil {
		d.Action, d.Reason = ActionAllow, ReasonNoMatch
		return ex
	}
	if in == nil {
		in = new(Input)
	}
	in.lazy.done, in.lazy.tags = 0, [scalarWays]uint8{}
	act := activation{in: in}
	decided := false
	for _, r := range s.rules {
		o := RuleOutcome{Rule: r.name, Action: r.action, Mode: ModeEnforce}
		if r.shadow {
			o.Mode = ModeShadow
		}
		if in.ServerMessage && !r.readsServer {
			o.Outcome = OutcomeSkipped
			ex.Rules = append(ex.Rules, o)
			continue
		}
		if known != nil {
			for _, u := range r.uses {
				if name := u.name(); !known(name) {
					appendUnique(&o.Unknown, name)
				}
			}
		}
		if len(o.Unknown) > 0 {
			o.Outcome = OutcomeUnknown
			ex.Unknown = ex.Unknown || !decided
			ex.Rules = append(ex.Rules, o)
			continue
		}
		var scratch Decision
		matched, errMsg := true, ""
		if r.when != nil {
			out, _, err := r.when.Eval(act)
			switch {
			case err != nil:
				matched = false
				if msg, failed := s.noteError(&scratch, r, in, err); failed {
					errMsg = msg
				}
			default:
				b, ok := out.(types.Bool)
				if !ok {
					matched, errMsg = false, "when evaluated to "+out.Type().TypeName()+", not bool"
				} else {
					matched = bool(b)
				}
			}
		}
		if matched && r.action == RuleRateLimit {
			key, kerr := s.bucketKey(&scratch, r, in, act)
			if kerr != "" {
				matched, errMsg = false, kerr
			} else if !decided {
				allowed, wait := r.rl.store.take(key, s.now(), r.rl.rate, r.rl.burst)
				o.Outcome = OutcomeWithinLimit
				if !allowed {
					o.Outcome = OutcomeLimited
					if r.shadow {
						d.Shadow = append(d.Shadow, ShadowHit{Rule: r.name, Would: ActionRateLimited, Reason: r.reason})
					} else {
						d.Action, d.Rule, d.Reason, d.RetryAfter = ActionRateLimited, r.name, r.reason, wait
						decided, o.Decided = true, true
					}
				}
			}
		}
		o.Absent = scratch.Absent
		if !decided {
			for _, a := range scratch.Absent {
				appendUnique(&d.Absent, a)
			}
		}
		switch {
		case errMsg != "":
			o.Outcome, o.Err = OutcomeError, shortErr(errMsg)
			if !decided && ruleFailed(d, r, in, errMsg) {
				decided, o.Decided = true, true
			}
		case !matched:
			o.Outcome = OutcomeNoMatch
		case r.action == RuleRateLimit:
			if o.Outcome == "" { // past the decision: matched, not metered
				o.Outcome = OutcomeMatch
			}
		default:
			o.Outcome = OutcomeMatch
			if decided {
				break
			}
			switch r.action {
			case RuleAllow:
				d.Action, d.Rule, d.Reason = ActionAllow, r.name, r.reason
				decided, o.Decided = true, true
			case RuleDeny:
				if r.shadow {
					d.Shadow = append(d.Shadow, ShadowHit{Rule: r.name, Would: ActionDeny, Reason: r.reason})
				} else {
					d.Action, d.Rule, d.Reason = ActionDeny, r.name, r.reason
					decided, o.Decided = true, true
				}
			case RuleRedact:
				d.Redactions = append(d.Redactions, r.redact)
			}
		}
		ex.Rules = append(ex.Rules, o)
	}
	if !decided {
		d.Action, d.Reason = ActionAllow, noMatchReason(d.Errors)
	}
	for _, h := range d.Shadow {
		d.Reason += "; " + h.String()
	}
	return ex
}
