package engine

import (
	"context"
	"crypto/sha256"
	"crypto/tls"
	"encoding/hex"
	"errors"
	"io"
	"net"
	"os"
	"sync/atomic"
	"time"

	"mcpintercept/exchange"
	"mcpintercept/integrity"
	"mcpintercept/level1"
	"mcpintercept/level2"
	"mcpintercept/policy"
)

// level1 serves the flow with HTTP awareness: the route's stages run over every exchange
// (stagesFor), and the record stage writes one record per request (per JSON-RPC message at
// Level 2). client and upstream are flowconn wrappers that keep last, the flow's activity time.
// The outcome it returns is marked recorded, unless no exchange completed: that connection's
// line is then the exit's.
func (e *Engine) level1(ctx context.Context, f *flow, route *Route, tlsMode Disposition, client, upstream net.Conn, last *atomic.Int64) outcome {
	xo := e.opt.HTTP
	if xo.IdleTimeout == 0 {
		xo.IdleTimeout = e.opt.Limits.IdleTimeout
	}
	if e.opt.Limits.BodyTimeout != 0 {
		xo.BodyTimeout = e.opt.Limits.BodyTimeout
	}
	xo.HeaderTimeout = headerTimeoutUnder(xo.HeaderTimeout, e.opt.Limits.IdleTimeout)
	// Per route: which protocol switches are allowed, and strict MCP headers (the classifier
	// refuses before any policy runs).
	g := level1.Guards{AllowUpgrade: route.AllowUpgrade, StrictMCPHeaders: route.StrictMCPHeaders}
	if f.origin.Host != "" {
		// DNS steering: the client reached this flow by a name; a request must not name another
		// host (421), in plaintext as in TLS.
		g.ExpectedHost = f.origin.Host
	} else if tlsMode == Terminate {
		// The route was chosen by the SNI (or, without one, by the destination): a request must
		// not name another host inside that TLS session (421 otherwise).
		g.ExpectedHost = f.sniName
		if g.ExpectedHost == "" {
			g.ExpectedHost = f.orig.Addr().Unmap().String()
		}
	}
	rec := e.newRecordStage(f, route, tlsMode)
	// The exchange loop's own idle timeout only runs between requests; this one also ends a flow
	// whose upstream never answers, or an upgraded stream that went quiet.
	idled, stop := watchIdle(e.opt.Limits.IdleTimeout, last, client, upstream)
	defer stop()
	fa := e.flowAudit(f, route)
	stages := e.stagesFor(&chainOf{e: e, f: f, route: route, tls: tlsMode, guards: g, rec: rec, audit: fa, ctx: ctx, idled: idled})
	// Level 2 judges every message: bytes the upstream sends while no request is outstanding
	// answer nothing it could judge, so they close the flow rather than reach the client raw.
	xo.CloseUnsolicited = route.Level >= 2
	err := exchange.Serve(ctx, client, upstream, stages, xo, e.opt.Log.With("flow", f.id))
	if e.opt.Tracer != nil {
		endFlowSpans(stages)
	}
	if fa != nil {
		// Every authorization gets its outcome before the flow ends, and so before a drain lets
		// the audit store close.
		fa.finish(flowEndReason(ctx))
	}
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
	eff := h
	if eff == 0 {
		eff = exchange.DefaultHeaderTimeout
	}
	if idle <= 0 || eff < 0 || eff < idle {
		return h
	}
	return idle - idle/10
}

// level2Flow is what Level 2 needs of the flow: the rule set, the CEL variables, the route's
// body bound, the appliance's session memory, and where its per-message records go. fa is the
// flow's audit writer (nil: the route is not audited), which Level 2's audit step writes its
// authorization and outcome records through (fa.writer()).
func (e *Engine) level2Flow(f *flow, route *Route, tlsMode Disposition, rec *recordStage, fa *flowAudit) *level2.Flow {
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
		Audit:             fa.writer(),
		// One span per JSON-RPC request (nil Tracer: none), with the flow's attributes.
		Tracer:      e.opt.Tracer,
		TraceInject: route.TraceInject,
	}
	if e.opt.Tracer != nil {
		l2.Trace = f.traceBase(tlsMode)
	}
	if e.opt.Tools != nil {
		// A nil *RouteGuard (tool_pins off) must stay a nil interface: Level 2 checks Tools
		// against nil.
		if rg := e.opt.Tools.Route(integrity.RouteOptions{Mode: route.ToolPins, QuarantineDivergence: route.QuarantineDivergence}); rg != nil {
			l2.Tools = rg
			if tlsMode == Terminate {
				l2.UpstreamSPKI = upstreamSPKI(f.up)
			}
		}
	}
	if f.rules.name != "" {
		ss := &shadowSet{e: e, f: f}
		l2.Rules = func() level2.Evaluator {
			if rs := f.rules.current(e); rs != nil {
				return ss
			}
			return nil
		}
	}
	return l2
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

// level1Flow is what Level 1's header policy needs of the flow: its rule set, as current at each
// request (flowRules), and the CEL variables client and conn.
func (e *Engine) level1Flow(f *flow, tlsMode Disposition) *level1.Flow {
	if f.rules.name == "" {
		return nil
	}
	ss := &shadowSet{e: e, f: f}
	return &level1.Flow{
		Rules: func() level1.RuleSet {
			if rs := f.rules.current(e); rs != nil {
				return ss
			}
			return nil
		},
		Client:     f.clientVars(),
		Conn:       f.connVars(tlsMode),
		FailOpen:   f.rules.failOpen,
		RuleErrors: func(d *policy.Decision) { e.noteRuleErrors(f, d) },
	}
}

// flowEndReason is the uncertain outcome's reason for a call still open when its flow ended.
func flowEndReason(ctx context.Context) string {
	if ctx.Err() != nil {
		return "shutdown"
	}
	return "closed"
}
