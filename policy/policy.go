package policy

import (
	"fmt"
	"math"
	"strings"
	"time"

	"cel.dev/cel-go/cel"
	"cel.dev/cel-go/common/types"
	"cel.dev/cel-go/interpreter"
)

// Rule actions, as written in the configuration.
const (
	RuleAllow     = "allow"
	RuleDeny      = "deny"
	RuleRateLimit = "rate_limit"
)

// Decision actions, as written in the decision log.
const (
	ActionAllow       = "allow"
	ActionDeny        = "deny"
	ActionRateLimited = "rate_limited"
)

// ReasonNoMatch is the reason of the default allow, so the decision log never has an empty reason.
const ReasonNoMatch = "no rule matched"

// RateLimit describes the token bucket of a rate_limit rule.
type RateLimit struct {
	// Key is a CEL expression whose value names the bucket, e.g. `client.address`. Non-string
	// values are converted with string(). Empty means one bucket shared by every request the
	// rule matches.
	Key   string
	Rate  float64 // tokens per second
	Burst int     // bucket size
}

// RuleSpec is one rule as the configuration states it.
type RuleSpec struct {
	Name      string
	When      string // CEL boolean expression; empty means always
	Action    string // RuleAllow, RuleDeny or RuleRateLimit
	Reason    string // optional; a default naming the rule is used when empty
	RateLimit *RateLimit
	// Pos is where the `when` expression starts and KeyPos where the rate limit key starts, so
	// that errors point into the YAML file rather than into the expression.
	Pos, KeyPos Pos
}

// Input holds the request facts a rule can read. A key is absent, not empty, when the request did
// not carry that fact (an MCP client older than 2026-07-28 sends no Mcp-Method header): rules
// must be able to tell "no method" from "empty method".
type Input struct {
	Client map[string]any // address, port; later pid, comm, uid, cgroup, exe
	Conn   map[string]any // orig_dst, orig_ip, orig_port, sni, mechanism, tls
	HTTP   map[string]any // method, path, headers (map[string]string, lower-case names, no secrets)
	MCP    map[string]any // version, method, name, session
}

// Decision is the outcome of evaluating a Set against one request.
type Decision struct {
	Action     string // ActionAllow, ActionDeny or ActionRateLimited
	Rule       string // the deciding rule; empty for the default allow
	Reason     string
	RetryAfter time.Duration // until one token is available, when rate limited
	// Absent lists the request fields that rules needed but the request did not carry, e.g.
	// "mcp.method"; those rules did not match.
	Absent []string
	// Errors lists other evaluation failures ("rule NAME: message"); those rules did not match.
	Errors []string
}

// Option adjusts a Set at compile time.
type Option func(*options)

type options struct {
	now        func() time.Time
	maxBuckets int
}

// WithClock replaces time.Now for the token buckets; tests use it to refill without sleeping.
func WithClock(now func() time.Time) Option {
	return func(o *options) { o.now = now }
}

// WithMaxBuckets bounds the number of token buckets (DefaultMaxBuckets when not given). On a
// reload the bound applies to the store shared with the previous Set.
func WithMaxBuckets(n int) Option {
	return func(o *options) { o.maxBuckets = n }
}

// Set is a compiled, ordered rule set. It is safe for concurrent use; a reload compiles a new
// Set (see CompileWithState) and the caller swaps it in atomically.
type Set struct {
	rules []*rule
	store *bucketStore
	now   func() time.Time
}

type rule struct {
	name   string
	action string
	reason string
	when   cel.Program // nil: always
	rl     *rateRule   // only for RuleRateLimit
	// paths are the constant field paths (mcp.method, http.headers["x"]) the rule reads; they
	// turn CEL's bare "no such key: method" into the "mcp.method" the decision log reports.
	paths []fieldPath
}

type rateRule struct {
	id      uint64
	keyExpr string
	key     cel.Program // nil: one bucket for the rule
	// keyPath is set when the key is a plain field path such as client.address, the common
	// case: it is then read straight from the Input, saving a CEL evaluation per request.
	keyPath *fieldPath
	rate    float64
	burst   int
}

