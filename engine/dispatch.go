package engine

import (
	"context"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"net/netip"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"mcpintercept/policy"
	"mcpintercept/telemetry"
	"mcpintercept/tlsmitm"
)

// LeafSource mints the certificate the appliance presents for a name (pki.Minter).
type LeafSource interface {
	Leaf(name string) (*tls.Certificate, error)
}

// RuleSet is a compiled policy rule set (policy.Set).
type RuleSet interface {
	Evaluate(in *policy.Input) policy.Decision
}

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

// flow is one accepted connection on its way through the pipeline.
type flow struct {
	e      *Engine
	id     string
	start  time.Time
	client netip.AddrPort
	orig   netip.AddrPort // origin.Dst
	origin Origin
	c      *net.TCPConn
	fc     *flowConns

	// rules is the route's rule set, fixed when the route is chosen.
	rules flowRules

	peekDone bool
	isHello  bool   // the client opened with a complete, valid ClientHello
	sniName  string // the hello's server name, kept for records and rules after hello is released
	// peeked and hello are what the peek read and parsed. They are released (set to nil) once
	// handed on, so that an idle flow does not hold a ClientHello (up to 64 KiB) for its life.
	peeked  []byte
	hello   *tlsmitm.ClientHello
	peekErr error
}

// takePeeked hands the peeked bytes over to whoever replays them and forgets them.
func (f *flow) takePeeked() []byte {
	b := f.peeked
	f.peeked, f.hello = nil, nil
	return b
}

// peek reads the client's first bytes once: a whole ClientHello when it is TLS, otherwise only
// what it took to tell (usually one byte). A client that sends nothing within the peek timeout
// (a server-speaks-first protocol) counts as not TLS.
func (f *flow) peek() {
	if f.peekDone {
		return
	}
	f.peekDone = true
	to := f.e.opt.TLS.PeekTimeout
	if to <= 0 {
		to = 5 * time.Second
	}
	f.c.SetReadDeadline(time.Now().Add(to))
	f.hello, f.peeked, f.peekErr = tlsmitm.Peek(f.c, f.e.opt.TLS.MaxClientHello)
	f.c.SetReadDeadline(time.Time{})
	if f.hello != nil {
		f.isHello, f.sniName = true, f.hello.SNI
	}
}

func (f *flow) sni() string {
	f.peek()
	return f.sniName
}

// isTLS reports whether the client opened with a complete, valid ClientHello.
func (f *flow) isTLS() bool { f.peek(); return f.isHello }

// badHello is a client that started a TLS handshake the parser refused (malformed, oversized,
// truncated): the flow is closed and nothing is forwarded.
func (f *flow) badHello() bool {
	var te *tlsmitm.Error
	if !errors.As(f.peekErr, &te) {
		return false
	}
	switch te.Kind {
	case tlsmitm.KindMalformed, tlsmitm.KindOversized:
		return true
	case tlsmitm.KindTruncated, tlsmitm.KindRead:
		// The client hung up, or stalled past the peek timeout, halfway through a hello. Forwarding
		// it opaque would let a client skip the route's inspection by pausing: close instead.
		return len(f.peeked) > 0
	}
	return false
}

// silent reports that the client sent nothing before the peek timeout (as opposed to closing).
func (f *flow) silent() bool {
	return len(f.peeked) == 0 && errors.Is(f.peekErr, os.ErrDeadlineExceeded)
}

func (f *flow) record() telemetry.FlowRecord {
	r := telemetry.FlowRecord{
		Time: telemetry.Time{Time: f.start}, Flow: f.id, Client: f.client.String(),
		OrigDst: f.orig.String(), Mechanism: f.origin.Mechanism,
	}
	r.SNI = f.sniName
	if r.SNI == "" {
		// The record has no host field: a flow without SNI shows the name the client resolved
		// (DNS interception) there; with SNI the two are equal, as the DNS mechanism requires.
		r.SNI = f.origin.Host
	}
	if id := f.origin.Identity; id != nil {
		r.Process = &telemetry.Process{PID: id.PID, UID: id.UID, GID: id.GID,
			Comm: id.Comm, Exe: id.Exe, Cgroup: id.CgroupID}
	}
	return r
}

