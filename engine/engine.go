// Package engine runs the per-flow pipeline: admit the flow against the limits, take its Origin
// (original destination, and host name or process when the mechanism knows them) from the steering
// mechanism, dial that destination with the bypass mark, forward in both directions and
// write the flow record. Classification, TLS disposition and the Level 1/2 dispatch of later
// issues plug in between the dial and the relay; the engine knows no policy internals.
package engine

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"mcpintercept/exchange"
	"mcpintercept/origin"
	"mcpintercept/policy"
	"mcpintercept/stage"
	"mcpintercept/telemetry"
)

type atomicInt = atomic.Int64

// Dialer opens the upstream connection (with the bypass mark, in production).
type Dialer interface {
	DialContext(ctx context.Context, network, address string) (net.Conn, error)
}

// FlowSink receives one record per flow (telemetry.FlowLog in production).
type FlowSink interface {
	Write(telemetry.FlowRecord)
}

// Limits bound what one appliance and one client may hold open.
type Limits struct {
	MaxFlows          int
	MaxFlowsPerClient int
	IdleTimeout       time.Duration
	ConnectTimeout    time.Duration
	// BodyTimeout bounds how long one request body may take to arrive in full at Level 1
	// (exchange.Options.BodyTimeout; 0 leaves HTTP's own setting).
	BodyTimeout time.Duration
}

// Options wires an Engine.
type Options struct {
	Mechanism string // contract name, for logs and records (an Origin that names none takes it)
	// Steering gives the Origin of every accepted connection (the intercept mechanism).
	Steering OriginSource
	Dialer   Dialer
	Limits   Limits
	Flows    FlowSink
	Metrics  *telemetry.Metrics
	// Records is the one writer of every record (flow, exchange, message) and of the metrics
	// that go with them; nil: one that writes Flows and counts in Metrics.
	Records *telemetry.Recorder
	Log     *slog.Logger

	// Routing is the initial routing table; nil means every flow takes DefaultRoute (opaque).
	Routing *Routing
	TLS     TLSOptions
	// HTTP is the exchange loop's configuration (header bound and timeout); the engine adds the
	// flow's limits per connection (the classify stage reads the route's guards).
	HTTP exchange.Options
	// Stages is the chain every HTTP-aware connection runs through, in order (chain.Stages); the
	// engine adds its record writer last. Nil: a flow on a route that reads HTTP is refused
	// ("no stage chain"), never forwarded unjudged.
	Stages []stage.Factory
	// ConnSpan makes the span of a flow that carried no HTTP the appliance read, whose ids go on
	// its record (chain.ConnSpan; nil: none).
	ConnSpan func(c *stage.Conn, start time.Time, decision, rule, reason string) (traceID, spanID string)
	// OpaqueHead, when set, is shown the first bytes (at most OpaqueHeadMax, after forwarding
	// them) of every flow forwarded opaque that did not open with a TLS ClientHello: the
	// inventory recognises MCP that no route inspects. Nil: those flows splice from the first byte.
	OpaqueHead HeadObserver
}

// Engine accepts flows from listeners and forwards each in its own goroutine.
type Engine struct {
	opt    Options
	rec    *telemetry.Recorder // opt's recorder (recorderOf)
	shadow *shadowMetrics

	// listenAddrs are the bound listener addresses; a flow whose original destination is one of
	// them would be forwarded to the appliance itself, so it is refused (loop avoidance).
	listenMu    sync.Mutex
	listenAddrs map[netip.AddrPort]bool

	active    atomic.Int64
	clientsMu sync.Mutex
	clients   map[netip.Addr]int
	flows     map[uint64]*flowConns
	nextID    atomic.Uint64
	idPrefix  string
	wg        sync.WaitGroup
	refuseLog rateLimitedLog
	routing   atomic.Pointer[Routing]

	// flowCtx is what flows run under. It is not the accept loop's context: stopping accepting
	// must leave open flows to drain, and only Drain's deadline cancels them.
	flowCtx    context.Context
	flowCancel context.CancelFunc
}

