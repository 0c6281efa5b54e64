package appliance

import (
	"fmt"
	"strings"

	"mcpintercept/config"
	"mcpintercept/intercept"
	"mcpintercept/origin"
	"mcpintercept/telemetry"
)

// Check compiles cfg's rule sets and routes as New does, without opening anything: nil, or a
// *ConfigError (policy.CompileErrors inside, with file, line and column).
func Check(cfg *config.Config) error {
	rt, _, err := RoutingFromConfig(cfg, nil)
	if err != nil {
		return &ConfigError{Err: err}
	}
	if err := checkToolPins(cfg, rt); err != nil {
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
		d := telemetry.Declare(ms, telemetry.BuildCapabilities)
		d.Authentication = authenticationOf(nil)
		d.Tracing = TracingOf(nil)
		d.ModeSet = append(d.ModeSet, "Federation", ModeSidecar)
		d.Federation = telemetry.FederationStatement
		d.Sidecar = telemetry.SidecarStatement
		return d
	}
	ms := []telemetry.Interception{{Mechanism: string(cfg.Mechanism), OriginalDestination: intercept.Recovery(SteeringOptions(cfg)), InEffect: true}}
	d := telemetry.Declare(ms, capabilitiesOf(cfg))
	d.Authentication = authenticationOf(cfg)
	d.ToolIntegrity = toolIntegrityOf(cfg)
	d.Tracing = TracingOf(cfg)
	if cfg.FederationOn() {
		d.ModeSet = append(d.ModeSet, "Federation")
		d.Federation = telemetry.FederationStatement + fmt.Sprintf("; endpoint %s%s, %d downstream(s)", cfg.Federation.Listen, "/mcp", len(cfg.Federation.Downstreams))
	}
	if cfg.InboundOn() {
		d.ModeSet = append(d.ModeSet, ModeSidecar)
		d.Sidecar = telemetry.SidecarStatement + fmt.Sprintf("; ports %v, inbound listener port %d", cfg.Inbound.Ports, cfg.Inbound.ListenPort)
		d.Interception = append(d.Interception, telemetry.Interception{Mechanism: string(origin.Inbound),
			OriginalDestination: "nftables tproxy in prerouting for the co-located server's ports delivers the unmodified packet to a transparent listener; the accepted socket's local address is the original destination (the server's)", InEffect: true})
	}
	return d
}

// TokenPattern is the draft's token propagation pattern this appliance implements: the backend
// authenticates the client itself, and the appliance only checks the token was meant for it.
const TokenPattern = "token passthrough with audience validation"

// authenticationStatement is what the appliance does with credentials, whatever the routes.
const authenticationStatement = "never initiates an authentication flow with a client and never logs, records or counts a credential; pattern: " + TokenPattern +
	" — on routes that read HTTP (terminate, plaintext; level >= 1) a bearer token's aud or resource must name the server's canonical URI (RFC 8707, as the client addressed it) or a configured audience before it is forwarded (draft, Confused Deputy: MUST), with signature, expiry and not-before checked for configured issuers; a refused token is answered 401 invalid_token and never forwarded; records name the caller by an accepted token's iss and sub (tokens.record_identity: plain, hash or off), never by the token; passthrough and level 0 routes forward tokens they cannot read"

