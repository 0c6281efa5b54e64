package engine

import (
	"context"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"mcpintercept/flowconn"
	"mcpintercept/origin"
	"mcpintercept/policy"
	"mcpintercept/stage"
	"mcpintercept/telemetry"
	"mcpintercept/tlsmitm"
)

// LeafSource mints the certificate the appliance presents for a name (pki.Minter).
type LeafSource interface {
	Leaf(name string) (*tls.Certificate, error)
}

// RuleSet is a compiled policy rule set (policy.Set).
type RuleSet = stage.RuleSet

// Routing is the part of the configuration a reload swaps: routes and the rule sets they name.
// Open flows keep the route they were given, and the rule set that route named when the flow
// started (see flowRules): each new request on them is judged by the set of that name current at
// that moment, or by the one the flow started with when a reload removed or renamed it.
type Routing struct {
	Routes   []*Route
	RuleSets map[string]RuleSet
	// Default treats the flows no route matches (config default_route with settings); nil, with
	// DefaultClose false, forwards them opaque (DefaultRoute), the transparent core's behaviour.
	Default *Route
	// DefaultClose resets the flows no route matches (config `default_route: close`).
	DefaultClose bool
}

// ReasonNoRoute is the record's reason for a flow refused by `default_route: close`.
const ReasonNoRoute = "no route matched; default_route close"

// TLSOptions configure the TLS dispositions.
type TLSOptions struct {
	Leaves           LeafSource // nil: terminate routes cannot be served (their flows are refused)
	Upstream         tlsmitm.OriginateConfig
	PeekTimeout      time.Duration
	MaxClientHello   int
	HandshakeTimeout time.Duration
}

// dispatch runs the route's disposition and level. It returns how the flow ended, when it is
// over; every branch below ends in a returned outcome, and only the flow's exit acts on it.
func (e *Engine) dispatch(ctx context.Context, f *flow) outcome {
	rt := e.routing.Load()
	// DNS interception plugs in here: a route matching by name will match f.origin.Host (the
	// name behind the VIP) as well as the SNI.
	// A route's sni match also matches the name the client resolved (DNS steering knows it before
	// any byte; the mechanism has already refused a TLS SNI that differs from it).
	route := selectRoute(rt.Routes, f.client, f.orig, func() string {
		if f.origin.Host != "" {
			return f.origin.Host
		}
		return f.sni()
	})

	f.route = route.Name
	if route == DefaultRoute {
		f.route = ""
		// No route matched: also a TLS flow without SNI, or with one no sni: route names.
		switch {
		case rt.DefaultClose:
			e.refuseLog.warn("no_route", "closing flow: no route matched", "flow", f.id, "client", f.client.String(),
				"orig_dst", f.orig.String(), "sni", f.sniName)
			return refusal(f.seenTLS(), DefaultRoute.Name, ReasonNoRoute, "no_route")
		case rt.Default != nil:
			route = rt.Default
			f.route = route.Name
		default:
			// The transparent core: no byte is read before forwarding, so protocols where
			// the server speaks first work too.
			return e.opaque(ctx, f, route, f.seenTLS())
		}
	}
	f.rules = rulesFor(rt, route)
	if f.origin.Host != "" && route.TLS != Plaintext && f.isTLS() && !sameName(f.sniName, f.origin.Host) {
		// DNS steering: the client reached this VIP by a name; a ClientHello naming another host
		// (or none) is refused here, on the hello the flow will actually use, whatever an earlier
		// look at it saw (a hello stalled past the mechanism's peek, then finished, included).
		e.refuseLog.warn("sni_mismatch", "closing flow: SNI is not the name behind the VIP", "flow", f.id,
			"client", f.client.String(), "name", f.origin.Host, "sni", f.sniName)
		return refusal(Passthrough, route.Name, "SNI "+strconv.Quote(f.sniName)+" is not "+f.origin.Host+", the name the client resolved", "sni_mismatch")
	}
	switch route.TLS {
	case Passthrough:
		if !f.isTLS() {
			return e.notTLS(ctx, f, route)
		}
		return e.judgedOpaque(ctx, f, route, Passthrough)
	case Terminate:
		if !f.isTLS() {
			return e.notTLS(ctx, f, route)
		}
		return e.terminate(ctx, f, route)
	case Plaintext:
		e.warnPlaintext(route)
		if route.Level == 0 {
			return e.judgedOpaque(ctx, f, route, Plaintext)
		}
		if f.isTLS() {
			return e.mismatch(ctx, f, route, "plaintext route saw a TLS ClientHello")
		}
		if len(f.peeked) == 0 && !f.silent() {
			// The client closed before sending anything.
			return forwarded(Plaintext, route.Level, route.Name, "closed before a request")
		}
		// A silent client still goes through Level 1, which waits for its request (header and
		// idle timeouts apply): a route declared HTTP is never bypassed by pausing.
		return e.plainHTTP(ctx, f, route)
	case Auto:
		switch {
		case f.isTLS():
			return e.terminate(ctx, f, route)
		case f.badHello():
			return e.badHello(f, route)
		case route.Level >= 1 && f.looksLikeHTTP():
			return e.plainHTTP(ctx, f, route)
		}
	}
	return e.opaque(ctx, f, route, f.seenTLS())
}

