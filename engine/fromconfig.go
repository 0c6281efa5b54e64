package engine

import (
	"errors"

	"mcpintercept/config"
	"mcpintercept/policy"
)

// CompiledRuleSets keeps the compiled rule sets of the previous load, so that a reload carries
// the token buckets of unchanged rate-limit rules over (a reload must not reset a client's
// budget).
type CompiledRuleSets map[string]*policy.Set

// RoutingFromConfig compiles the configuration's rule sets and converts its routes. Every compile
// error of every set is returned (policy.CompileErrors, with file, line and column).
func RoutingFromConfig(cfg *config.Config, prev CompiledRuleSets) (*Routing, CompiledRuleSets, error) {
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
			s := policy.RuleSpec{
				Name: r.Name, When: r.When, Action: r.Action, Reason: r.Reason,
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
			specs = append(specs, s)
		}
		set, err := policy.CompileWithState(specs, prev[name])
		if err != nil {
			var ce policy.CompileErrors
			if errors.As(err, &ce) {
				errs = append(errs, ce...)
				continue
			}
			return nil, nil, err
		}
		sets[name] = set
	}
	if len(errs) > 0 {
		return nil, nil, errs
	}
	rt := &Routing{RuleSets: map[string]RuleSet{}}
	for n, s := range sets {
		rt.RuleSets[n] = s
	}
	for i := range cfg.Routes {
		rt.Routes = append(rt.Routes, routeFromConfig(&cfg.Routes[i]))
	}
	switch d := cfg.DefaultRoute; {
	case d == nil:
	case d.Close:
		rt.DefaultClose = true
	case d.Route != nil:
		rt.Default = routeFromConfig(d.Route)
		rt.Default.Name = config.DefaultRouteName
		// It matches every flow that reaches it: no conditions.
		rt.Default.Destinations, rt.Default.Ports, rt.Default.SNI, rt.Default.Clients = nil, nil, nil, nil
	}
	return rt, sets, nil
}

func routeFromConfig(r *config.Route) *Route {
	route := &Route{
		Name:                            r.Name,
		Destinations:                    r.Match.Destinations,
		SNI:                             r.Match.SNI,
		Clients:                         r.Match.Clients,
		TLS:                             Disposition(r.TLS),
		Level:                           r.LevelOrDefault(),
		OnMismatch:                      r.OnMismatch,
		Development:                     r.Development,
		PlaintextUpstreamTrustedNetwork: r.PlaintextUpstreamTrustedNetwork,
		StrictMCPHeaders:                r.StrictMCPHeaders,
		AllowUpgrade:                    r.AllowUpgrade,
		RuleSet:                         r.RuleSet,
		OnRuleError:                     r.OnRuleError,
		MaxBody:                         r.MaxBody,
		ForwardOversized:                r.OnOversizedResponse == config.OnOversizedForward,
		ValidateArguments:               r.ValidateArguments,
	}
	for _, p := range r.Match.Ports {
		route.Ports = append(route.Ports, PortRange{From: p.From, To: p.To})
	}
	if route.OnMismatch == "" {
		// Parse fills it; a configuration built in code gets the same default.
		route.OnMismatch = config.OnMismatchPassthrough
		if route.Level >= 1 {
			route.OnMismatch = config.OnMismatchClose
		}
	}
	if route.OnRuleError == "" {
		route.OnRuleError = config.OnRuleErrorClosed
	}
	return route
}