// SetRouting swaps the routing table (config reload). Open flows are not disturbed.
func (e *Engine) SetRouting(r *Routing) {
	if r == nil {
		r = &Routing{}
	}
	e.routing.Store(r)
}

// Routing is the routing table new flows take.
func (e *Engine) Routing() *Routing { return e.routing.Load() }

// New returns an Engine; nothing runs until Serve.
func New(opt Options) *Engine {
	var b [4]byte
	rand.Read(b[:])
	e := &Engine{
		opt:         opt,
		rec:         recorderOf(opt),
		shadow:      newShadowMetrics(registryOf(opt.Metrics)),
		listenAddrs: map[netip.AddrPort]bool{},
		clients:     map[netip.Addr]int{},
		flows:       map[uint64]*flowConns{},
		idPrefix:    hex.EncodeToString(b[:]),
		refuseLog:   rateLimitedLog{log: opt.Log, every: time.Second},
	}
	e.flowCtx, e.flowCancel = context.WithCancel(context.Background())
	e.SetRouting(opt.Routing)
	return e
}

// registryOf is where the engine's own series register: m's registry, none without one.
func registryOf(m *telemetry.Metrics) prometheus.Registerer {
	if m == nil || m.Registry == nil {
		return nil
	}
	return m.Registry
}

// Serve accepts on ln until ln is closed or ctx is done. Each flow runs in a goroutine the Engine
// owns; Drain waits for them.
func (e *Engine) Serve(ctx context.Context, ln *net.TCPListener) error { return e.serve(ctx, ln, nil) }

// Source is where the flows of one listener come from when that is not the engine's own steering:
// the node agent serves every enrolled pod's listener (opened inside the pod's network namespace)
// in one engine, each with the pod's identity and a dialer that dials from that namespace.
type Source struct {
	// Steering gives the Origin of each connection accepted on the listener.
	Steering OriginSource
	// Dialer opens the upstream connections of those flows (and Level 2's own requests to
	// their servers).
	Dialer Dialer
	// Pod is client.pod of every flow from the listener: built once, shared by all of them.
	Pod *policy.Pod
	// Mode is the draft's mode of the listener's flows when it is not Transparent ("Sidecar"):
	// their records carry it, with the interceptor point of each (telemetry.FlowRecord.Point).
	Mode string
	// Certificate, when set, is presented to clients on terminate routes instead of a leaf minted
	// by the local CA (Sidecar mode: the co-located server's own); UpstreamRoots, when set,
	// verify the re-originated connection instead of upstream_tls (the server's certificate
	// itself).
	Certificate   *tls.Certificate
	UpstreamRoots *x509.CertPool
	// DialFromClient puts each flow's client address on its dial's context (origin.WithSource),
	// for a Dialer that connects from it (Sidecar mode's upstream.TransparentDialer).
	DialFromClient bool
}

// ServeWith is Serve for a listener whose flows come from src instead of Options.Steering and
// Options.Dialer; limits, routing, records and Drain are the engine's, as for Serve.
func (e *Engine) ServeWith(ctx context.Context, ln *net.TCPListener, src *Source) error {
	if src == nil || src.Steering == nil || src.Dialer == nil {
		return errors.New("engine: ServeWith needs a source with steering and a dialer")
	}
	return e.serve(ctx, ln, src)
}

func (e *Engine) serve(ctx context.Context, ln *net.TCPListener, src *Source) error {
	if ap, err := origin.AddrPortOf(ln.Addr()); err == nil {
		e.listenMu.Lock()
		e.listenAddrs[ap] = true
		e.listenMu.Unlock()
	}
	stop := context.AfterFunc(ctx, func() { ln.Close() })
	defer stop()
	var backoff time.Duration
	for {
		c, err := ln.AcceptTCP()
		if err != nil {
			if errors.Is(err, net.ErrClosed) || ctx.Err() != nil {
				return nil
			}
			// EMFILE and friends: back off instead of spinning, as net/http does.
			backoff = min(max(2*backoff, 5*time.Millisecond), time.Second)
			e.opt.Log.Warn("accept", "listener", ln.Addr().String(), "err", err, "retry_in", backoff)
			select {
			case <-time.After(backoff):
			case <-ctx.Done():
				return nil
			}
			continue
		}
		backoff = 0
		e.wg.Add(1)
		go func() {
			defer e.wg.Done()
			e.handle(e.flowCtx, c, src)
		}()
	}
}