// notTLS handles a TLS route whose client did not open with a valid ClientHello: a broken hello
// closes the flow, anything else follows the route's on_mismatch.
func (e *Engine) notTLS(ctx context.Context, f *flow, route *Route) outcome {
	if f.badHello() {
		return e.badHello(f, route)
	}
	return e.mismatch(ctx, f, route, string(route.TLS)+" route saw non-TLS bytes")
}

// closesOnMismatch is the route's on_mismatch: close, or passthrough. A route built in code may
// leave it unset: then it is close for routes with Level >= 1 (forwarding the bytes opaque would
// skip the inspection the route asks for), passthrough for Level 0.
func (r *Route) closesOnMismatch() bool {
	if r.OnMismatch == "" {
		return r.Level >= 1
	}
	return r.OnMismatch == OnMismatchClose
}

// mismatch applies the route's on_mismatch choice to bytes that are not what the route declared,
// and logs it: the flow is refused, or forwarded opaque (still under the route's connection
// rules). Either way the record says what was seen.
func (e *Engine) mismatch(ctx context.Context, f *flow, route *Route, what string) outcome {
	if route.closesOnMismatch() {
		e.refuseLog.warn("mismatch:"+route.Name, "closing flow", "flow", f.id, "route", route.Name, "why", what, "orig_dst", f.orig.String())
		return refusal(f.seenTLS(), route.Name, what+"; on_mismatch close", "mismatch")
	}
	e.refuseLog.warn("mismatch:"+route.Name, "forwarding opaque", "flow", f.id, "route", route.Name, "why", what, "orig_dst", f.orig.String())
	return e.judgedOpaque(ctx, f, route, f.seenTLS())
}

// badHello refuses a client that started a TLS handshake the parser refused. A terminate or
// passthrough route records its own disposition; an auto route, which decided nothing, records
// passthrough: the opening looked like TLS and nothing was decrypted.
func (e *Engine) badHello(f *flow, route *Route) outcome {
	e.refuseLog.warn("badhello", "closing flow: bad TLS ClientHello", "flow", f.id, "client", f.client.String(), "err", f.peekErr)
	d := route.TLS
	if d != Terminate {
		d = Passthrough
	}
	return refusal(d, route.Name, f.peekErr.Error(), "bad_client_hello")
}

var plaintextWarned sync.Map

// warnPlaintext: "The intermediary SHOULD log a warning when operating on plaintext traffic
// outside a development environment" (draft, TLS Considerations) — once per route.
func (e *Engine) warnPlaintext(route *Route) {
	if route.Development {
		return
	}
	if _, loaded := plaintextWarned.LoadOrStore(e.idPrefix+route.Name, true); !loaded {
		e.opt.Log.Warn("plaintext MCP traffic on a route not marked as development", "route", route.Name)
	}
}

// judgedOpaque forwards the flow opaque once the route's connection rules allow it.
func (e *Engine) judgedOpaque(ctx context.Context, f *flow, route *Route, d Disposition) outcome {
	out, refused, shadow := e.connPolicy(f, d)
	if refused {
		return out
	}
	out = e.opaque(ctx, f, route, d)
	if shadow != "" {
		// What the shadow rules would have refused, as Level 1 and 2 records say it.
		if out.reason != "" {
			out.reason += "; "
		}
		out.reason += shadow
	}
	return out
}

