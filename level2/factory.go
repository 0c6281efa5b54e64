package level2

import (
	"crypto/sha256"
	"crypto/tls"
	"encoding/hex"
	"net"

	"mcpintercept/exchange"
	"mcpintercept/integrity"
	flowstage "mcpintercept/stage"
	"mcpintercept/telemetry"
	"mcpintercept/tracing"
	"mcpintercept/tracing/tracestage"
)

// Name is Level 2's name in the chain and the key of its options.
const Name = "level2"

// RouteOptions are a route's Level 2 settings.
type RouteOptions struct {
	// MaxBody and ForwardOversized are the body bound and what happens to a response over it
	// (closed, or forwarded uninspected).
	MaxBody          int64
	ForwardOversized bool
	// ValidateArguments checks tools/call arguments against the tool's listed schema.
	ValidateArguments bool
	// ToolPins is tool_pins (integrity.ModeOff, ModeLearn, ModeEnforce; "" off) and
	// QuarantineDivergence its on_divergence: quarantine. They take effect with Deps.Tools.
	ToolPins             integrity.Mode
	QuarantineDivergence bool
}

// Deps is what Level 2 shares across the connections of one appliance.
type Deps struct {
	// Sessions is the memory of MCP sessions across connections (nil: a new one).
	Sessions *Sessions
	// Tools is the tool-integrity guard; routes with tool_pins use it (nil: none checks).
	Tools *integrity.Guard
	// Tracer makes one span per JSON-RPC request (nil: tracing off).
	Tracer *tracing.Tracer
	// Audit is a connection's audit writer (nil, or a nil result: not audited).
	Audit func(c *flowstage.Conn) Auditor
}

// Factory is Level 2 in a chain: the JSON-RPC messages of both directions, decoded, matched
// against the headers, judged, checked, transformed and filtered (chain.go lists its steps).
func Factory(d Deps) flowstage.Factory {
	if d.Sessions == nil {
		d.Sessions = NewSessions(0)
	}
	return flowstage.Factory{Name: Name, Levels: flowstage.FromLevel(2), New: func(c *flowstage.Conn) exchange.Stage {
		return FlowOf(c, d).Stage()
	}}
}

// FlowOf is what Level 2 needs of connection c: the rule set, the CEL variables, the route's
// options, the appliance's session memory, and where its per-message records go.
func FlowOf(c *flowstage.Conn, d Deps) *Flow {
	o, _ := flowstage.Get[*RouteOptions](c.Options, Name)
	if o == nil {
		o = &RouteOptions{}
	}
	f := &Flow{
		Client:   c.ClientVars,
		Conn:     c.ConnVars,
		FailOpen: c.FailOpen,
		Options:  Options{MaxBody: o.MaxBody, ForwardOversized: o.ForwardOversized},
		// Surface control: the route's schema check, and the appliance's own way to answer a
		// server whose server→client request policy blocked.
		ValidateArguments: o.ValidateArguments,
		Post:              c.Post,
		Sessions:          d.Sessions,
		Record:            recordTo(c),
		// One span per JSON-RPC request (nil Tracer: none), with the flow's attributes.
		Tracer:      d.Tracer,
		TraceInject: tracestage.Inject(c.Options),
	}
	if d.Audit != nil {
		f.Audit = d.Audit(c)
	}
	if d.Tracer != nil {
		f.Trace = tracestage.Base(c)
	}
	if d.Tools != nil {
		// A nil *RouteGuard (tool_pins off) must stay a nil interface: Level 2 checks Tools
		// against nil.
		if rg := d.Tools.Route(integrity.RouteOptions{Mode: o.ToolPins, QuarantineDivergence: o.QuarantineDivergence}); rg != nil {
			f.Tools = rg
			if c.TLS == "terminate" {
				f.UpstreamSPKI = upstreamSPKI(c.Upstream)
			}
		}
	}
	if c.Rules != nil {
		f.Rules = func() Evaluator {
			if rs := c.Rules(); rs != nil {
				return rs
			}
			return nil
		}
	}
	return f
}

// recordTo writes the record of one JSON-RPC message to c's records: the flow log's keys, with the
// message's method, name, id and direction.
func recordTo(c *flowstage.Conn) func(*Record) {
	return func(m *Record) {
		rec := c.Record
		rec.Time = telemetry.Time{Time: m.Time}
		rec.Level = 2
		rec.HTTPMethod, rec.Path, rec.Status = m.HTTPMethod, m.Path, m.Status
		rec.MCPVersion, rec.MCPMethod, rec.MCPName = m.Version, m.Method, m.Name
		rec.JSONRPCID, rec.Direction = m.ID, m.Direction
		rec.Decision = string(m.Decision)
		if rec.Decision == "" {
			rec.Decision = string(exchange.Allow)
		}
		rec.Rule, rec.Reason = m.Rule, m.Reason
		if m.Err != "" {
			if rec.Reason != "" {
				rec.Reason += "; "
			}
			rec.Reason += m.Err
		}
		rec.BytesUp, rec.BytesDown = m.BytesUp, m.BytesDown
		rec.Iss, rec.Sub = m.Caller.Iss, m.Caller.Sub
		rec.Credential, rec.CredentialSource = m.Credential.Added, m.Credential.Source
		rec.TraceID, rec.SpanID = m.TraceID, m.SpanID
		c.Records.Message(&rec, m.Duration)
	}
}

// upstreamSPKI is "sha256:<hex>" of the public key of the certificate the upstream presented
// on a terminate route's re-originated TLS session ("" when there is none: a plaintext
// upstream on a trusted network).
func upstreamSPKI(up net.Conn) string {
	tc, ok := up.(*tls.Conn)
	if !ok {
		return ""
	}
	certs := tc.ConnectionState().PeerCertificates
	if len(certs) == 0 {
		return ""
	}
	sum := sha256.Sum256(certs[0].RawSubjectPublicKeyInfo)
	return "sha256:" + hex.EncodeToString(sum[:])
}

// ToolPinsOf is a route's tool_pins ("" when its options set none).
func ToolPinsOf(o flowstage.Options) integrity.Mode {
	if ro, _ := flowstage.Get[*RouteOptions](o, Name); ro != nil {
		return ro.ToolPins
	}
	return ""
}