// Drain waits for open flows to finish until ctx is done, then closes what is left and waits for
// their goroutines to write their records. Call it after the listeners are closed.
func (e *Engine) Drain(ctx context.Context) (forced int) {
	done := make(chan struct{})
	go func() { e.wg.Wait(); close(done) }()
	select {
	case <-done:
		e.flowCancel()
		return 0
	case <-ctx.Done():
	}
	e.flowCancel()
	e.clientsMu.Lock()
	for _, f := range e.flows {
		f.abort()
		forced++
	}
	e.clientsMu.Unlock()
	<-done
	return forced
}

// Active is the number of flows being forwarded now.
func (e *Engine) Active() int64 { return e.active.Load() }

// Metrics is the metric set the engine writes to (the one it was built with).
func (e *Engine) Metrics() *telemetry.Metrics { return e.opt.Metrics }

func (e *Engine) newFlowID() (uint64, string) {
	n := e.nextID.Add(1)
	return n, e.idPrefix + "-" + strconv.FormatUint(n, 10)
}

// admit applies the flow limits. The per-client map is the only shared state on the accept path.
func (e *Engine) admit(id uint64, client netip.Addr, fc *flowConns) (reason string) {
	e.clientsMu.Lock()
	defer e.clientsMu.Unlock()
	if e.opt.Limits.MaxFlows > 0 && e.active.Load() >= int64(e.opt.Limits.MaxFlows) {
		return "max_flows"
	}
	if e.opt.Limits.MaxFlowsPerClient > 0 && e.clients[client] >= e.opt.Limits.MaxFlowsPerClient {
		return "max_flows_per_client"
	}
	e.clients[client]++
	e.flows[id] = fc
	e.active.Add(1)
	return ""
}

func (e *Engine) release(id uint64, client netip.Addr) {
	e.clientsMu.Lock()
	defer e.clientsMu.Unlock()
	if e.clients[client]--; e.clients[client] <= 0 {
		delete(e.clients, client)
	}
	delete(e.flows, id)
	e.active.Add(-1)
}

// clientKey is what max_flows_per_client counts by: the address for IPv4, the /64 for IPv6,
// which one host can otherwise rotate through freely.
func clientKey(a netip.Addr) netip.Addr {
	if a.Is6() && !a.Is4In6() {
		p, _ := a.Prefix(64)
		return p.Addr()
	}
	return a
}

func (e *Engine) isLoop(dst netip.AddrPort) bool {
	e.listenMu.Lock()
	defer e.listenMu.Unlock()
	if e.listenAddrs[dst] {
		return true
	}
	// A wildcard listener also answers on every local address with its port.
	for l := range e.listenAddrs {
		if l.Port() == dst.Port() && l.Addr().IsUnspecified() && isLocal(dst.Addr()) {
			return true
		}
	}
	return false
}

func isLocal(a netip.Addr) bool {
	if a.IsLoopback() {
		return true
	}
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return false
	}
	for _, ia := range addrs {
		if n, ok := ia.(*net.IPNet); ok {
			if ip, ok := netip.AddrFromSlice(n.IP); ok && ip.Unmap() == a {
				return true
			}
		}
	}
	return false
}