// Len returns the number of rules.
func (s *Set) Len() int {
	if s == nil {
		return 0
	}
	return len(s.rules)
}

// Compile compiles and type-checks every rule. It reports all problems at once, as
// CompileErrors, rather than stopping at the first.
func Compile(rules []RuleSpec, opts ...Option) (*Set, error) {
	return CompileWithState(rules, nil, opts...)
}

// CompileWithState compiles rules like Compile and carries over the token buckets of prev (which
// may be nil) for every rate-limit rule whose name and key expression are unchanged, so that a
// configuration reload does not hand every client a fresh budget. Changes of rate or burst take
// effect on the carried buckets. The clock of prev is kept unless WithClock is given.
func CompileWithState(rules []RuleSpec, prev *Set, opts ...Option) (*Set, error) {
	env, err := celEnv()
	if err != nil {
		return nil, fmt.Errorf("policy: %w", err)
	}
	var o options
	for _, opt := range opts {
		opt(&o)
	}

	var errs CompileErrors
	compiled := make([]*rule, 0, len(rules))
	seen := make(map[string]bool, len(rules))
	for i := range rules {
		spec := &rules[i]
		label := spec.Name
		if label == "" {
			label = fmt.Sprintf("#%d", i+1)
			errs = append(errs, &CompileError{Pos: spec.Pos.offset(0, 0), Rule: label, Msg: "rule has no name"})
		} else if seen[label] {
			// Names key the buckets and the decision log: two rules with one name would share
			// budgets and be indistinguishable in an audit.
			errs = append(errs, &CompileError{Pos: spec.Pos.offset(0, 0), Rule: label, Msg: "duplicate rule name"})
		}
		seen[label] = true
		r, rerrs := compileRule(env, spec, label)
		errs = append(errs, rerrs...)
		if r != nil {
			compiled = append(compiled, r)
		}
	}
	if len(errs) > 0 {
		return nil, errs
	}

	s := &Set{rules: compiled, now: time.Now}
	if prev != nil && prev.store != nil {
		s.store = prev.store
		s.now = prev.now
		if o.maxBuckets > 0 {
			s.store.resize(o.maxBuckets)
		}
	} else {
		maxBuckets := o.maxBuckets
		if maxBuckets <= 0 {
			maxBuckets = DefaultMaxBuckets
		}
		s.store = newBucketStore(maxBuckets)
	}
	if o.now != nil {
		s.now = o.now
	}

	// Buckets are keyed by a rule id, not the name: a rule whose key expression changed gets a
	// new id, so its old buckets (keyed by, say, address where it now keys by session) are never
	// consulted again and simply age out of the LRU.
	prevIDs := map[string]*rateRule{}
	if prev != nil {
		for _, r := range prev.rules {
			if r.rl != nil {
				prevIDs[r.name] = r.rl
			}
		}
	}
	for _, r := range s.rules {
		if r.rl == nil {
			continue
		}
		if p, ok := prevIDs[r.name]; ok && p.keyExpr == r.rl.keyExpr {
			r.rl.id = p.id
		} else {
			r.rl.id = s.store.newRuleID()
		}
	}
	return s, nil
}