// connPolicy evaluates the route's rule set with connection-level metadata only (passthrough and
// opaque routes cannot see HTTP). A deny or an exhausted rate limit refuses the flow. shadow is
// what shadow rules would have decided of an allowed flow ("" for none), for its record.
func (e *Engine) connPolicy(f *flow, d Disposition) (_ outcome, refused bool, shadow string) {
	rs := f.rules.current(e)
	if rs == nil {
		return outcome{}, false, ""
	}
	dec := rs.Evaluate(&policy.Input{Vars: policy.Vars{Client: f.clientVars(), Conn: f.connVars(d)}, FailOpen: f.rules.failOpen})
	e.noteRuleErrors(f, &dec)
	e.noteShadow(f, &dec)
	if dec.Action == policy.ActionAllow || dec.Action == "" {
		var hits []string
		for _, h := range dec.Shadow {
			hits = append(hits, h.String())
		}
		return outcome{}, false, strings.Join(hits, "; ")
	}
	e.refuseLog.warn("policy:"+dec.Rule, "flow refused by policy", "flow", f.id, "client", f.client.String(), "orig_dst", f.orig.String(), "rule", dec.Rule, "decision", dec.Action)
	out := refusal(d, dec.Rule, dec.Reason, "policy")
	out.decision = dec.Action // deny, or rate_limited
	return out, true, ""
}

// dial opens the upstream TCP connection, which the flow's exit closes. On failure the client
// gets a reset, as a direct connect would have given it.
func (e *Engine) dial(ctx context.Context, f *flow, d Disposition) (*net.TCPConn, outcome, bool) {
	dctx, cancel := context.WithTimeout(f.dialContext(ctx), e.opt.Limits.ConnectTimeout)
	uc, err := f.dialer().DialContext(dctx, "tcp", f.orig.String())
	cancel()
	if err != nil {
		var rr interface{ RefuseReason() string }
		if errors.As(err, &rr) {
			// The upstream deny list (loopback, link-local, metadata, the VIP pools): a refusal,
			// not an unreachable destination.
			return nil, refusal(d, "upstream_deny", "upstream: "+err.Error(), rr.RefuseReason()), false
		}
		return nil, upstreamFailure(d, "", "upstream: "+dialReason(err), "dial"), false
	}
	up := uc.(*net.TCPConn)
	f.up = up
	if f.origin.Host != "" {
		// The destination was a name (DNS steering): the record and the rules see the address it
		// resolved to and was dialled at, not the virtual IP.
		if ap, err := origin.AddrPortOf(up.RemoteAddr()); err == nil {
			f.orig = ap
		}
	}
	if !f.fc.setUpstream(up) { // drained while dialling
		out := forwarded(d, 0, "", "shutdown")
		out.reset = true
		return nil, out, false
	}
	return up, outcome{}, true
}

// opaque forwards bytes untouched (splice between the two *net.TCPConn, no wrapper), the peeked
// bytes first.
func (e *Engine) opaque(ctx context.Context, f *flow, route *Route, d Disposition) outcome {
	up, out, ok := e.dial(ctx, f, d)
	if !ok {
		return out
	}
	rule := route.Name
	if route == DefaultRoute {
		rule = ""
	}
	var pre int64
	peeked := f.takePeeked()
	if len(peeked) > 0 {
		n, err := up.Write(peeked)
		pre = int64(n)
		if err != nil {
			out := forwarded(d, 0, rule, "upstream: "+dialReason(err))
			out.reset = true
			return out
		}
	}
	var head *headTap
	if obs := e.opt.OpaqueHead; obs != nil && !f.isHello {
		head = &headTap{prefix: peeked, obs: obs, rec: func() telemetry.FlowRecord {
			r := f.record()
			r.TLS = string(Plaintext) // bytes the observer recognised: not TLS
			return r
		}}
	}
	res := relay(f.c, up, e.opt.Limits.IdleTimeout, f.fc, head)
	return relayed(d, rule, res.up+pre, res.down, res.reason(), res.reset)
}

// plainHTTP serves a plaintext flow at the route's level (1 or 2); the peeked bytes are replayed
// to the HTTP reader first.
func (e *Engine) plainHTTP(ctx context.Context, f *flow, route *Route) outcome {
	up, out, ok := e.dial(ctx, f, Plaintext)
	if !ok {
		return out
	}
	last := new(atomic.Int64)
	client := flowconn.Wrap(f.c, flowconn.Options{Prefix: f.takePeeked(), Activity: last})
	upstream := flowconn.Wrap(up, flowconn.Options{Activity: last})
	return e.serveHTTP(ctx, f, route, Plaintext, client, upstream, last)
}