// handle is one flow from accept to record: run takes it as far as it goes and returns how it
// ended, and exit, the one way out, closes what is left, counts it and writes the record.
func (e *Engine) handle(ctx context.Context, c *net.TCPConn, src *Source) {
	start := time.Now()
	num, flowID := e.newFlowID()
	client, err := origin.AddrPortOf(c.RemoteAddr())
	if err != nil {
		c.Close()
		return
	}
	f := &flow{e: e, num: num, id: flowID, start: start, client: client, c: c, src: src,
		fc: &flowConns{client: c}, origin: Origin{Mechanism: e.opt.Mechanism}}
	defer func() {
		// Last resort for a bug in the exit itself (a flow sink that panics): log, never crash.
		if p := recover(); p != nil {
			e.opt.Log.Error("flow exit panicked", "flow", flowID, "panic", p)
			f.fc.abort()
		}
	}()
	e.exit(f, e.run(ctx, f))
}

// run admits f, takes its Origin and dispatches it. A panic on the way ends the flow too, as a
// deny with the reason "internal error".
func (e *Engine) run(ctx context.Context, f *flow) (out outcome) {
	key := clientKey(f.client.Addr())
	if reason := e.admit(f.num, key, f.fc); reason != "" {
		return e.refuse(f, reason, fmt.Errorf("limit %s reached", reason))
	}
	defer e.release(f.num, key)
	e.opt.Metrics.FlowsActive.Inc()
	defer e.opt.Metrics.FlowsActive.Dec()
	defer func() {
		// One flow's bug must not take the appliance (and the host's steering) down.
		if p := recover(); p != nil {
			e.opt.Log.Error("flow panicked", "flow", f.id, "panic", p)
			f.fc.abort()
			out = outcome{tls: f.seenTLS(), decision: policy.ActionDeny, reason: fmt.Sprintf("internal error: %v", p)}
		}
	}()

	o, err := f.steering().Origin(f.c)
	if err != nil {
		// A mechanism that refuses on purpose (DNS: an SNI that is not the name behind the VIP,
		// a VIP bound to no name) says why; anything else is a lost original destination.
		reason := "no_original_destination"
		var rr interface{ RefuseReason() string }
		if errors.As(err, &rr) {
			reason = rr.RefuseReason()
		}
		return e.refuse(f, reason, err)
	}
	if o.Mechanism == "" {
		o.Mechanism = e.opt.Mechanism
	}
	// f.orig is o.Dst, kept as a field of its own because every stage of the flow reads it.
	f.origin, f.orig = o, o.Dst
	if e.isLoop(o.Dst) {
		return e.refuse(f, "loop", errors.New("original destination is the appliance's own listener"))
	}
	e.opt.Metrics.FlowsTotal.WithLabelValues(o.Mechanism).Inc()
	f.dispatched = true
	return e.dispatch(ctx, f)
}

// refuse is a flow refused before its route is chosen (limits, no origin, a loop): nothing was
// read from it.
func (e *Engine) refuse(f *flow, reason string, err error) outcome {
	orig := ""
	if f.orig.IsValid() {
		orig = f.orig.String()
	}
	e.refuseLog.warn(reason, "flow refused", "flow", f.id, "client", f.client.String(), "orig_dst", orig, "reason", reason, "err", err)
	return refusal(f.seenTLS(), "", reason, reason)
}

func dialReason(err error) string {
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return "connect timeout"
	}
	var oe *net.OpError
	if errors.As(err, &oe) && oe.Err != nil {
		return oe.Err.Error()
	}
	return err.Error()
}

// rateLimitedLog keeps a flood of refusals from turning into a flood of log lines: at most one
// line per key per interval, with the number suppressed in between.
type rateLimitedLog struct {
	log        *slog.Logger
	every      time.Duration
	mu         sync.Mutex
	last       map[string]time.Time
	suppressed map[string]int
}

func (r *rateLimitedLog) warn(key, msg string, args ...any) {
	r.mu.Lock()
	if r.last == nil {
		r.last, r.suppressed = map[string]time.Time{}, map[string]int{}
	}
	now := time.Now()
	if now.Sub(r.last[key]) < r.every {
		r.suppressed[key]++
		r.mu.Unlock()
		return
	}
	n := r.suppressed[key]
	r.last[key], r.suppressed[key] = now, 0
	r.mu.Unlock()
	if n > 0 {
		args = append(args, "suppressed_since_last", n)
	}
	r.log.Warn(msg, args...)
}