func compileRule(env *cel.Env, spec *RuleSpec, label string) (*rule, CompileErrors) {
	var errs CompileErrors
	fail := func(pos Pos, format string, args ...any) {
		errs = append(errs, &CompileError{Pos: pos.offset(0, 0), Rule: label, Msg: fmt.Sprintf(format, args...)})
	}
	r := &rule{name: spec.Name, action: spec.Action, reason: spec.Reason}

	switch spec.Action {
	case RuleAllow, RuleDeny:
		if spec.RateLimit != nil {
			fail(spec.Pos, "rate_limit block given but action is %q, not %q", spec.Action, RuleRateLimit)
		}
	case RuleRateLimit:
		rl := spec.RateLimit
		if rl == nil {
			fail(spec.Pos, "action %q needs a rate_limit block (key, rate, burst)", RuleRateLimit)
			break
		}
		if math.IsNaN(rl.Rate) || math.IsInf(rl.Rate, 0) || rl.Rate <= 0 {
			fail(spec.Pos, "rate_limit rate must be a positive number of tokens per second, got %v", rl.Rate)
		}
		if rl.Burst < 1 {
			fail(spec.Pos, "rate_limit burst must be at least 1, got %d", rl.Burst)
		}
		r.rl = &rateRule{keyExpr: strings.TrimSpace(rl.Key), rate: rl.Rate, burst: rl.Burst}
		if r.rl.keyExpr != "" {
			prg, ast, kerrs := compileExpr(env, rl.Key, spec.KeyPos, label, "rate_limit key", keyTypeOK)
			errs = append(errs, kerrs...)
			if prg != nil {
				r.rl.key = prg
				r.paths = appendPaths(r.paths, ast)
				if p, ok := chain(ast.NativeRep().Expr()); ok {
					r.rl.keyPath = &p
				}
			}
		}
	case "":
		fail(spec.Pos, "missing action (want %s, %s or %s)", RuleAllow, RuleDeny, RuleRateLimit)
	default:
		fail(spec.Pos, "unknown action %q (want %s, %s or %s)", spec.Action, RuleAllow, RuleDeny, RuleRateLimit)
	}

	if strings.TrimSpace(spec.When) != "" {
		prg, ast, werrs := compileExpr(env, spec.When, spec.Pos, label, "when", whenTypeOK)
		errs = append(errs, werrs...)
		if prg != nil {
			r.when = prg
			r.paths = appendPaths(r.paths, ast)
		}
	}

	if r.reason == "" {
		switch r.action {
		case RuleAllow:
			r.reason = "allowed by rule " + r.name
		case RuleDeny:
			r.reason = "denied by rule " + r.name
		case RuleRateLimit:
			r.reason = "rate limit " + r.name + " exceeded"
		}
	}
	if len(errs) > 0 {
		return nil, errs
	}
	return r, nil
}

// whenTypeOK accepts dyn as well as bool because every field of the four maps is dyn: `conn.tls`
// is a sensible condition the checker cannot prove boolean. A non-bool value at run time is
// reported in Decision.Errors and the rule does not match.
func whenTypeOK(t *cel.Type) bool {
	return t.IsExactType(cel.BoolType) || t.IsExactType(cel.DynType)
}

// keyTypeOK accepts what string() converts; a list or map key is almost certainly a mistake.
func keyTypeOK(t *cel.Type) bool {
	for _, ok := range []*cel.Type{cel.StringType, cel.IntType, cel.UintType, cel.DoubleType,
		cel.BoolType, cel.BytesType, cel.TimestampType, cel.DurationType, cel.DynType} {
		if t.IsExactType(ok) {
			return true
		}
	}
	return false
}

func compileExpr(env *cel.Env, src string, pos Pos, label, what string, typeOK func(*cel.Type) bool) (cel.Program, *cel.Ast, CompileErrors) {
	var errs CompileErrors
	ast, iss := env.Compile(src)
	if iss != nil && iss.Err() != nil {
		for _, e := range iss.Errors() {
			line, col := -1, -1
			if e.Location != nil {
				line, col = e.Location.Line(), e.Location.Column()
			}
			errs = append(errs, &CompileError{Pos: pos.offset(line, col), Rule: label, Msg: what + ": " + e.Message})
		}
		return nil, nil, errs
	}
	if t := ast.OutputType(); !typeOK(t) {
		want := "bool"
		if what != "when" {
			want = "a value convertible to string"
		}
		errs = append(errs, &CompileError{Pos: pos.offset(0, 0), Rule: label,
			Msg: fmt.Sprintf("%s: expression has type %s, want %s", what, t, want)})
		return nil, nil, errs
	}
	// OptOptimize folds constants and compiles constant regular expressions once here instead
	// of on every request; a bad constant regex therefore fails now, at load time.
	prg, err := env.Program(ast, cel.EvalOptions(cel.OptOptimize))
	if err != nil {
		errs = append(errs, &CompileError{Pos: pos.offset(0, 0), Rule: label, Msg: what + ": " + err.Error()})
		return nil, nil, errs
	}
	return prg, ast, nil
}

