package engine

import (
	"context"
	"errors"
	"io"
	"net"
	"os"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"mcpintercept/exchange"
	"mcpintercept/level1"
	"mcpintercept/level2"
	"mcpintercept/mcp"
	"mcpintercept/policy"
	"mcpintercept/telemetry"
)

// level1 serves the flow with HTTP awareness: the route's stages run over every exchange
// (stagesFor), and the record stage writes one record per request (per JSON-RPC message at
// Level 2). client and upstream are flowconn wrappers that keep last, the flow's activity time.
// The outcome it returns is marked recorded, unless no exchange completed: that connection's
// line is then the exit's.
func (e *Engine) level1(ctx context.Context, f *flow, route *Route, tlsMode Disposition, client, upstream net.Conn, last *atomic.Int64) outcome {
	opt := e.opt.HTTP
	if opt.IdleTimeout == 0 {
		opt.IdleTimeout = e.opt.Limits.IdleTimeout
	}
	if e.opt.Limits.BodyTimeout != 0 {
		opt.BodyTimeout = e.opt.Limits.BodyTimeout
	}
	opt.HeaderTimeout = headerTimeoutUnder(opt.HeaderTimeout, e.opt.Limits.IdleTimeout)
	// Per route: which protocol switches are allowed, and strict MCP headers (the classifier
	// refuses before any policy runs).
	opt.AllowUpgrade = route.AllowUpgrade
	opt.StrictMCPHeaders = route.StrictMCPHeaders
	if f.origin.Host != "" {
		// DNS steering: the client reached this flow by a name; a request must not name another
		// host (421), in plaintext as in TLS.
		opt.ExpectedHost = f.origin.Host
	} else if tlsMode == Terminate {
		// The route was chosen by the SNI (or, without one, by the destination): a request must
		// not name another host inside that TLS session (421 otherwise).
		opt.ExpectedHost = f.sniName
		if opt.ExpectedHost == "" {
			opt.ExpectedHost = f.orig.Addr().Unmap().String()
		}
	}
	rec := e.newRecordStage(f, route, tlsMode)
	stages := e.stagesFor(route, f, tlsMode, opt.Guards(), rec)
	// The exchange loop's own idle timeout only runs between requests; this one also ends a flow
	// whose upstream never answers, or an upgraded stream that went quiet.
	_, stop := watchIdle(e.opt.Limits.IdleTimeout, last, client, upstream)
	defer stop()
	xo := opt.Exchange()
	// Level 2 judges every message: bytes the upstream sends while no request is outstanding
	// answer nothing it could judge, so they close the flow rather than reach the client raw.
	xo.CloseUnsolicited = route.Level >= 2
	err := exchange.Serve(ctx, client, upstream, stages, xo, e.opt.Log.With("flow", f.id))
	if rec.requests.Load() > 0 {
		return outcome{recorded: true}
	}
	// A connection that carried no complete request still gets its line.
	reason := "no request"
	if err != nil && !errors.Is(err, io.EOF) && !errors.Is(err, net.ErrClosed) && !errors.Is(err, os.ErrDeadlineExceeded) {
		reason = err.Error()
	}
	return forwarded(tlsMode, rec.level, route.Name, reason)
}

// headerTimeoutUnder keeps Level 1's header timeout (h; 0 is exchange's default of 10 s, negative
// none) below the flow's idle timeout. The idle watch closes a flow that moved no byte for idle;
// a head that stops halfway must get its 408 before that, not a silent close.
func headerTimeoutUnder(h, idle time.Duration) time.Duration {
	const exchangeDefault = 10 * time.Second
	eff := h
	if eff == 0 {
		eff = exchangeDefault
	}
	if idle <= 0 || eff < 0 || eff < idle {
		return h
	}
	return idle - idle/10
}

// stagesFor is the stage list of one connection of flow f on route, in the order they run:
// Level 1's classification (with its guards) and header policy, then the body stages of a Level
// 2 route, then rec, last so that its Done sees what every stage decided. Stages keep
// per-connection state: each connection gets a list of its own.
func (e *Engine) stagesFor(route *Route, f *flow, tlsMode Disposition, g level1.Guards, rec *recordStage) []exchange.Stage {
	if route.Level >= 2 {
		// Level 2: the body is the truth. Classification and its guards still run on the head
		// (protocol switches, Host, unreadable MCP headers), but the header policy does not:
		// rules judge the JSON-RPC messages, and each message gets its own record.
		rec.level = 2
		return []exchange.Stage{level1.NewClassifier(g), e.level2Flow(f, route, tlsMode, rec).Stage(), rec}
	}
	stages := level1.Stages(g, e.level1Flow(f, tlsMode))
	return append(stages, rec)
}

// level2Flow is what Level 2 needs of the flow: the rule set, the CEL variables, the route's
// body bound, the appliance's session memory, and where its per-message records go.
func (e *Engine) level2Flow(f *flow, route *Route, tlsMode Disposition, rec *recordStage) *level2.Flow {
	l2 := &level2.Flow{
		Client:   f.clientVars(),
		Conn:     f.connVars(tlsMode),
		FailOpen: f.rules.failOpen,
		Options:  level2.Options{MaxBody: route.MaxBody, ForwardOversized: route.ForwardOversized},
		// Surface control: the route's schema check, and the appliance's own way to answer a
		// server whose server→client request policy blocked.
		ValidateArguments: route.ValidateArguments,
		Post:              e.level2Post(f, route, tlsMode),
		Sessions:          e.sessions,
		Record:            rec.message,
	}
	if f.rules.name != "" {
		l2.Rules = func() level2.Evaluator {
			if rs := f.rules.current(e); rs != nil {
				return rs
			}
			return nil
		}
	}
	return l2
}

