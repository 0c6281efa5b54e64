package appliance

import (
	"errors"
	"mcpintercept/auth"

	"mcpintercept/audit/auditstage"
	"mcpintercept/auth/tokenstage"
	"mcpintercept/config"
	"mcpintercept/credentials"
	"mcpintercept/engine"
	"mcpintercept/integrity"
	"mcpintercept/level1"
	"mcpintercept/level2"
	"mcpintercept/policy"
	"mcpintercept/stage"
	"mcpintercept/tracing/tracestage"
)

// CompiledRuleSets keeps the compiled rule sets of the previous load, so that a reload carries
// the token buckets of unchanged rate-limit rules over (a reload must not reset a client's
// budget).
type CompiledRuleSets map[string]*policy.Set

// RoutingFromConfig compiles the configuration's rule sets and converts its routes. Every compile
// error of every set is returned (policy.CompileErrors, with file, line and column).
func RoutingFromConfig(cfg *config.Config, prev CompiledRuleSets) (*engine.Routing, CompiledRuleSets, error) {
	return routingFromConfig(cfg, prev, nil)
}

// routingFromConfig is RoutingFromConfig whose token checks log why an issuer's keys could not
// be read to jwksLog (nil: not logged).
func routingFromConfig(cfg *config.Config, prev CompiledRuleSets, jwksLog *auth.JWKSLog) (*engine.Routing, CompiledRuleSets, error) {
	sets, err := compileRuleSets(cfg, prev)
	if err != nil {
		return nil, nil, err
	}
	rt := &engine.Routing{RuleSets: map[string]engine.RuleSet{}}
	for n, s := range sets {
		rt.RuleSets[n] = s
	}
	for i := range cfg.Routes {
		r, err := routeWithTokens(cfg, cfg.Routes[i], jwksLog)
		if err != nil {
			return nil, nil, err
		}
		rt.Routes = append(rt.Routes, r)
	}
	switch d := cfg.DefaultRoute; {
	case d == nil:
	case d.Close:
		rt.DefaultClose = true
	case d.Route != nil:
		if rt.Default, err = routeWithTokens(cfg, *d.Route, jwksLog); err != nil {
			return nil, nil, err
		}
		rt.Default.Name = engine.DefaultRouteName
		// It matches every flow that reaches it: no conditions.
		rt.Default.Destinations, rt.Default.Ports, rt.Default.SNI, rt.Default.Clients = nil, nil, nil, nil
	}
	if err := checkLevels(rt, sets); err != nil {
		return nil, nil, err
	}
	return rt, sets, nil
}

// checkLevels refuses a rule that reads what its route's awareness level cannot see
// (mcp.arguments on a Level 1 route, http.path on an opaque one): it would silently never match.
// The errors point at the rule's expression (file:line:col).
func checkLevels(rt *engine.Routing, sets CompiledRuleSets) error {
	var errs policy.CompileErrors
	seen := map[string]map[int]bool{}
	check := func(r *engine.Route) {
		s := sets[r.RuleSet]
		if s == nil || seen[r.RuleSet][r.Level] {
			return
		}
		if seen[r.RuleSet] == nil {
			seen[r.RuleSet] = map[int]bool{}
		}
		seen[r.RuleSet][r.Level] = true
		var ce policy.CompileErrors
		if err := s.CheckLevel(policy.Level(r.Level)); errors.As(err, &ce) {
			errs = append(errs, ce...)
		}
	}
	for _, r := range rt.Routes {
		check(r)
	}
	if rt.Default != nil {
		check(rt.Default)
	}
	if len(errs) > 0 {
		return errs
	}
	return nil
}

// compileRuleSets compiles every rule set in file order, collecting the compile errors of all of
// them.
func compileRuleSets(cfg *config.Config, prev CompiledRuleSets) (CompiledRuleSets, error) {
	sets := CompiledRuleSets{}
	var errs policy.CompileErrors
	names := cfg.RuleSetOrder
	if len(names) == 0 {
		for n := range cfg.RuleSets {
			names = append(names, n)
		}
	}
	for _, name := range names {
		var specs []policy.RuleSpec
		for _, r := range cfg.RuleSets[name] {
			specs = append(specs, ruleSpec(r))
		}
		set, err := policy.CompileWithState(specs, prev[name])
		if err != nil {
			var ce policy.CompileErrors
			if errors.As(err, &ce) {
				errs = append(errs, ce...)
				continue
			}
			return nil, err
		}
		sets[name] = set
	}
	if len(errs) > 0 {
		return nil, errs
	}
	return sets, nil
}

