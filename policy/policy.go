package policy

import (
	"fmt"
	"math"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"cel.dev/cel-go/cel"
	celast "cel.dev/cel-go/common/ast"
	"cel.dev/cel-go/common/operators"
	"cel.dev/cel-go/common/types"
	"cel.dev/cel-go/interpreter"
)

// Rule actions, as written in the configuration.
const (
	RuleAllow     = "allow"
	RuleDeny      = "deny"
	RuleRateLimit = "rate_limit"
)

// Rule modes, as written in the configuration.
const (
	// ModeEnforce (or "") is a rule that decides.
	ModeEnforce = "enforce"
	// ModeShadow is a dry run: the rule is evaluated where it stands, as if it were enforced, and
	// what it would have decided is added to Decision.Shadow, but it never decides. Only deny and
	// rate_limit rules can be shadows.
	ModeShadow = "shadow"
)

// Action is what was decided about a request, a flow or a message, as the decision log writes it
// (its `decision` key). It is the one definition of the vocabulary: policy decides with it, the
// Level 1 and Level 2 stages answer with it, the exchange pipeline carries it in a Verdict without
// interpreting it, and the engine writes it into the flow record.
type Action string

// The decisions.
const (
	ActionAllow       Action = "allow"
	ActionDeny        Action = "deny"
	ActionRateLimited Action = "rate_limited"
)

// ReasonNoMatch is the reason of the default allow, so the decision log never has an empty reason.
// When rules failed to evaluate, the reason goes on to name them (see Decision.Errors).
const ReasonNoMatch = "no rule matched"

// RateLimit describes the token bucket of a rate_limit rule.
type RateLimit struct {
	// Key is a CEL expression whose value names the bucket, e.g. `client.address`. Non-string
	// values are converted with string(). Empty means one bucket shared by every request the
	// rule matches. When the key reads a field the request did not carry, the request is
	// metered in the rule's single "absent" bucket (see the package documentation).
	Key   string
	Rate  float64 // tokens per second
	Burst int     // bucket size
	// MaxKeys bounds how many distinct keys (buckets) this rule keeps; the least recently used
	// is forgotten first. 0 means DefaultMaxKeys; at most MaxMaxKeys. Every rule has a store of
	// its own, so the keys another rule meters cannot evict this rule's buckets.
	MaxKeys int
}

// RuleSpec is one rule as the configuration states it.
type RuleSpec struct {
	Name      string
	When      string // CEL boolean expression; empty means always
	Action    string // RuleAllow, RuleDeny or RuleRateLimit
	Reason    string // optional; a default naming the rule is used when empty
	Mode      string // ModeEnforce (or "") or ModeShadow
	RateLimit *RateLimit
	// Redact is the redact block of a RuleRedact rule: what to hide in the message it matches.
	Redact *Redact
	// Pos is where the `when` expression starts and KeyPos where the rate limit key starts, so
	// that errors point into the YAML file rather than into the expression.
	Pos, KeyPos Pos
}

// Input holds the request facts a rule can read. A field is absent, not empty, when the request
// did not carry that fact (an MCP client older than 2026-07-28 sends no Mcp-Method header): rules
// must be able to tell "no method" from "empty method".
//
// Vars holds them typed (see Vars). The four maps are the older form, kept while callers move to
// Vars: a variable whose map is non-nil is read from the map, its typed struct ignored. An Input
// serves one Evaluate at a time (Evaluate keeps what it asked of the lazy values in it).
type Input struct {
	Vars Vars

	// Deprecated: set Vars.Client.
	Client map[string]any
	// Deprecated: set Vars.Conn.
	Conn map[string]any
	// Deprecated: set Vars.HTTP.
	HTTP map[string]any
	// Deprecated: set Vars.MCP.
	MCP map[string]any

	// FailOpen chooses what a rule that fails to evaluate (a run-time error in its `when` or
	// rate limit key, not an absent field) does. False, the default, fails closed: a deny or
	// rate_limit rule that errors denies the request, with a reason naming the rule. True skips
	// the rule and evaluation goes on. An allow rule that errors is skipped either way: an error
	// never grants. Every such error is listed in Decision.Errors.
	FailOpen bool

	// ServerMessage marks a message from the server (a result, an error, a server→client request
	// at Level 2). Only rules that read mcp.direction, mcp.result or mcp.error judge it: a rule
	// written for requests (`mcp.method == "tools/call"`) must neither deny the results of the
	// calls it allowed nor spend rate-limit tokens on them.
	ServerMessage bool

	// Probe asks what the rules would decide about a message that is not being sent: Level 2
	// asks it for every entry of a tools/list (would a call to this tool be denied to this
	// client?). A probe skips rate_limit rules, spending no tokens, redact rules and shadow
	// rules (a dry run must not hide a tool).
	Probe bool

	lazy lazy
}

