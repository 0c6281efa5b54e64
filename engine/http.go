package engine

import (
	"context"
	"errors"
	"io"
	"net"
	"os"
	"sync/atomic"
	"time"

	"mcpintercept/exchange"
	"mcpintercept/policy"
	"mcpintercept/stage"
)

// serveHTTP serves the flow with HTTP awareness: the route's stages run over every exchange
// (stagesFor), and the record stage writes one record per request (per JSON-RPC message at
// Level 2). client and upstream are flowconn wrappers that keep last, the flow's activity time.
// The outcome it returns is marked recorded, unless no exchange completed: that connection's
// line is then the exit's.
func (e *Engine) serveHTTP(ctx context.Context, f *flow, route *Route, tlsMode Disposition, client, upstream net.Conn, last *atomic.Int64) outcome {
	xo := e.opt.HTTP
	if xo.IdleTimeout == 0 {
		xo.IdleTimeout = e.opt.Limits.IdleTimeout
	}
	if e.opt.Limits.BodyTimeout != 0 {
		xo.BodyTimeout = e.opt.Limits.BodyTimeout
	}
	xo.HeaderTimeout = headerTimeoutUnder(xo.HeaderTimeout, e.opt.Limits.IdleTimeout)
	if len(e.opt.Stages) == 0 {
		// An engine built without its chain would forward this route's requests with no guard,
		// policy, token check or Level 2: refuse instead.
		e.refuseLog.warn("no_chain", "closing flow: no stage chain configured", "flow", f.id, "route", route.Name)
		return refusal(tlsMode, route.Name, "no stage chain configured (engine.Options.Stages)", "no_chain")
	}
	rec := e.newRecordStage(f, route, tlsMode)
	// The exchange loop's own idle timeout only runs between requests; this one also ends a flow
	// whose upstream never answers, or an upgraded stream that went quiet.
	idled, stop := watchIdle(e.opt.Limits.IdleTimeout, last, client, upstream)
	defer stop()
	c := e.stageConn(ctx, f, route, tlsMode, rec, idled)
	stages := e.stagesFor(c, rec)
	// Level 2 judges every message: bytes the upstream sends while no request is outstanding
	// answer nothing it could judge, so they close the flow rather than reach the client raw.
	xo.CloseUnsolicited = route.Level >= 2
	err := exchange.Serve(ctx, client, upstream, stages, xo, e.opt.Log.With("flow", f.id))
	stage.EndFlow(stages, time.Now())
	// Every authorization gets its outcome before the flow ends, and so before a drain lets the
	// audit store close.
	c.End(flowEndReason(ctx))
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

// stageConn is the connection as its chain's stages see it.
func (e *Engine) stageConn(ctx context.Context, f *flow, route *Route, tlsMode Disposition, rec *recordStage, idled func() bool) *stage.Conn {
	level := max(route.Level, 1)
	c := &stage.Conn{
		ID: f.id, Num: f.num, Route: route.Name, Level: level, TLS: string(tlsMode), Options: route.Stages,
		Client: f.client, Orig: f.orig, Host: f.origin.Host, SNI: f.sniName, Mechanism: f.origin.Mechanism,
		Identity: f.origin.Identity, FailOpen: f.rules.failOpen,
		RuleErrors: func(d *policy.Decision) { e.noteRuleErrors(f, d) },
		Upstream:   f.up, Records: rec.w,
		Ctx: ctx, Idled: idled, Warn: e.refuseLog.warn,
	}
	if level >= 2 || f.rules.name != "" {
		// The CEL variables, for the stages that evaluate rules (Level 2 also names the client
		// by its address).
		c.ClientVars, c.ConnVars = f.clientVars(), f.connVars(tlsMode)
	}
	if level >= 2 {
		// Level 2 writes its own records, and answers a blocked server request itself.
		c.Record = rec.base
		c.Record.TLS = string(tlsMode)
		c.Post = e.level2Post(f, route, tlsMode)
	}
	if f.rules.name != "" {
		// The flow's rule set as current at each evaluation (shadowSet resolves it, never to
		// none while the route names a set: flowRules), counting the shadow rules' would-be
		// decisions.
		ss := &shadowSet{e: e, f: f}
		c.Rules = func() stage.RuleSet { return ss }
	}
	return c
}

// stagesFor builds the chain of one connection from Options.Stages, for its route's level, and
// the record writer last, so that its Done sees what every stage decided. A factory that returns
// nil has nothing to do on this connection.
func (e *Engine) stagesFor(c *stage.Conn, rec *recordStage) []exchange.Stage {
	if c.Level >= 2 {
		rec.level = 2
	}
	out := make([]exchange.Stage, 0, len(e.opt.Stages)+1)
	for _, sf := range e.opt.Stages {
		if !sf.Levels(c.Level) {
			continue
		}
		if s := sf.New(c); s != nil {
			out = append(out, s)
		}
	}
	return append(out, rec)
}

// headerTimeoutUnder keeps Level 1's header timeout (h; 0 is exchange's default of 10 s, negative
// none) below the flow's idle timeout. The idle watch closes a flow that moved no byte for idle;
// a head that stops halfway must get its 408 before that, not a silent close.
func headerTimeoutUnder(h, idle time.Duration) time.Duration {
	eff := h
	if eff == 0 {
		eff = exchange.DefaultHeaderTimeout
	}
	if idle <= 0 || eff < 0 || eff < idle {
		return h
	}
	return idle - idle/10
}

// flowEndReason is the uncertain outcome's reason for a call still open when its flow ended.
func flowEndReason(ctx context.Context) string {
	if ctx.Err() != nil {
		return "shutdown"
	}
	return "closed"
}