// message writes the record of one JSON-RPC message (Level 2): the flow log's keys, with the
// message's method, name, id and direction, and the metrics by method and tool.
func (r *recordStage) message(m *level2.Record) {
	rec := r.f.record()
	rec.Time = telemetry.Time{Time: m.Time}
	rec.TLS, rec.Level = string(r.tls), 2
	rec.HTTPMethod, rec.Path, rec.Status = m.HTTPMethod, m.Path, m.Status
	rec.MCPVersion, rec.MCPMethod, rec.MCPName = m.Version, m.Method, m.Name
	rec.JSONRPCID, rec.Direction = m.ID, m.Direction
	rec.Decision = string(m.Decision)
	if rec.Decision == "" {
		rec.Decision = string(policy.ActionAllow)
	}
	rec.Rule, rec.Reason = m.Rule, m.Reason
	if m.Err != "" {
		appendReason(&rec, m.Err)
	}
	rec.DurationMS = m.Duration.Milliseconds()
	rec.BytesUp, rec.BytesDown = m.BytesUp, m.BytesDown
	r.reqs.Inc(rec.MCPMethod, rec.MCPName, rec.Decision)
	if m.Direction == level2.ClientToServer {
		r.e.opt.Metrics.RequestDuration.Observe(rec.MCPMethod, rec.Status, m.Duration.Seconds())
	}
	if r.e.opt.Flows != nil {
		r.e.opt.Flows.Write(rec)
	}
}

// level1Flow is what Level 1's header policy needs of the flow: its rule set, as current at each
// request (flowRules), and the CEL variables client and conn.
func (e *Engine) level1Flow(f *flow, tlsMode Disposition) *level1.Flow {
	if f.rules.name == "" {
		return nil
	}
	return &level1.Flow{
		Rules: func() level1.RuleSet {
			if rs := f.rules.current(e); rs != nil {
				return rs
			}
			return nil
		},
		Client:     f.clientVars(),
		Conn:       f.connVars(tlsMode),
		FailOpen:   f.rules.failOpen,
		RuleErrors: func(d *policy.Decision) { e.noteRuleErrors(f, d) },
	}
}

// recordStage writes one flow record per exchange, with its metrics; the metric children it
// can are resolved once per connection.
type recordStage struct {
	exchange.Base
	e        *Engine
	f        *flow
	route    *Route
	tls      Disposition
	level    int
	requests atomicInt
	reqs     *telemetry.FlowRequests // Done may run on two goroutines; FlowRequests is safe for that
	up, down prometheus.Counter
}

func (e *Engine) newRecordStage(f *flow, route *Route, tlsMode Disposition) *recordStage {
	m := e.opt.Metrics
	return &recordStage{e: e, f: f, route: route, tls: tlsMode, level: 1,
		reqs: m.Requests.ForFlow(f.orig.String(), f.client.Addr().String()),
		up:   m.Bytes.WithLabelValues("up"), down: m.Bytes.WithLabelValues("down")}
}

// Done implements exchange.Stage.
func (r *recordStage) Done(x *exchange.Exchange) {
	r.requests.Add(1)
	if r.level >= 2 && level2.Recorded(x) {
		// Level 2 wrote one record per JSON-RPC message of this exchange; only the bytes are
		// left to count.
		r.up.Add(float64(x.BytesUp))
		r.down.Add(float64(x.BytesDown))
		return
	}
	rec := r.f.record()
	rec.Time = telemetry.Time{Time: x.Start}
	rec.TLS, rec.Level = string(r.tls), r.level
	if info := mcp.InfoOf(x); info != nil {
		rec.HTTPMethod, rec.Path = info.Method, info.Path
		rec.MCPVersion, rec.MCPMethod, rec.MCPName = info.ProtocolVersion, info.MCPMethod, info.MCPName
	}
	rec.Status = x.Status
	decision := x.Verdict.Decision
	if decision == "" {
		decision = exchange.Allow
	}
	rec.Decision = string(decision)
	rec.Rule, rec.Reason = x.Verdict.Rule, x.Verdict.Reason
	if rec.Rule == "" && decision != exchange.Allow {
		// Level 1's own guards (upgrade, strict headers, Host) refuse in the route's name.
		rec.Rule = r.route.Name
	}
	if x.Upgraded != "" {
		// After the switch the bytes are opaque: the record says what they became.
		appendReason(&rec, "protocol switched to "+x.Upgraded+" (allow_upgrade); later bytes not inspected")
	}
	if x.Uninspected != "" {
		appendReason(&rec, x.Uninspected)
	}
	if x.Err != "" {
		appendReason(&rec, x.Err)
	}
	rec.BytesUp, rec.BytesDown = x.BytesUp, x.BytesDown
	rec.DurationMS = x.Duration.Milliseconds()
	r.up.Add(float64(x.BytesUp))
	r.down.Add(float64(x.BytesDown))
	// The series are bounded jointly by telemetry (the per-flow handle resolves the destination
	// and client once); no per-label first-come cap here, or a flood of made-up destinations
	// would fold configured ones into "other" before the reserve could keep them.
	r.reqs.Inc(rec.MCPMethod, rec.MCPName, rec.Decision)
	r.e.opt.Metrics.RequestDuration.Observe(rec.MCPMethod, rec.Status, x.Duration.Seconds())
	if r.e.opt.Flows != nil {
		r.e.opt.Flows.Write(rec)
	}
}

func appendReason(rec *telemetry.FlowRecord, s string) {
	if rec.Reason != "" {
		rec.Reason += "; "
	}
	rec.Reason += s
}
