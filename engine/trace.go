package engine

import (
	"context"
	"time"

	"mcpintercept/exchange"
	"mcpintercept/level2"
	"mcpintercept/mcp"
	"mcpintercept/policy"
	"mcpintercept/tracing"
)

// Spans (Options.Tracer set; nil is tracing off and none of this runs):
//
//   - Level 2 makes one span per JSON-RPC request (level2/trace.go), with traceBase as the
//     flow's part of its attributes.
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

// traceBase is the flow's part of every span's attributes.
func (f *flow) traceBase(tlsMode Disposition) tracing.Call {
	c := tracing.Call{Route: f.route, TLS: string(tlsMode), Mechanism: f.origin.Mechanism,
		ClientAddress: f.client.Addr().String(), ClientPort: int(f.client.Port())}
	if id := f.origin.Identity; id != nil {
		c.PID, c.UID, c.Comm, c.Exe = id.PID, id.UID, id.Comm, id.Exe
	}
	switch {
	case f.sniName != "":
		c.ServerAddress = f.sniName
	case f.origin.Host != "":
		c.ServerAddress = f.origin.Host
	case f.orig.IsValid():
		c.ServerAddress = f.orig.Addr().Unmap().String()
	}
	if f.orig.IsValid() {
		c.ServerPort = int(f.orig.Port())
	}
	return c
}

// spanKey keeps an exchange's Level 1 span.
type spanKey struct{}

// spanOf is x's Level 1 span (nil: none).
func spanOf(x *exchange.Exchange) *tracing.Span {
	sp, _ := x.Get(spanKey{}).(*tracing.Span)
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

func (e *Engine) traceStage(c *chainOf) exchange.Stage {
	if e.opt.Tracer == nil {
		return nil
	}
	return &traceStage{t: e.opt.Tracer, base: c.f.traceBase(c.tls), level: max(c.route.Level, 1), inject: c.route.TraceInject}
}

// RequestHead implements exchange.Stage: a Level 1 request the stages before let through gets
// its span now, and with inject its upstream copy names the span as its parent.
func (s *traceStage) RequestHead(_ context.Context, x *exchange.Exchange) exchange.Result {
	if s.level >= 2 {
		return exchange.Continue // Level 2's own spans, per JSON-RPC request
	}
	sp := s.start(x)
	x.Set(spanKey{}, sp)
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
		case "tools/call":
			c.Tool = info.MCPName
		case "prompts/get":
			c.Prompt = info.MCPName
		case "resources/read":
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
		if s.level >= 2 && level2.Recorded(x) {
			return
		}
		sp = s.start(x)
		x.Set(spanKey{}, sp)
	}
	d := x.Verdict.Decision
	if d == "" {
		d = exchange.Allow
	}
	sp.Decision(string(d), x.Verdict.Rule, x.Verdict.Reason)
	sp.Status(0, x.Status, false)
	sp.End(x.Start.Add(x.Duration))
}

// connectionSpan is the span of a flow that carried no HTTP the appliance read (opaque,
// passthrough, refused at the connection), from its start to now; its ids go on the record.
func (e *Engine) connectionSpan(f *flow, out outcome) (traceID, spanID string) {
	if e.opt.Tracer == nil {
		return "", ""
	}
	sp := e.opt.Tracer.Start(tracing.Parent{}, tracing.KindInternal, f.traceBase(out.tls), f.start)
	d := out.decision
	if d == "" {
		d = policy.ActionAllow
	}
	sp.Decision(string(d), out.rule, out.reason)
	sp.End(time.Now())
	return sp.TraceID(), sp.SpanID()
}

// endFlowSpans ends what the connection's stages keep open past their exchanges (Level 2's
// server→client requests the client never answered).
func endFlowSpans(stages []exchange.Stage) {
	now := time.Now()
	for _, s := range stages {
		if ef, ok := s.(interface{ EndFlow(time.Time) }); ok {
			ef.EndFlow(now)
		}
	}
}