// RuleError is one rule that failed to evaluate for one request.
type RuleError struct {
	Rule string // the rule's name
	Err  string // a short, single-line message (it may quote request data, up to a bound)
}

// String returns the form Decision.Reason uses: "rule NAME failed to evaluate: MESSAGE".
func (e RuleError) String() string {
	return "rule " + e.Rule + " failed to evaluate: " + e.Err
}

// Decision is the outcome of evaluating a Set against one request.
type Decision struct {
	Action     Action // ActionAllow, ActionDeny or ActionRateLimited
	Rule       string // the deciding rule; empty for the default allow
	Reason     string
	RetryAfter time.Duration // until one token is available, when rate limited
	// Absent lists the request fields that rules needed but the request did not carry, e.g.
	// "mcp.method". A `when` that reads an absent field does not match; a rate limit key that
	// reads one meters the request in the rule's "absent" bucket.
	Absent []string
	// Errors lists every rule that failed to evaluate during this evaluation, in rule order (see
	// Input.FailOpen). When such a rule decided (fail closed), it is the last entry and Rule
	// names it.
	Errors []RuleError
	// Redactions are the redact blocks of every redact rule that matched before the decision, in
	// rule order. A redact rule does not decide: evaluation goes on past it, and a later deny
	// still denies.
	Redactions []*Redaction
	// Shadow lists what the shadow rules reached before the decision would have decided, in
	// rule order (see ModeShadow). Reason then ends with their ShadowHit.String.
	Shadow []ShadowHit
}

// ShadowHit is a shadow rule that would have decided a request.
type ShadowHit struct {
	Rule   string
	Would  Action // ActionDeny or ActionRateLimited
	Reason string // the rule's reason, or the rule error that would have denied
}

// String is the form Decision.Reason carries: "would_deny by RULE (shadow): REASON", or
// would_rate_limit for a limit without budget.
func (h ShadowHit) String() string {
	w := "would_deny"
	if h.Would == ActionRateLimited {
		w = "would_rate_limit"
	}
	return w + " by " + h.Rule + " (shadow): " + h.Reason
}

// Option adjusts a Set at compile time.
type Option func(*options)

type options struct {
	now func() time.Time
}

// WithClock replaces time.Now for the token buckets; tests use it to refill without sleeping.
func WithClock(now func() time.Time) Option {
	return func(o *options) { o.now = now }
}

// Set is a compiled, ordered rule set. It is safe for concurrent use; a reload compiles a new
// Set (see CompileWithState) and the caller swaps it in atomically.
type Set struct {
	rules    []*rule
	now      func() time.Time
	argPaths [][]string // the union of the rules' argPaths
	needs    Needs
}

type rule struct {
	name   string
	action string
	reason string
	shadow bool        // ModeShadow: records what it would decide, never decides
	when   cel.Program // nil: always
	rl     *rateRule   // only for RuleRateLimit
	redact *Redaction  // only for RuleRedact
	// paths are the constant field paths (mcp.method, http.headers["x"]) the rule reads; they
	// turn CEL's bare "no such key: method" into the "mcp.method" the decision log reports.
	paths []fieldPath
	// readsServer: the rule reads mcp.direction, mcp.result or mcp.error, so it was written with
	// server→client messages in mind (see Input.ServerMessage).
	readsServer bool
	// argPaths are the key chains under mcp.arguments the rule reads (see ArgumentPaths).
	argPaths [][]string
	// uses are the fields the rule reads, with their positions (see Needs, CheckLevel).
	uses []fieldUse
	// whenAST and keyAST are the checked expressions, kept for Explain, which plans them again
	// for partial evaluation (see partialPrograms) the first time it needs them.
	whenAST, keyAST *cel.Ast
	partial         partialPrograms
}