// activation resolves the four variables straight from the Input, so Evaluate builds no
// combined map per request. Being a single pointer, it converts to an interface without
// allocating.
type activation struct{ in *Input }

var emptyMap = map[string]any{}

func orEmpty(m map[string]any) map[string]any {
	if m == nil {
		return emptyMap
	}
	return m
}

func (a activation) ResolveName(name string) (any, bool) {
	switch name {
	case varClient:
		return orEmpty(a.in.Client), true
	case varConn:
		return orEmpty(a.in.Conn), true
	case varHTTP:
		return orEmpty(a.in.HTTP), true
	case varMCP:
		return orEmpty(a.in.MCP), true
	}
	return nil, false
}

func (activation) Parent() interpreter.Activation { return nil }

var emptyInput Input

// Evaluate decides one request. It never panics and never blocks on anything but the bucket
// mutex of one shard.
func (s *Set) Evaluate(in *Input) Decision {
	var d Decision
	if s == nil {
		d.Action, d.Reason = ActionAllow, ReasonNoMatch
		return d
	}
	if in == nil {
		in = &emptyInput
	}
	act := activation{in: in}
	for _, r := range s.rules {
		if r.when != nil {
			out, _, err := r.when.Eval(act)
			if err != nil {
				s.noteError(&d, r, in, err)
				continue
			}
			b, ok := out.(types.Bool)
			if !ok {
				d.Errors = append(d.Errors, fmt.Sprintf("rule %s: when evaluated to %s, not bool", r.name, out.Type().TypeName()))
				continue
			}
			if !b {
				continue
			}
		}
		switch r.action {
		case RuleAllow:
			d.Action, d.Rule, d.Reason = ActionAllow, r.name, r.reason
			return d
		case RuleDeny:
			d.Action, d.Rule, d.Reason = ActionDeny, r.name, r.reason
			return d
		case RuleRateLimit:
			key, ok := s.bucketKey(&d, r, in, act)
			if !ok {
				continue
			}
			allowed, wait := s.store.take(r.rl.id, key, s.now(), r.rl.rate, r.rl.burst)
			if allowed {
				// A limit with budget left is a meter, not a verdict: later rules still decide.
				continue
			}
			d.Action, d.Rule, d.Reason, d.RetryAfter = ActionRateLimited, r.name, r.reason, wait
			return d
		}
	}
	d.Action, d.Reason = ActionAllow, ReasonNoMatch
	return d
}

func (s *Set) bucketKey(d *Decision, r *rule, in *Input, act activation) (string, bool) {
	if r.rl.key == nil {
		return "", true
	}
	if p := r.rl.keyPath; p != nil {
		if key, absent, ok := p.resolveString(in); ok {
			return key, true
		} else if absent >= 0 {
			appendUnique(&d.Absent, p.names[absent])
			return "", false
		}
		// Anything unusual (a non-string value, a non-map on the way) goes through CEL, which
		// defines the conversion and the error.
	}
	out, _, err := r.rl.key.Eval(act)
	if err != nil {
		s.noteError(d, r, in, err)
		return "", false
	}
	if str, ok := out.(types.String); ok {
		return string(str), true
	}
	conv := out.ConvertToType(types.StringType)
	if str, ok := conv.(types.String); ok {
		return string(str), true
	}
	d.Errors = append(d.Errors, fmt.Sprintf("rule %s: rate_limit key of type %s cannot be converted to string", r.name, out.Type().TypeName()))
	return "", false
}

const noSuchKey = "no such key: "

// noteError files an evaluation error under Absent when it is a request field the request did
// not carry, and under Errors otherwise.
func (s *Set) noteError(d *Decision, r *rule, in *Input, err error) {
	msg := err.Error()
	if key, ok := strings.CutPrefix(msg, noSuchKey); ok {
		if addAbsent(d, r.paths, in, key) {
			return
		}
	}
	d.Errors = append(d.Errors, "rule "+r.name+": "+msg)
}