// terminate verifies the upstream first, then completes the client's handshake with a minted
// leaf. "An invalid upstream certificate is never laundered into a valid one" (DESIGN.md): a
// failed verification refuses the client's handshake before any certificate is presented.
func (e *Engine) terminate(ctx context.Context, f *flow, route *Route) outcome {
	deny := func(reason string) outcome { return refusal(Terminate, route.Name, reason, "") }
	if e.opt.TLS.Leaves == nil && (f.src == nil || f.src.Certificate == nil) {
		return deny("terminate route without a CA")
	}
	up, out, ok := e.dial(ctx, f, Terminate)
	if !ok {
		return out
	}
	var upConn net.Conn = up
	if !route.PlaintextUpstreamTrustedNetwork {
		upCfg := e.opt.TLS.Upstream
		if f.src != nil && f.src.UpstreamRoots != nil {
			upCfg.Roots = f.src.UpstreamRoots
		}
		tup, err := tlsmitm.Originate(ctx, up, f.sniName, f.orig.Addr(), upCfg)
		if err != nil {
			var ve *tlsmitm.VerifyError
			if !errors.As(err, &ve) {
				return upstreamFailure(Terminate, route.Name, "upstream: "+err.Error(), "tls")
			}
			e.opt.Log.Warn("refusing client handshake: upstream certificate rejected", "flow", f.id,
				"orig_dst", f.orig.String(), "sni", f.sniName, "reason", ve.Reason, "err", ve.Err)
			tlsmitm.RefuseHandshake(f.c)
			out := refusal(Terminate, route.Name, "upstream certificate rejected: "+ve.Reason, "upstream_certificate")
			out.reset = false // the alert must reach the client: an orderly close
			return out
		}
		upConn, f.up = tup, tup // the exit ends the TLS session, not just the socket under it
	}
	name := f.sniName
	if name == "" {
		name = f.orig.Addr().String()
	}
	var cert *tls.Certificate
	if f.src != nil && f.src.Certificate != nil {
		// Sidecar mode: the co-located server's own certificate, as a reverse proxy holds it.
		cert = f.src.Certificate
	} else {
		var err error
		if cert, err = e.opt.TLS.Leaves.Leaf(name); err != nil {
			return deny("mint certificate: " + err.Error())
		}
	}
	// The hello is replayed through a wrapper that lets go of it once crypto/tls has read it:
	// the tls.Conn keeps its connection for the life of the flow.
	tc, err := tlsmitm.Terminate(ctx, flowconn.Wrap(f.c, flowconn.Options{Prefix: f.takePeeked()}), nil, cert, e.opt.TLS.HandshakeTimeout)
	if err != nil {
		return forwarded(Terminate, 0, route.Name, err.Error())
	}
	last := new(atomic.Int64)
	client := flowconn.Wrap(tc, flowconn.Options{TCP: f.c, Activity: last})
	upstream := flowconn.Wrap(upConn, flowconn.Options{TCP: up, Activity: last})
	if route.Level >= 1 {
		return e.serveHTTP(ctx, f, route, Terminate, client, upstream, last)
	}
	idled, stop := watchIdle(e.opt.Limits.IdleTimeout, last, client, upstream)
	upN, downN, reset := copyBoth(client, upstream)
	stop()
	reason := ""
	if idled() {
		reason = "idle timeout"
	} else if reset {
		reason = "reset"
	}
	return relayed(Terminate, route.Name, upN, downN, reason, reset)
}

// copyBoth is the opaque relay for connections that cannot splice (TLS on either side). A FIN
// becomes a half-close on the other side; a reset becomes a reset.
func copyBoth(a, b net.Conn) (up, down int64, reset bool) {
	var wg sync.WaitGroup
	var resetSeen atomic.Bool
	one := func(dst, src net.Conn) int64 {
		n, err := io.Copy(dst, src)
		switch {
		case err == nil:
			if cw, ok := dst.(interface{ CloseWrite() error }); ok {
				cw.CloseWrite()
			}
		case errors.Is(err, syscall.ECONNRESET):
			resetSeen.Store(true)
			if l, ok := dst.(interface{ SetLinger(int) error }); ok {
				l.SetLinger(0)
			}
			dst.Close()
			src.Close()
		default:
			dst.Close()
			src.Close()
		}
		return n
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		down = one(a, b)
	}()
	up = one(b, a)
	wg.Wait()
	a.Close()
	b.Close()
	return up, down, resetSeen.Load()
}

// sameName compares DNS names case-insensitively, ignoring a trailing dot.
func sameName(a, b string) bool {
	return a != "" && strings.EqualFold(strings.TrimSuffix(a, "."), strings.TrimSuffix(b, "."))
}