type rateRule struct {
	store   *bucketStore // this rule's buckets; shared with the previous Set across a reload
	keyExpr string
	key     cel.Program // nil: one bucket for the rule
	// keyPath is set when the key is a plain field path such as client.address, the common
	// case: it is then read straight from the Input, saving a CEL evaluation per request.
	keyPath *fieldPath
	rate    float64
	burst   int
	maxKeys int
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
// configuration reload does not hand every client a fresh budget. Changes of rate, burst and
// MaxKeys take effect on the carried buckets, which prev and the new Set then share. The clock
// of prev is kept unless WithClock is given.
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
	if prev != nil && prev.now != nil {
		s.now = prev.now
	}
	if o.now != nil {
		s.now = o.now
	}
	for _, r := range s.rules {
		for _, p := range r.argPaths {
			s.argPaths = appendUniqueKeys(s.argPaths, p)
		}
	}
	s.computeNeeds()

	// A rule keeps its buckets only while its name and key expression stay the same: a rule
	// whose key changed (from address to session, say) gets a new store, and its old buckets go
	// with the previous Set.
	prevRL := map[string]*rateRule{}
	if prev != nil {
		for _, r := range prev.rules {
			if r.rl != nil {
				prevRL[r.name] = r.rl
			}
		}
	}
	for _, r := range s.rules {
		if r.rl == nil {
			continue
		}
		if p, ok := prevRL[r.name]; ok && p.keyExpr == r.rl.keyExpr && p.store != nil {
			r.rl.store = p.store
			if p.maxKeys != r.rl.maxKeys {
				r.rl.store.resize(r.rl.maxKeys)
			}
		} else {
			r.rl.store = newBucketStore(r.rl.maxKeys)
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
	switch spec.Mode {
	case "", ModeEnforce:
	case ModeShadow:
		if spec.Action != RuleDeny && spec.Action != RuleRateLimit {
			// A shadow allow would change nothing a record could show; a shadow redact would
			// have to say what it would hide, which the record must not carry.
			fail(spec.Pos, "mode %q applies to %s and %s rules only, not %q", ModeShadow, RuleDeny, RuleRateLimit, spec.Action)
		}
		r.shadow = true
	default:
		fail(spec.Pos, "unknown mode %q (want %s or %s)", spec.Mode, ModeEnforce, ModeShadow)
	}

	switch spec.Action {
	case RuleAllow, RuleDeny:
		if spec.RateLimit != nil {
			fail(spec.Pos, "rate_limit block given but action is %q, not %q", spec.Action, RuleRateLimit)
		}
		if spec.Redact != nil {
			fail(spec.Pos, "redact block given but action is %q, not %q", spec.Action, RuleRedact)
		}
	case RuleRedact:
		if spec.RateLimit != nil {
			fail(spec.Pos, "rate_limit block given but action is %q, not %q", spec.Action, RuleRateLimit)
		}
		if spec.Redact == nil {
			fail(spec.Pos, "action %q needs a redact block (paths and/or patterns)", RuleRedact)
			break
		}
		red, msgs := compileRedact(spec.Redact)
		for _, m := range msgs {
			fail(spec.Pos, "%s", m)
		}
		red.Rule = spec.Name
		r.redact = red
	case RuleRateLimit:
		if spec.Redact != nil {
			fail(spec.Pos, "redact block given but action is %q, not %q", spec.Action, RuleRedact)
		}
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
		maxKeys := rl.MaxKeys
		if maxKeys == 0 {
			maxKeys = DefaultMaxKeys
		}
		if maxKeys < 0 || maxKeys > MaxMaxKeys {
			fail(spec.Pos, "rate_limit max_keys must be between 1 and %d, got %d", MaxMaxKeys, rl.MaxKeys)
		}
		r.rl = &rateRule{keyExpr: strings.TrimSpace(rl.Key), rate: rl.Rate, burst: rl.Burst, maxKeys: maxKeys}
		if r.rl.keyExpr != "" {
			prg, ast, kerrs := compileExpr(env, rl.Key, spec.KeyPos, label, "rate_limit key", keyTypeOK)
			errs = append(errs, kerrs...)
			if prg != nil {
				r.rl.key, r.keyAST = prg, ast
				errs = append(errs, r.addUses(ast, spec.KeyPos, label, "rate_limit key")...)
				r.paths = appendPaths(r.paths, ast)
				r.argPaths = appendArgPaths(r.argPaths, ast)
				if p, ok := chain(ast.NativeRep().Expr()); ok {
					p.fast = fastField(p)
					r.rl.keyPath = &p
				}
			}
		}
	case "":
		fail(spec.Pos, "missing action (want %s, %s, %s or %s)", RuleAllow, RuleDeny, RuleRateLimit, RuleRedact)
	default:
		fail(spec.Pos, "unknown action %q (want %s, %s, %s or %s)", spec.Action, RuleAllow, RuleDeny, RuleRateLimit, RuleRedact)
	}

	if strings.TrimSpace(spec.When) != "" {
		prg, ast, werrs := compileExpr(env, spec.When, spec.Pos, label, "when", whenTypeOK)
		errs = append(errs, werrs...)
		if prg != nil {
			r.when, r.whenAST = prg, ast
			errs = append(errs, r.addUses(ast, spec.Pos, label, "when")...)
			r.paths = appendPaths(r.paths, ast)
			r.argPaths = appendArgPaths(r.argPaths, ast)
		}
	}

	for _, p := range r.paths {
		if p.root == varMCP && len(p.segs) > 0 && (p.segs[0] == "direction" || p.segs[0] == "result" || p.segs[0] == "error") {
			r.readsServer = true
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
		case RuleRedact:
			r.reason = "redacted by rule " + r.name
		}
	}
	if len(errs) > 0 {
		return nil, errs
	}
	return r, nil
}

// whenTypeOK accepts dyn as well as bool: a value read from a map of dyn (mcp.arguments.admin)
// is a sensible condition the checker cannot prove boolean. A non-bool value at run time is a
// rule error (Decision.Errors, Input.FailOpen).
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

// addUses records the fields the expression of a reads and returns the errors of constant keys
// that name no field.
func (r *rule) addUses(a *cel.Ast, start Pos, label, what string) CompileErrors {
	uses, msgs, at := fieldUses(a, exprPos(a, start))
	r.uses = append(r.uses, uses...)
	var errs CompileErrors
	for i, m := range msgs {
		errs = append(errs, &CompileError{Pos: at[i], Rule: label, Msg: what + ": " + m})
	}
	return errs
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
	widenDynIndexCalls(ast)
	// OptOptimize folds constants and compiles constant regular expressions once here instead
	// of on every request; a bad constant regex therefore fails now, at load time.
	prg, err := env.Program(ast, cel.EvalOptions(cel.OptOptimize))
	if err != nil {
		errs = append(errs, &CompileError{Pos: pos.offset(0, 0), Rule: label, Msg: what + ": " + err.Error()})
		return nil, nil, errs
	}
	return prg, ast, nil
}

// widenDynIndexCalls undoes a guess of the checker. A value read by index from a map whose type
// it does not know (http.headers["x"]: http.headers is dyn) gets its type from the call it is
// passed to, and the call is then bound to that one overload: int(http.headers["x"]) becomes
// int(int), which fails on every request with "no such overload: int(string)", whatever the
// header holds. Such calls are left to dispatch on the value's actual type at run time, as
// they would be in an unchecked expression; every other call keeps its checked binding.
func widenDynIndexCalls(a *cel.Ast) {
	nat := a.NativeRep()
	refs := nat.ReferenceMap()
	fromDynIndex := func(e celast.Expr) bool {
		if e.Kind() != celast.CallKind {
			return false
		}
		c := e.AsCall()
		if c.FunctionName() != operators.Index || len(c.Args()) != 2 {
			return false
		}
		return nat.GetType(c.Args()[0].ID()).Kind() == types.DynKind
	}
	celast.PostOrderVisit(nat.Expr(), celast.NewExprVisitor(func(e celast.Expr) {
		if e.Kind() != celast.CallKind {
			return
		}
		ref, ok := refs[e.ID()]
		if !ok || len(ref.OverloadIDs) != 1 {
			return
		}
		c := e.AsCall()
		args := c.Args()
		if c.IsMemberFunction() {
			args = append([]celast.Expr{c.Target()}, args...)
		}
		for _, arg := range args {
			if fromDynIndex(arg) {
				// More than one overload id, or none, makes the planner dispatch by name.
				ref.OverloadIDs = nil
				return
			}
		}
	}))
}

// activation resolves the four variables straight from the Input, so Evaluate builds no
// combined map per request. Being a single pointer, it converts to an interface without
// allocating, and so do the views it resolves to.
type activation struct{ in *Input }

func (a activation) ResolveName(name string) (any, bool) {
	v := a.in.root(name)
	return v, v != nil
}

func (activation) Parent() interpreter.Activation { return nil }

// Evaluate decides one request. It never panics and never blocks on anything but the bucket
// mutex of one shard.
func (s *Set) Evaluate(in *Input) Decision {
	d := s.evaluate(in)
	for _, h := range d.Shadow {
		if d.Reason != "" {
			d.Reason += "; "
		}
		d.Reason += h.String()
	}
	return d
}

func (s *Set) evaluate(in *Input) Decision {
	var d Decision
	if s == nil {
		d.Action, d.Reason = ActionAllow, ReasonNoMatch
		return d
	}
	if in == nil {
		in = new(Input)
	}
	in.lazy.done, in.lazy.tags = 0, [scalarWays]uint8{}
	act := activation{in: in}
	for _, r := range s.rules {
		if in.ServerMessage && !r.readsServer {
			continue
		}
		if in.Probe && (r.rl != nil || r.redact != nil || r.shadow) {
			continue
		}
		if r.when != nil {
			in.lazy.unknownTested = ""
			out, _, err := r.when.Eval(act)
			if err == nil && in.lazy.unknownTested != "" {
				// has() of an unknown field answered "set"; the rule read a fact nobody can
				// establish, so it fails rather than decide on a guess.
				err = unknownField(in.lazy.unknownTested)
			}
			if err != nil {
				if msg, failed := s.noteError(&d, r, in, err); failed && ruleFailed(&d, r, in, msg) {
					return d
				}
				continue
			}
			b, ok := out.(types.Bool)
			if !ok {
				if ruleFailed(&d, r, in, "when evaluated to "+out.Type().TypeName()+", not bool") {
					return d
				}
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
			if r.shadow {
				d.Shadow = append(d.Shadow, ShadowHit{Rule: r.name, Would: ActionDeny, Reason: r.reason})
				continue
			}
			d.Action, d.Rule, d.Reason = ActionDeny, r.name, r.reason
			return d
		case RuleRedact:
			// Not a verdict: the caller hides what the rule selects, later rules still decide.
			d.Redactions = append(d.Redactions, r.redact)
			continue
		case RuleRateLimit:
			key, errMsg := s.bucketKey(&d, r, in, act)
			if errMsg != "" {
				if ruleFailed(&d, r, in, errMsg) {
					return d
				}
				continue
			}
			allowed, wait := r.rl.store.take(key, s.now(), r.rl.rate, r.rl.burst)
			if allowed {
				// A limit with budget left is a meter, not a verdict: later rules still decide.
				continue
			}
			if r.shadow {
				// Its tokens are its own (every rule has a store of its own): a shadow limit
				// that ran dry spends nothing of an enforced limit's budget.
				d.Shadow = append(d.Shadow, ShadowHit{Rule: r.name, Would: ActionRateLimited, Reason: r.reason})
				continue
			}
			d.Action, d.Rule, d.Reason, d.RetryAfter = ActionRateLimited, r.name, r.reason, wait
			return d
		}
	}
	d.Action, d.Reason = ActionAllow, noMatchReason(d.Errors)
	return d
}

// ruleFailed records that r failed to evaluate and reports whether that decides the request:
// it does for a deny, rate_limit or redact rule unless the caller asked to fail open (a redact
// rule that cannot tell whether to hide something denies rather than let it through). An allow rule
// that fails is skipped, since an error must never grant what the rule would have.
func ruleFailed(d *Decision, r *rule, in *Input, msg string) bool {
	e := RuleError{Rule: r.name, Err: shortErr(msg)}
	d.Errors = append(d.Errors, e)
	if in.FailOpen || r.action == RuleAllow {
		return false
	}
	if r.shadow {
		// Enforced, it would have denied (fail closed); as a shadow it only says so.
		d.Shadow = append(d.Shadow, ShadowHit{Rule: r.name, Would: ActionDeny, Reason: e.String()})
		return false
	}
	d.Action, d.Rule, d.Reason = ActionDeny, r.name, e.String()
	return true
}

func noMatchReason(errs []RuleError) string {
	switch len(errs) {
	case 0:
		return ReasonNoMatch
	case 1:
		return ReasonNoMatch + "; " + errs[0].String()
	}
	return fmt.Sprintf("%s; %s; %d more rules failed to evaluate", ReasonNoMatch, errs[0], len(errs)-1)
}

// maxErrLen bounds RuleError.Err: CEL messages can quote request data (a header value that did
// not parse as an int), and the message goes into the decision log and the reason.
const maxErrLen = 160

// shortErr makes msg one printable line of at most maxErrLen bytes.
func shortErr(msg string) string {
	if i := strings.IndexAny(msg, "\r\n"); i >= 0 {
		msg = msg[:i]
	}
	msg = strings.ToValidUTF8(msg, "\uFFFD")
	msg = strings.Map(func(r rune) rune {
		if unicode.IsControl(r) {
			return '?'
		}
		return r
	}, msg)
	if len(msg) <= maxErrLen {
		return msg
	}
	cut := maxErrLen - len("…")
	for cut > 0 && !utf8.RuneStart(msg[cut]) {
		cut--
	}
	return msg[:cut] + "…"
}

// absentKey is the bucket of every request whose rate limit key reads a field the request did
// not carry. The NUL keeps it apart from any key a request can supply, the string "absent"
// included (HTTP header values cannot hold a NUL; hashed long keys are 33 bytes).
const absentKey = "\x00absent"

// bucketKey returns the bucket key of a rate_limit rule for in, or a non-empty error message
// when the key expression failed to evaluate.
func (s *Set) bucketKey(d *Decision, r *rule, in *Input, act activation) (key, errMsg string) {
	if r.rl.key == nil {
		return "", ""
	}
	if p := r.rl.keyPath; p != nil {
		if key, absent, ok := p.resolveString(in); ok {
			return key, ""
		} else if absent >= 0 {
			appendUnique(&d.Absent, p.names[absent])
			return absentKey, ""
		}
		// Anything unusual (a non-string value, a non-map on the way) goes through CEL, which
		// defines the conversion and the error.
	}
	out, _, err := r.rl.key.Eval(act)
	if err != nil {
		if msg, failed := s.noteError(d, r, in, err); failed {
			return "", "rate_limit key: " + msg
		}
		return absentKey, ""
	}
	if str, ok := out.(types.String); ok {
		return string(str), ""
	}
	conv := out.ConvertToType(types.StringType)
	if str, ok := conv.(types.String); ok {
		return string(str), ""
	}
	return "", "rate_limit key of type " + out.Type().TypeName() + " cannot be converted to string"
}

const noSuchKey = "no such key: "

// noteError files an evaluation error under Absent when it is a request field the request did
// not carry, and otherwise returns its message with failed set: the rule failed to evaluate.
func (s *Set) noteError(d *Decision, r *rule, in *Input, err error) (msg string, failed bool) {
	msg = err.Error()
	if key, ok := strings.CutPrefix(msg, noSuchKey); ok {
		if addAbsent(d, r.paths, in, key) {
			return "", false
		}
	}
	return msg, true
}

// Reads reports whether some rule of the set reads mcp.<field> (mcp.arguments, mcp.result, …), so
// that a caller can skip building a costly value no rule looks at. A rule that reads the whole
// mcp variable (mcp[...] with a computed key, or mcp itself) counts as reading every field.
// Needs answers the same for the costly fields at once.
func (s *Set) Reads(field string) bool {
	if s == nil {
		return false
	}
	for _, r := range s.rules {
		for _, u := range r.uses {
			if u.reads(varMCP, field) {
				return true
			}
		}
	}
	return false
}

// ArgumentPaths returns the chains of keys under mcp.arguments that some rule reads
// (mcp.arguments.a.b gives ["a", "b"]; array indexes are left out). Level 2 refuses an argument
// key that folds equal to one of these at its position but is spelled otherwise: a server that
// matches keys case-insensitively (Go's encoding/json into a struct) would act on "PATH" as
// on "path", while the rule, reading Level 2's exact map, never sees it. Keys read with a
// computed name (mcp.arguments[k]) cannot be listed. The caller must not modify the result.
func (s *Set) ArgumentPaths() [][]string {
	if s == nil {
		return nil
	}
	return s.argPaths
}

// Redactions returns the redact blocks of every redact rule, matched or not, in rule order. A
// string that came from a message and goes into a log without having been judged (the strict
// decoder's error quoting a key, a refused body's reason) passes the patterns of all of them:
// whether a rule's `when` would have matched that message is not known there. The caller must
// not modify the result.
func (s *Set) Redactions() []*Redaction {
	if s == nil {
		return nil
	}
	var out []*Redaction
	for _, r := range s.rules {
		if r.redact != nil {
			out = append(out, r.redact)
		}
	}
	return out
}

// JudgesServerMessages reports whether some rule is written for messages from the server (see
// Input.ServerMessage); when none is, evaluating such a message cannot decide anything. It is
// Needs().ServerMessages.
func (s *Set) JudgesServerMessages() bool {
	return s.Needs().ServerMessages
}