func (f *flow) clientVars() map[string]any {
	m := map[string]any{"address": f.client.Addr().String(), "port": int64(f.client.Port())}
	if id := f.origin.Identity; id != nil {
		m["pid"] = int64(id.PID)
		m["uid"] = int64(id.UID)
		m["gid"] = int64(id.GID)
		m["comm"] = id.Comm
		m["exe"] = id.Exe
		m["cgroup"] = int64(id.CgroupID)
	}
	return m
}

func (f *flow) connVars(tlsMode string) map[string]any {
	m := map[string]any{
		"orig_dst": f.orig.String(), "orig_ip": f.orig.Addr().String(), "orig_port": int64(f.orig.Port()),
		"mechanism": f.e.opt.Mechanism, "tls": tlsMode,
	}
	if f.isHello {
		m["sni"] = f.sniName
	}
	return m
}

// dispatch runs the route's disposition and level. It returns when the flow is over.
func (e *Engine) dispatch(ctx context.Context, f *flow) {
	rt := e.routing.Load()
	// DNS interception plugs in here: a route matching by name will match f.origin.Host (the
	// name behind the VIP) as well as the SNI.
	route := selectRoute(rt.Routes, f.client, f.orig, f.sni)

	if route == DefaultRoute {
		// No route matched: also a TLS flow without SNI, or with one no sni: route names.
		switch {
		case rt.DefaultClose:
			e.noRoute(f)
			return
		case rt.Default != nil:
			route = rt.Default
		default:
			// The transparent core: no byte is read before forwarding, so protocols where
			// the server speaks first work too.
			e.opaque(ctx, f, route, "")
			return
		}
	}
	f.rules = rulesFor(rt, route)
	switch route.TLS {
	case Passthrough:
		if !f.isTLS() {
			e.notTLS(ctx, f, route)
			return
		}
		if !e.connPolicy(f, route, "passthrough") {
			return
		}
		e.opaque(ctx, f, route, "passthrough")
	case Terminate:
		if !f.isTLS() {
			e.notTLS(ctx, f, route)
			return
		}
		e.terminate(ctx, f, route)
	case Plaintext:
		e.warnPlaintext(route)
		if route.Level == 0 {
			if !e.connPolicy(f, route, "plaintext") {
				return
			}
			e.opaque(ctx, f, route, "plaintext")
			return
		}
		if f.isTLS() {
			if e.mismatch(f, route, "plaintext route saw a TLS ClientHello") && e.connPolicy(f, route, "passthrough") {
				e.opaque(ctx, f, route, "passthrough")
			}
			return
		}
		if len(f.peeked) == 0 && !f.silent() {
			// The client closed before sending anything.
			rec := f.record()
			rec.TLS, rec.Level, rec.Decision, rec.Rule, rec.Reason = "plaintext", 1, "allow", route.Name, "closed before a request"
			f.c.Close()
			e.finish(&rec, f.start)
			return
		}
		// A silent client still goes through Level 1, which waits for its request (header and
		// idle timeouts apply): a route declared HTTP is never bypassed by pausing.
		up, ok := e.dial(ctx, f, "plaintext")
		if !ok {
			return
		}
		e.level1(ctx, f, route, "plaintext", &prefixConn{Conn: f.c, prefix: f.takePeeked()}, up)
	case Auto:
		switch {
		case f.isTLS():
			e.terminate(ctx, f, route)
		case f.badHello():
			e.closeBadHello(f, route)
		case route.Level >= 1 && f.looksLikeHTTP():
			up, ok := e.dial(ctx, f, "plaintext")
			if !ok {
				return
			}
			e.level1(ctx, f, route, "plaintext", &prefixConn{Conn: f.c, prefix: f.takePeeked()}, up)
		default:
			e.opaque(ctx, f, route, "")
		}
	default:
		e.opaque(ctx, f, route, "")
	}
}

// httpMethods are the request-line prefixes that make a plaintext stream HTTP/1.x for Auto.
var httpMethods = []string{"GET ", "POST ", "PUT ", "DELETE ", "HEAD ", "OPTIONS ", "PATCH "}

