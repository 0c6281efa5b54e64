// Package tracestage makes the spans of the flows Level 2 does not (Level 2 makes one per
// JSON-RPC request, level2/trace.go): one per HTTP request at Level 1 (the trace stage), and one
// "connection" span for a flow that carried no HTTP the appliance read (ConnSpan).
package tracestage

import (
	"context"
	"time"

	"mcpintercept/exchange"
	"mcpintercept/mcp"
	"mcpintercept/policy"
	"mcpintercept/stage"
	"mcpintercept/tracing"
)

// Spans (the tracer of Factory and ConnSpan, chain.Deps.Tracer; nil is tracing off and none of
// this runs):
//
//   - Level 2 makes one span per JSON-RPC request (level2/trace.go), with Base as the flow's
//     part of its attributes.
//   - Level 1 (traceStage): one span per HTTP request that gets a Level 1 record — every request
//     of a Level 1 route, and at Level 2 those Level 2 wrote no message record for (a GET stream,
//     a body that is not JSON-RPC). At Level 1 it starts once the stages before it let the
//     request through (before its first byte goes upstream, so that inject can set the headers),
//     or at Done for one they refused; it ends at the exchange's end with the verdict and the
//     status. Its parent is the request's traceparent/tracestate/baggage headers.
//   - Opaque and passthrough flows (and flows refused before any HTTP): one "connection" span
//     (KindInternal, no parent) from the flow's start to its exit.
//
// The records of those calls (flow log, audit) carry the span's trace_id and span_id.

// Name is the stage's name in the chain and the key of its options.
const Name = "trace"

// Options are a route's tracing settings.
type Options struct {
	// Inject is trace_propagation: inject: the request sent upstream carries the appliance's
	// span as its parent (traceparent header, and params._meta when the client put a trace
	// context there; Level 2 reads it too). Default: spans recorded, the request forwarded
	// unchanged.
	Inject bool
}

// Inject reports a route's trace_propagation: inject.
func Inject(o stage.Options) bool {
	t, _ := stage.Get[*Options](o, Name)
	return t != nil && t.Inject
}

// Base is the flow's part of every span's attributes.
func Base(c *stage.Conn) tracing.Call {
	b := tracing.Call{Route: c.Route, TLS: c.TLS, Mechanism: c.Mechanism,
		ClientAddress: c.Client.Addr().String(), ClientPort: int(c.Client.Port())}
	if id := c.Identity; id != nil {
		b.PID, b.UID, b.Comm, b.Exe = id.PID, id.UID, id.Comm, id.Exe
	}
	switch {
	case c.SNI != "":
		b.ServerAddress = c.SNI
	case c.Host != "":
		b.ServerAddress = c.Host
	case c.Orig.IsValid():
		b.ServerAddress = c.Orig.Addr().Unmap().String()
	}
	if c.Orig.IsValid() {
		b.ServerPort = int(c.Orig.Port())
	}
	return b
}

// spanOf is x's Level 1 span (nil: none), kept as stage.SetSpan names it for the records.
func spanOf(x *exchange.Exchange) *tracing.Span {
	sp, _ := stage.SpanOf(x).(*tracing.Span)
	return sp
}

// traceStage makes the Level 1 spans of one connection.
type traceStage struct {
	exchange.Base
	t      *tracing.Tracer
	base   tracing.Call
	level  int
	inject bool // the route's trace_propagation: inject
}

// Factory is the trace stage of a chain (nil t: tracing off, no stage). It runs after the policy,
// so that a span starts only for a request let through (a refused one gets its span at Done), and
// before the audit and record stages, whose records carry its ids.
func Factory(t *tracing.Tracer) stage.Factory {
	return stage.Factory{Name: Name, Levels: stage.FromLevel(1), New: func(c *stage.Conn) exchange.Stage {
		if t == nil {
			return nil
		}
		return &traceStage{t: t, base: Base(c), level: max(c.Level, 1), inject: Inject(c.Options)}
	}}
}

// RequestHead implements exchange.Stage: a Level 1 request the stages before let through gets
// its span now, and with inject its upstream copy names the span as its parent.
func (s *traceStage) RequestHead(_ context.Context, x *exchange.Exchange) exchange.Result {
	if s.level >= 2 {
		return exchange.Continue // Level 2's own spans, per JSON-RPC request
	}
	sp := s.start(x)
	stage.SetSpan(x, sp)
	if s.inject {
		if tp, ts, ok := sp.Inject(); ok {
			x.SetRequestHeader("traceparent", tp)
			if ts != "" {
				x.SetRequestHeader("tracestate", ts)
			} else {
				x.DelRequestHeader("tracestate")
			}
		}
	}
	return exchange.Continue
}

func (s *traceStage) start(x *exchange.Exchange) *tracing.Span {
	c := s.base
	var p tracing.Parent
	if h := x.Req; h != nil {
		p.Traceparent, _ = h.Get("traceparent")
		p.Tracestate, _ = h.Get("tracestate")
		p.Baggage, _ = h.Get("baggage")
		c.HTTPMethod, c.Path = h.Method, mcp.PathOf(h.Target)
	}
	if info := mcp.InfoOf(x); info != nil {
		c.HTTPMethod, c.Path = info.Method, info.Path
		c.Method, c.ProtocolVersion, c.SessionID = info.MCPMethod, info.ProtocolVersion, info.SessionHash
		switch info.MCPMethod {
		case mcp.MethodToolsCall:
			c.Tool = info.MCPName
		case mcp.MethodPromptsGet:
			c.Prompt = info.MCPName
		case mcp.MethodResourcesRead:
			c.ResourceURI = info.MCPName // RedactURI applied by Level 1
		}
	}
	return s.t.Start(p, tracing.KindClient, c, x.Start)
}

// Done implements exchange.Stage: the span ends with the verdict and the status. It runs before
// the audit and record stages' Done, which read the span's ids.
func (s *traceStage) Done(x *exchange.Exchange) {
	if x.Req == nil {
		return
	}
	sp := spanOf(x)
	if sp == nil {
		if s.level >= 2 && stage.Recorded(x) {
			return
		}
		sp = s.start(x)
		stage.SetSpan(x, sp)
	}
	d := x.Verdict.Decision
	if d == "" {
		d = exchange.Allow
	}
	sp.Decision(string(d), x.Verdict.Rule, x.Verdict.Reason)
	sp.Status(0, x.Status, false)
	sp.End(x.Start.Add(x.Duration))
}

// ConnSpan is the span of a flow that carried no HTTP the appliance read (opaque, passthrough,
// refused at the connection), from start to now; its ids go on the flow's record. Nil t: none.
func ConnSpan(t *tracing.Tracer) func(c *stage.Conn, start time.Time, decision, rule, reason string) (traceID, spanID string) {
	if t == nil {
		return nil
	}
	return func(c *stage.Conn, start time.Time, decision, rule, reason string) (string, string) {
		sp := t.Start(tracing.Parent{}, tracing.KindInternal, Base(c), start)
		if decision == "" {
			decision = string(policy.ActionAllow)
		}
		sp.Decision(decision, rule, reason)
		sp.End(time.Now())
		return sp.TraceID(), sp.SpanID()
	}
}