func ruleSpec(r config.Rule) policy.RuleSpec {
	s := policy.RuleSpec{
		Name: r.Name, When: r.When, Action: r.Action, Reason: r.Reason, Mode: r.Mode,
		Pos:    policy.Pos{File: r.WhenPos.File, Line: r.WhenPos.Line, Column: r.WhenPos.Column},
		KeyPos: policy.Pos{File: r.KeyPos.File, Line: r.KeyPos.Line, Column: r.KeyPos.Column},
	}
	if r.RateLimit != nil {
		s.RateLimit = &policy.RateLimit{Key: r.RateLimit.Key, Rate: r.RateLimit.Rate, Burst: r.RateLimit.Burst,
			MaxKeys: r.RateLimit.MaxKeys}
	}
	if r.Redact != nil {
		s.Redact = &policy.Redact{Paths: r.Redact.Paths, Patterns: r.Redact.Patterns, Marker: r.Redact.Marker}
	}
	return s
}

// routeWithTokens is routeFromConfig with the route's token check built.
func routeWithTokens(cfg *config.Config, r config.Route, jwksLog *auth.JWKSLog) (*engine.Route, error) {
	route := routeFromConfig(cfg, r)
	tc, err := tokenChecker(cfg, r.WithDefaults(), jwksLog)
	if err != nil {
		return nil, err
	}
	if tc != nil {
		route.Stages[tokenstage.Name] = &tokenstage.Options{Checker: tc, CallerIdentity: cfg.Tokens.RecordIdentity}
	}
	co, err := credentialOptions(cfg, r)
	if err != nil {
		return nil, err
	}
	if co != nil {
		route.Stages[credentials.Name] = co
	}
	return route, nil
}

// routeFromConfig maps a route; a route built in code gets the defaults Parse would have filled.
// An audited route's records go nowhere until the appliance gives it its store (attachAudit):
// until then it refuses, or under fail open forwards unrecorded.
func routeFromConfig(cfg *config.Config, r config.Route) *engine.Route {
	r = r.WithDefaults()
	route := &engine.Route{
		Name:                            r.Name,
		Destinations:                    r.Match.Destinations,
		SNI:                             r.Match.SNI,
		Clients:                         r.Match.Clients,
		TLS:                             engine.Disposition(r.TLS),
		Level:                           *r.Level,
		OnMismatch:                      r.OnMismatch,
		Development:                     r.Development,
		PlaintextUpstreamTrustedNetwork: r.PlaintextUpstreamTrustedNetwork,
		RuleSet:                         r.RuleSet,
		OnRuleError:                     r.OnRuleError,
		// Each stage's options, as its package types them (chain lists the stages).
		Stages: stage.Options{
			level1.ClassifyName: &level1.RouteOptions{StrictMCPHeaders: r.StrictMCPHeaders, AllowUpgrade: r.AllowUpgrade, HTTPMethods: r.HTTPMethods},
			level2.Name: &level2.RouteOptions{
				MaxBody:              r.MaxBody,
				ForwardOversized:     r.OnOversizedResponse == config.OnOversizedForward,
				ValidateArguments:    r.ValidateArguments,
				ToolPins:             toolMode(r.ToolPins),
				QuarantineDivergence: r.ToolPinsOn() && r.OnDivergence == config.OnDivergenceQuarantine,
			},
			tracestage.Name: &tracestage.Options{Inject: r.TraceInjectOn()},
		},
	}
	if r.Audit {
		route.Stages[auditstage.Name] = &auditstage.Options{FailOpen: cfg.Audit.Fail == config.AuditFailOpen, Arguments: r.AuditArguments}
	}
	for _, p := range r.Match.Ports {
		route.Ports = append(route.Ports, engine.PortRange{From: p.From, To: p.To})
	}
	return route
}

// toolMode is a route's tool_pins as the guard takes it ("" and off: ModeOff).
func toolMode(s string) integrity.Mode {
	switch s {
	case config.ToolPinsLearn:
		return integrity.ModeLearn
	case config.ToolPinsEnforce:
		return integrity.ModeEnforce
	}
	return integrity.ModeOff
}