// looksLikeHTTP reads a few more bytes (at most 8, within the peek timeout) and checks for an
// HTTP request line. What it reads joins f.peeked, so nothing is lost.
func (f *flow) looksLikeHTTP() bool {
	if len(f.peeked) == 0 {
		return false
	}
	to := f.e.opt.TLS.PeekTimeout
	if to <= 0 {
		to = 5 * time.Second
	}
	f.c.SetReadDeadline(time.Now().Add(to))
	defer f.c.SetReadDeadline(time.Time{})
	buf := make([]byte, 8)
	for len(f.peeked) < 8 && !strings.Contains(string(f.peeked), " ") {
		n, err := f.c.Read(buf[:8-len(f.peeked)])
		f.peeked = append(f.peeked, buf[:n]...)
		if err != nil {
			break
		}
	}
	s := string(f.peeked)
	for _, m := range httpMethods {
		if strings.HasPrefix(s, m) {
			return true
		}
	}
	return false
}

// notTLS handles a TLS route whose client did not open with a valid ClientHello: a broken hello
// closes the flow, anything else follows the route's on_mismatch.
func (e *Engine) notTLS(ctx context.Context, f *flow, route *Route) {
	if f.badHello() {
		e.closeBadHello(f, route)
		return
	}
	if e.mismatch(f, route, string(route.TLS)+" route saw non-TLS bytes") && e.connPolicy(f, route, "") {
		e.opaque(ctx, f, route, "")
	}
}

// noRoute refuses a flow that matched no route under `default_route: close`.
func (e *Engine) noRoute(f *flow) {
	e.refuseLog.warn("no_route", "closing flow: no route matched", "flow", f.id, "client", f.client.String(),
		"orig_dst", f.orig.String(), "sni", f.sniName)
	rec := f.record()
	rec.TLS, rec.Decision, rec.Rule, rec.Reason = f.seenTLS(), "deny", DefaultRoute.Name, ReasonNoRoute
	e.opt.Metrics.FlowsRefused.WithLabelValues("no_route").Inc()
	resetClose(f.c)
	e.finish(&rec, f.start)
}

// seenTLS names what the bytes read so far were, for the record of a flow that is refused or
// forwarded untouched: plaintext when they were not TLS, else passthrough in the draft's terms
// (encrypted or not, nothing was decrypted).
func (f *flow) seenTLS() string {
	if f.peekDone && !f.isHello && len(f.peeked) > 0 {
		return "plaintext"
	}
	return "passthrough"
}

// closesOnMismatch is the route's on_mismatch: close, or passthrough. Unset, it is close for
// routes with Level >= 1 (forwarding the bytes opaque would skip the inspection the route asks
// for), passthrough for Level 0, as config fills it.
func (r *Route) closesOnMismatch() bool {
	if r.OnMismatch == "" {
		return r.Level >= 1
	}
	return r.OnMismatch == "close"
}

// mismatch applies the route's on_mismatch choice and logs it. It returns true to forward
// opaquely, false after closing the flow.
func (e *Engine) mismatch(f *flow, route *Route, what string) bool {
	if route.closesOnMismatch() {
		e.refuseLog.warn("mismatch:"+route.Name, "closing flow", "flow", f.id, "route", route.Name, "why", what, "orig_dst", f.orig.String())
		rec := f.record()
		rec.Decision, rec.Rule, rec.Reason = "deny", route.Name, what+"; on_mismatch close"
		e.opt.Metrics.FlowsRefused.WithLabelValues("mismatch").Inc()
		resetClose(f.c)
		e.finish(&rec, f.start)
		return false
	}
	e.refuseLog.warn("mismatch:"+route.Name, "forwarding opaque", "flow", f.id, "route", route.Name, "why", what, "orig_dst", f.orig.String())
	return true
}