// authenticationOf states the pattern per route: which check, and which routes forward tokens
// unread.
func authenticationOf(cfg *config.Config) string {
	if cfg == nil {
		return authenticationStatement
	}
	var on, off, unread []string
	for _, r := range declaredRoutes(cfg) {
		switch {
		case r.TokenAudienceOn():
			on = append(on, r.Name)
		case r.TLS != config.TLSPassthrough && r.LevelOrDefault() >= 1:
			off = append(off, r.Name)
		default:
			unread = append(unread, r.Name)
		}
	}
	s := authenticationStatement
	if len(on) > 0 {
		s += "; " + TokenPattern + " on routes " + strings.Join(on, ", ")
	}
	if len(off) > 0 {
		s += "; token passthrough without audience validation (token_audience: off) on routes " + strings.Join(off, ", ")
	}
	if len(unread) > 0 {
		s += "; token passthrough, unread, on routes " + strings.Join(unread, ", ")
	}
	if len(on) > 0 {
		s += "; records carry the caller's iss and sub: " + cfg.Tokens.RecordIdentity
	}
	var inject, exchange []string
	for _, r := range declaredRoutes(cfg) {
		switch r.Credentials.Action() {
		case "inject":
			inject = append(inject, r.Name)
		case "exchange":
			exchange = append(exchange, r.Name)
		}
	}
	if len(inject)+len(exchange) > 0 {
		s += "; " + CredentialsStatement
	}
	if len(inject) > 0 {
		s += "; credential injection (not token passthrough) on routes " + strings.Join(inject, ", ")
	}
	if len(exchange) > 0 {
		s += "; token exchange, RFC 8693 (not token passthrough) on routes " + strings.Join(exchange, ", ")
	}
	return s
}

// CredentialsStatement is what a route with credentials does instead of the token passthrough
// the draft recommends for Transparent mode.
const CredentialsStatement = "routes with credentials replace the client's credential on the way out, an explicit exception to token passthrough: the workload holds a placeholder or its own token, the appliance adds the real credential (injected from a file, or obtained by OAuth 2.0 Token Exchange for the client's token, audience and resource the server's canonical URI, cached until shortly before expiry) only on terminate routes whose upstream certificate it verified or plaintext routes naming the upstream by address, only to the route's destination; any other credential the client sends is refused or stripped as the route says; DPoP-bound tokens are refused; the value is never logged, recorded, traced or shown, records say credential injected or exchanged and its source"

// toolIntegrityOf states which routes pin definitions and how: "tool_pins learn on routes a;
// enforce on routes b; quarantine on divergence on routes b", and where the state is.
func toolIntegrityOf(cfg *config.Config) string {
	var learn, enforce, quarantine []string
	for _, r := range declaredRoutes(cfg) {
		switch r.ToolPins {
		case config.ToolPinsLearn:
			learn = append(learn, r.Name)
		case config.ToolPinsEnforce:
			enforce = append(enforce, r.Name)
		default:
			continue
		}
		if r.OnDivergence == config.OnDivergenceQuarantine {
			quarantine = append(quarantine, r.Name)
		}
	}
	s := telemetry.ToolIntegrityStatement + "; in effect: "
	if len(learn)+len(enforce) == 0 {
		return s + "no route pins definitions (tool_pins: off on every route)"
	}
	var parts []string
	if len(learn) > 0 {
		parts = append(parts, "tool_pins learn on routes "+strings.Join(learn, ", "))
	}
	if len(enforce) > 0 {
		parts = append(parts, "tool_pins enforce on routes "+strings.Join(enforce, ", "))
	}
	if len(quarantine) > 0 {
		parts = append(parts, "quarantine on divergence on routes "+strings.Join(quarantine, ", "))
	} else {
		parts = append(parts, "divergence logged only (on_divergence: log)")
	}
	ti := cfg.ToolIntegrity
	pins := "no pin file (pins learned on first use or approved)"
	if ti.PinFile != "" {
		pins = "pin file " + ti.PinFile
	}
	parts = append(parts, fmt.Sprintf("%s; state in %s; at most %d definitions; divergence window %s", pins, ti.Dir, ti.MaxTools, ti.DivergenceWindow.Duration))
	return s + strings.Join(parts, "; ")
}

// declaredRoutes are the routes with their defaults, default_route's settings included.
func declaredRoutes(cfg *config.Config) []config.Route {
	var out []config.Route
	for _, r := range cfg.Routes {
		out = append(out, r.WithDefaults())
	}
	if d := cfg.DefaultRoute; d != nil && !d.Close && d.Route != nil {
		out = append(out, d.Route.WithDefaults())
	}
	return out
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
