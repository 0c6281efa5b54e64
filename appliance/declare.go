package appliance

import (
	"mcpintercept/config"
	"mcpintercept/intercept"
	"mcpintercept/telemetry"
)

// Check compiles cfg's rule sets and routes as New does, without opening anything: nil, or a
// *ConfigError (policy.CompileErrors inside, with file, line and column).
func Check(cfg *config.Config) error {
	if _, _, err := RoutingFromConfig(cfg, nil); err != nil {
		return &ConfigError{Err: err}
	}
	return nil
}

// Declaration is the conformance declaration for cfg (`declare`, the admin /declaration): the
// mechanism in effect and how the original destination reaches the engine, the levels and TLS
// dispositions the routes put in effect. A nil cfg, or one not loaded from a file, declares the
// build: every mechanism and everything implemented.
func Declaration(cfg *config.Config) telemetry.Declaration {
	if cfg == nil || cfg.Path == "" {
		var ms []telemetry.Interception
		for _, d := range intercept.Declare() {
			ms = append(ms, telemetry.Interception{Mechanism: string(d.Mechanism), OriginalDestination: d.Recovery})
		}
		return telemetry.Declare(ms, telemetry.BuildCapabilities)
	}
	ms := []telemetry.Interception{{Mechanism: string(cfg.Mechanism), OriginalDestination: intercept.Recovery(SteeringOptions(cfg)), InEffect: true}}
	return telemetry.Declare(ms, capabilitiesOf(cfg))
}

// capabilitiesOf is what a configuration puts in effect: the levels and dispositions of its
// routes, and the routes themselves for their per-route statements. The flows no route matches
// count too: forwarded untouched without a default_route (passthrough in the draft's terms), or
// treated by the default route when it has settings, which is then one more route
// (`default_route: close` adds nothing: those flows are closed).
func capabilitiesOf(cfg *config.Config) telemetry.Capabilities {
	routes := cfg.Routes
	opaque := cfg.DefaultRoute.Opaque()
	if d := cfg.DefaultRoute; !opaque && d.Route != nil {
		routes = append(routes[:len(routes):len(routes)], *d.Route)
	}
	c := telemetry.Capabilities{Routes: []telemetry.RouteCapability{}}
	seenL, seenD := map[int]bool{}, map[string]bool{}
	for _, r := range routes {
		if l := r.LevelOrDefault(); !seenL[l] {
			seenL[l] = true
			c.Levels = append(c.Levels, l)
		}
		if !seenD[r.TLS] {
			seenD[r.TLS] = true
			c.Dispositions = append(c.Dispositions, r.TLS)
		}
		c.Routes = append(c.Routes, telemetry.RouteCapability{Name: r.Name, Level: r.LevelOrDefault(),
			StrictMCPHeaders: r.StrictMCPHeaders, AllowUpgrade: r.AllowUpgrade})
	}
	if opaque && !seenD[config.TLSPassthrough] {
		c.Dispositions = append(c.Dispositions, config.TLSPassthrough)
	}
	return c
}