func (e *Engine) closeBadHello(f *flow, route *Route) {
	e.refuseLog.warn("badhello", "closing flow: bad TLS ClientHello", "flow", f.id, "client", f.client.String(), "err", f.peekErr)
	rec := f.record()
	rec.TLS, rec.Decision, rec.Rule, rec.Reason = string(route.TLS), "deny", route.Name, f.peekErr.Error()
	e.opt.Metrics.FlowsRefused.WithLabelValues("bad_client_hello").Inc()
	resetClose(f.c)
	e.finish(&rec, f.start)
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

// connPolicy evaluates the route's rule set with connection-level metadata only (passthrough and
// opaque routes cannot see HTTP). A deny or an exhausted rate limit resets the connection.
func (e *Engine) connPolicy(f *flow, route *Route, tlsMode string) bool {
	rs := f.rules.current(e)
	if rs == nil {
		return true
	}
	d := rs.Evaluate(&policy.Input{Client: f.clientVars(), Conn: f.connVars(tlsMode), FailOpen: f.rules.failOpen})
	e.noteRuleErrors(f, &d)
	if d.Action == "allow" || d.Action == "" {
		return true
	}
	rec := f.record()
	rec.TLS, rec.Decision, rec.Rule, rec.Reason = tlsMode, string(d.Action), d.Rule, d.Reason
	e.opt.Metrics.FlowsRefused.WithLabelValues("policy").Inc()
	e.refuseLog.warn("policy:"+d.Rule, "flow refused by policy", "flow", f.id, "client", f.client.String(), "orig_dst", f.orig.String(), "rule", d.Rule, "decision", d.Action)
	resetClose(f.c)
	e.finish(&rec, f.start)
	return false
}

// dial opens the upstream TCP connection; on failure the client gets a reset, as a direct
// connect would have given it.
func (e *Engine) dial(ctx context.Context, f *flow, tlsMode string) (*net.TCPConn, bool) {
	dctx, cancel := context.WithTimeout(ctx, e.opt.Limits.ConnectTimeout)
	uc, err := e.opt.Dialer.DialContext(dctx, "tcp", f.orig.String())
	cancel()
	if err != nil {
		e.opt.Metrics.UpstreamErrors.WithLabelValues("dial").Inc()
		rec := f.record()
		rec.TLS, rec.Decision, rec.Reason = tlsMode, "allow", "upstream: "+dialReason(err)
		resetClose(f.c)
		e.finish(&rec, f.start)
		return nil, false
	}
	up := uc.(*net.TCPConn)
	if !f.fc.setUpstream(up) { // drained while dialling
		resetClose(f.c)
		up.Close()
		rec := f.record()
		rec.TLS, rec.Decision, rec.Reason = tlsMode, "allow", "shutdown"
		e.finish(&rec, f.start)
		return nil, false
	}
	return up, true
}

// opaque forwards bytes untouched (splice), the peeked bytes first.
func (e *Engine) opaque(ctx context.Context, f *flow, route *Route, tlsMode string) {
	up, ok := e.dial(ctx, f, tlsMode)
	if !ok {
		return
	}
	if tlsMode == "" {
		tlsMode = f.seenTLS()
	}
	rec := f.record()
	rec.TLS, rec.Decision = tlsMode, "allow"
	if route != DefaultRoute {
		rec.Rule = route.Name
	}
	var pre int64
	if peeked := f.takePeeked(); len(peeked) > 0 {
		n, err := up.Write(peeked)
		pre = int64(n)
		if err != nil {
			resetClose(f.c)
			up.Close()
			rec.Reason = "upstream: " + dialReason(err)
			e.finish(&rec, f.start)
			return
		}
	}
	res := relay(f.c, up, e.opt.Limits.IdleTimeout, f.fc)
	e.account(&rec, res.up+pre, res.down, res.reason(), res.reset)
	e.finish(&rec, f.start)
}

func (e *Engine) account(rec *telemetry.FlowRecord, up, down int64, reason string, reset bool) {
	rec.BytesUp, rec.BytesDown = up, down
	if rec.Reason == "" {
		rec.Reason = reason
	}
	if reset {
		e.opt.Metrics.UpstreamErrors.WithLabelValues("reset").Inc()
	}
	e.opt.Metrics.Bytes.WithLabelValues("up").Add(float64(up))
	e.opt.Metrics.Bytes.WithLabelValues("down").Add(float64(down))
}

// terminate verifies the upstream first, then completes the client's handshake with a minted
// leaf. "An invalid upstream certificate is never laundered into a valid one" (DESIGN.md): a
// failed verification refuses the client's handshake before any certificate is presented.
func (e *Engine) terminate(ctx context.Context, f *flow, route *Route) {
	rec := f.record()
	rec.TLS, rec.Rule = "terminate", route.Name
	if e.opt.TLS.Leaves == nil {
		rec.Decision, rec.Reason = "deny", "terminate route without a CA"
		resetClose(f.c)
		e.finish(&rec, f.start)
		return
	}
	up, ok := e.dial(ctx, f, "terminate")
	if !ok {
		return
	}
	var upConn net.Conn = up
	if !route.PlaintextUpstreamTrustedNetwork {
		tup, err := tlsmitm.Originate(ctx, up, f.sniName, f.orig.Addr(), e.opt.TLS.Upstream)
		if err != nil {
			var ve *tlsmitm.VerifyError
			if errors.As(err, &ve) {
				e.opt.Metrics.FlowsRefused.WithLabelValues("upstream_certificate").Inc()
				e.opt.Log.Warn("refusing client handshake: upstream certificate rejected", "flow", f.id,
					"orig_dst", f.orig.String(), "sni", f.sniName, "reason", ve.Reason, "err", ve.Err)
				rec.Decision, rec.Reason = "deny", "upstream certificate rejected: "+ve.Reason
				tlsmitm.RefuseHandshake(f.c)
				f.c.Close()
			} else {
				e.opt.Metrics.UpstreamErrors.WithLabelValues("tls").Inc()
				rec.Decision, rec.Reason = "allow", "upstream: "+err.Error()
				resetClose(f.c)
			}
			up.Close()
			e.finish(&rec, f.start)
			return
		}
		upConn = tup
	}
	name := f.sniName
	if name == "" {
		name = f.orig.Addr().String()
	}
	cert, err := e.opt.TLS.Leaves.Leaf(name)
	if err != nil {
		rec.Decision, rec.Reason = "deny", "mint certificate: "+err.Error()
		resetClose(f.c)
		upConn.Close()
		e.finish(&rec, f.start)
		return
	}
	// The hello is replayed through a prefixConn that lets go of it once crypto/tls has read it:
	// the tls.Conn keeps its connection for the life of the flow.
	tc, err := tlsmitm.Terminate(ctx, &prefixConn{Conn: f.c, prefix: f.takePeeked()}, nil, cert, e.opt.TLS.HandshakeTimeout)
	if err != nil {
		rec.Decision, rec.Reason = "allow", err.Error()
		f.c.Close()
		upConn.Close()
		e.finish(&rec, f.start)
		return
	}
	client := &lingerConn{Conn: tc, raw: f.c}
	upstream := net.Conn(upConn)
	if t, ok := upConn.(*tls.Conn); ok {
		upstream = &lingerConn{Conn: t, raw: up}
	}
	if route.Level >= 1 {
		e.level1(ctx, f, route, "terminate", client, upstream)
		return
	}
	c, u, idled, stop := watchConns(e.opt.Limits.IdleTimeout, client, upstream)
	up2, down, reset := copyBoth(c, u)
	stop()
	reason := ""
	if idled() {
		reason = "idle timeout"
	} else if reset {
		reason = "reset"
	}
	rec.Decision = "allow"
	e.account(&rec, up2, down, reason, reset)
	e.finish(&rec, f.start)
}

// lingerConn lets level1 pass a reset on through a TLS connection: SetLinger reaches the TCP
// socket underneath.
type lingerConn struct {
	net.Conn
	raw *net.TCPConn
}

func (l *lingerConn) SetLinger(sec int) error { return l.raw.SetLinger(sec) }

func (l *lingerConn) CloseWrite() error {
	if cw, ok := l.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return nil
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
			closeWrite(dst)
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

func closeWrite(c net.Conn) {
	if cw, ok := c.(interface{ CloseWrite() error }); ok {
		cw.CloseWrite()
	}
}
