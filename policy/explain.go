package policy

import (
	"sync"

	"cel.dev/cel-go/cel"
	"cel.dev/cel-go/common/types"
	"cel.dev/cel-go/interpreter"
)

// What one rule made of a request, in Explain.
const (
	OutcomeMatch       = "match"        // its `when` is true
	OutcomeNoMatch     = "no_match"     // its `when` is false, or reads a field the request lacked
	OutcomeUnknown     = "unknown"      // its outcome depends on a field the input cannot supply (see Explain)
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
	// Assumed is, for an OutcomeUnknown rule reached before the decision, how the decision
	// took it: OutcomeNoMatch, OutcomeMatch, or OutcomeLimited for a rate limit (see
	// ExplainAssuming).
	Assumed string `json:"assumed,omitempty"`
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
	// Unknown says a rule reached before the decision could not be evaluated: its outcome
	// depends on a field the input cannot supply. Decision is what the rules decide with each
	// such rule taken as the assume function of ExplainAssuming said (as not matching, in
	// Explain); with every field known the decision may differ.
	Unknown bool
}

// Explain decides in as Evaluate does and says what each rule made of it, the rules after the
// deciding one included (they are evaluated, but a rate limit past the decision spends no token,
// as in Evaluate). known reports whether the input can supply a field, named as rules write it
// ("mcp.arguments", "http.headers", or a variable alone, "mcp", for a rule that uses it as a
// whole). A rule that reads a field known refuses is evaluated partially (CEL partial
// evaluation, the field an unknown attribute): when the rest of the expression decides it
// anyway (mcp.method == "tools/call" && mcp.arguments.x == 1 on a tools/list), that is its
// outcome; only a rule whose outcome depends on the missing field is OutcomeUnknown, and is
// taken as not matching. An offline replay (mcpintercept policy test) passes known for what a
// flow log record carries and compiles the set WithClock, set to each record's time, so that rate
// limits meter the records as the live set metered the requests.
func (s *Set) Explain(in *Input, known func(field string) bool) Explanation {
	return s.ExplainAssuming(in, known, nil)
}

// ExplainAssuming is Explain, with assume saying how to take a rule whose outcome is unknown
// (reached before the decision): true takes it as having matched (a rate limit: as having run
// out of tokens; it spends none), false or a nil assume as not. A replay passes "the record
// names this rule": the decision is then the recorded one whenever some outcome of the unknown
// rules gives it, and one that still differs differs whatever the missing fields held.
func (s *Set) ExplainAssuming(in *Input, known func(field string) bool, assume func(rule string) bool) Explanation {
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
	var partial interpreter.PartialActivation // built on first use: the fields known refuses
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
		var unknown []string
		if known != nil {
			for _, u := range r.uses {
				if name := u.name(); !known(name) {
					appendUnique(&unknown, name)
				}
			}
		}
		when, key, eact := r.when, cel.Program(nil), interpreter.Activation(act)
		isUnknown := false
		if len(unknown) > 0 {
			if partial == nil {
				partial = partialActivation(act, s.rules, known)
			}
			p := r.partialPrograms()
			if p.err != nil || partial == nil {
				// Cannot happen (the same checked expression was planned at Compile); if it
				// did, the rule is not evaluated.
				isUnknown = true
			}
			when, key, eact = p.when, p.key, partial
		}
		var scratch Decision
		matched, errMsg := true, ""
		if when != nil && !isUnknown {
			out, _, err := when.Eval(eact)
			switch {
			case types.IsUnknown(out):
				isUnknown = true
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
		if !isUnknown && matched && key != nil {
			// A key that reads a missing field leaves the bucket, and so the outcome, unknown.
			if out, _, _ := key.Eval(eact); types.IsUnknown(out) {
				isUnknown = true
			}
		}
		if isUnknown {
			o.Outcome, o.Unknown = OutcomeUnknown, unknown
			if !decided {
				ex.Unknown = true
				o.Assumed = OutcomeNoMatch
				if assume != nil && assume(r.name) {
					o.Assumed = OutcomeMatch
					if r.action == RuleRateLimit {
						o.Assumed = OutcomeLimited
					}
					decided = assumeHit(d, r)
					o.Decided = decided
				}
			}
			ex.Rules = append(ex.Rules, o)
			continue
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

// assumeHit applies a rule whose outcome is unknown as having matched (a rate limit: as limited)
// and reports whether that decides.
func assumeHit(d *Decision, r *rule) bool {
	switch r.action {
	case RuleAllow:
		d.Action, d.Rule, d.Reason = ActionAllow, r.name, r.reason
		return true
	case RuleDeny, RuleRateLimit:
		act := ActionDeny
		if r.action == RuleRateLimit {
			act = ActionRateLimited
		}
		if r.shadow {
			d.Shadow = append(d.Shadow, ShadowHit{Rule: r.name, Would: act, Reason: r.reason})
			return false
		}
		d.Action, d.Rule, d.Reason = act, r.name, r.reason
		return true
	case RuleRedact:
		d.Redactions = append(d.Redactions, r.redact)
	}
	return false
}

// partialPrograms are a rule's expressions planned for partial evaluation (Explain), once.
type partialPrograms struct {
	once      sync.Once
	when, key cel.Program
	err       error
}

func (r *rule) partialPrograms() *partialPrograms {
	p := &r.partial
	p.once.Do(func() {
		env, err := celEnv()
		if err != nil {
			p.err = err
			return
		}
		opt := cel.EvalOptions(cel.OptPartialEval)
		if r.whenAST != nil {
			if p.when, err = env.Program(r.whenAST, opt); err != nil {
				p.err = err
				return
			}
		}
		if r.keyAST != nil {
			p.key, p.err = env.Program(r.keyAST, opt)
		}
	})
	return p
}

// partialActivation is act with every field some rule reads and known refuses as an unknown
// attribute (mcp.arguments: the pattern mcp.arguments, which matches mcp.arguments.path, a
// presence test of it, and the whole variable mcp as in size(mcp) or mcp[k]). A rule that uses a
// variable as a whole marks each of its fields known refuses.
func partialActivation(act activation, rules []*rule, known func(string) bool) interpreter.PartialActivation {
	var pats []*interpreter.AttributePattern
	seen := map[string]bool{}
	add := func(root, field string) {
		if seen[root+"."+field] {
			return
		}
		seen[root+"."+field] = true
		p := interpreter.NewAttributePattern(root)
		if field != "" {
			p = p.QualString(field)
		}
		pats = append(pats, p)
	}
	for _, r := range rules {
		for _, u := range r.uses {
			if known(u.name()) {
				continue
			}
			if u.field != nil {
				add(u.root.varName, u.field.name)
				continue
			}
			some := false
			for _, f := range u.root.fields {
				if !known(u.root.varName + "." + f.name) {
					add(u.root.varName, f.name)
					some = true
				}
			}
			if !some {
				add(u.root.varName, "")
			}
		}
	}
	// NewActivation takes an Activation as it is: no error. A nil answer leaves every rule
	// that reads a missing field unknown.
	pa, _ := interpreter.NewPartialActivation(act, pats...)
	return pa
}
