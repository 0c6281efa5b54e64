// Package auditstage makes a route's requests durable in the audit store before they go
// upstream: Level 1's audit stage (one authorization per HTTP request, its outcome after), and the
// flow's audit writer that Level 2's stage writes its per-message records through (Writer).
package auditstage

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"mcpintercept/audit"
	"mcpintercept/stage"
	"mcpintercept/telemetry"
)

// Name is the stage's name in the chain and the key of its options.
const Name = "audit"

// Appender is what the audit stages need of the durable audit store (audit.Store): Append returns
// once the record is durable, or with an error (audit.ErrUnavailable) when it could not be made so.
type Appender interface {
	Append(ctx context.Context, r *audit.Record) (audit.Receipt, error)
}

// Options is an audited route's setting: where its records go, what a request gets when its
// record cannot be written, and whether Level 2 records arguments besides their hash.
type Options struct {
	// Store receives the records; nil fails every record (a closed route then refuses all).
	Store Appender
	// FailOpen forwards a request whose authorization record failed (counted in
	// mcpintercept_audit_unrecorded_total); otherwise it is refused with CodeAuditUnavailable.
	FailOpen bool
	// Arguments records the (already redacted) arguments, not only their hash.
	Arguments bool
}

// Kinds and outcomes of audit records, as the store's readers name them.
const (
	auditAuthorization = "authorization"
	auditOutcome       = "outcome"

	outcomeResult    = "result"
	outcomeError     = "error"
	outcomeDenied    = "denied"
	outcomeUncertain = "uncertain"
)

// errNoStore is the failure of a route audited with no store to write to.
var errNoStore = fmt.Errorf("%w: no audit store open", audit.ErrUnavailable)

// auditMetrics are the audit series: records made durable by kind, requests forwarded unrecorded
// (fail open) by route, and the time one Append took.
type auditMetrics struct {
	records    *prometheus.CounterVec
	unrecorded *prometheus.CounterVec
	seconds    prometheus.Histogram
}

// newAuditMetrics registers the audit series on reg (nil: unregistered), reusing those registered
// before on the same registry.
func newAuditMetrics(reg prometheus.Registerer) *auditMetrics {
	m := &auditMetrics{
		records: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "mcpintercept_audit_records_total", Help: "Audit records made durable, by kind (authorization, outcome)."},
			[]string{"kind"}),
		unrecorded: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "mcpintercept_audit_unrecorded_total", Help: "Requests forwarded without a durable authorization record (audit fail: open), by route."},
			[]string{"route"}),
		seconds: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "mcpintercept_audit_append_seconds", Help: "Time for one audit record to become durable (or fail).",
			Buckets: prometheus.ExponentialBuckets(0.0001, 2, 16)}),
	}
	m.records = telemetry.Registered(reg, m.records)
	m.unrecorded = telemetry.Registered(reg, m.unrecorded)
	m.seconds = telemetry.Registered(reg, m.seconds)
	return m
}

// Auditing is the audit of one appliance: its series, the Level 1 stage (Factory) and each audited
// connection's writer (Writer), which Level 1 and Level 2 share.
type Auditing struct{ m *auditMetrics }

// New returns the audit of a chain, counting on reg (nil: unregistered).
func New(reg prometheus.Registerer) *Auditing { return &Auditing{m: newAuditMetrics(reg)} }

// connKey keeps a connection's flowAudit.
type connKey struct{}

// Writer is c's audit writer: nil (an untyped nil interface) when its route is not audited. Its
// first call makes it; when the connection's exchanges are over, every authorization still
// without an outcome gets an uncertain one (c.OnEnd).
func (a *Auditing) Writer(c *stage.Conn) AuditWriter {
	if fa := a.flowAudit(c); fa != nil {
		return fa
	}
	return nil
}

// flowAudit writes the audit records of one connection on an audited route: it fills the flow's
// part of every record, applies the route's fail mode, and keeps track of the authorizations
// still waiting for their outcome, so that none is left without one when the flow ends.
//
// Level 2's stage writes its records through it too: Append for an authorization (before the
// message goes upstream), Outcome when the call ends.
type flowAudit struct {
	ra    *Options
	m     *auditMetrics
	route string
	warn  func(key, msg string, args ...any) // rate-limited
	flow  string                             // the flow log's id, for log lines
	base  audit.Record

	mu      sync.Mutex
	pending map[uint64]*audit.Record // authorizations by Seq, until their outcome is written
	wg      sync.WaitGroup           // outcome appends in flight
}

// flowAudit is c's, nil when its route is not audited.
func (a *Auditing) flowAudit(c *stage.Conn) *flowAudit {
	ra, _ := stage.Get[*Options](c.Options, Name)
	if ra == nil {
		return nil
	}
	return c.Shared(connKey{}, func() any {
		fa := &flowAudit{ra: ra, m: a.m, route: c.Route, warn: c.Warn, flow: c.ID,
			pending: map[uint64]*audit.Record{}}
		fa.base = audit.Record{Flow: c.Num, Client: c.Client.String(), Level: c.Level, Server: c.SNI}
		if c.Orig.IsValid() {
			fa.base.Destination = c.Orig.String()
		}
		if fa.base.Server == "" {
			fa.base.Server = c.Host
		}
		if id := c.Identity; id != nil {
			fa.base.Identity = &audit.Identity{PID: id.PID, UID: id.UID, Comm: id.Comm, Exe: id.Exe, Cgroup: id.CgroupID}
		}
		c.OnEnd(fa.finish)
		return fa
	}).(*flowAudit)
}

// AuditWriter is the audit seam of Level 2's stage: what one flow's audit records go through.
// Append makes an authorization record durable before the message goes upstream (an error: refuse
// it with -31004, forward nothing); Outcome records how the call ended, in the background;
// Arguments says whether records carry the redacted arguments besides their hash. The writer fills
// the flow's fields (flow, client, identity, destination, server, level) and, when the flow ends,
// gives every authorization still open an uncertain outcome ("shutdown" at the drain deadline).
type AuditWriter interface {
	Append(ctx context.Context, r *audit.Record) (audit.Receipt, error)
	Outcome(r *audit.Record)
	Arguments() bool
}

// Arguments reports whether records carry the (redacted) arguments besides their hash.
func (fa *flowAudit) Arguments() bool { return fa.ra.Arguments }

// Append makes an authorization record durable, the flow's fields filled in. The error is
// non-nil only when the record is not durable and the route fails closed: the caller must then
// refuse the request (CodeAuditUnavailable) and forward nothing. Under fail open the failure is
// counted and logged, and the zero Receipt returned.
func (fa *flowAudit) Append(ctx context.Context, r *audit.Record) (audit.Receipt, error) {
	if r.Kind == "" {
		r.Kind = auditAuthorization
	}
	rc, err := fa.write(ctx, r)
	if err == nil {
		if r.Kind == auditAuthorization && r.Outcome == "" {
			fa.mu.Lock()
			fa.pending[rc.Seq] = r
			fa.mu.Unlock()
		}
		return rc, nil
	}
	if fa.ra.FailOpen {
		fa.m.unrecorded.WithLabelValues(fa.route).Inc()
		fa.warn("audit:"+fa.route, "audit record not written; forwarding (audit fail: open)",
			"flow", fa.flow, "route", fa.route, "err", err)
		return audit.Receipt{}, nil
	}
	fa.warn("audit:"+fa.route, "audit record not written; refusing the request",
		"flow", fa.flow, "route", fa.route, "err", err)
	return audit.Receipt{}, err
}

// Outcome writes r, the outcome of the authorization r.Authorization (0: a record of its own, a
// denial), in the background: the call has already happened, so nothing waits for it but the
// flow's end (wait). A failure is logged; there is nothing left to refuse.
func (fa *flowAudit) Outcome(r *audit.Record) {
	if r.Kind == "" {
		r.Kind = auditOutcome
	}
	if r.Authorization != 0 {
		fa.mu.Lock()
		_, open := fa.pending[r.Authorization]
		delete(fa.pending, r.Authorization)
		fa.mu.Unlock()
		if !open {
			return // already ended (the flow's end raced the exchange's)
		}
	}
	fa.wg.Add(1)
	go func() {
		defer fa.wg.Done()
		// Not the flow's context: a flow cut by the drain deadline still owes its outcomes, and
		// the store's own timeout bounds the write.
		if _, err := fa.write(context.Background(), r); err != nil {
			fa.warn("audit-outcome:"+fa.route, "audit outcome not written", "flow", fa.flow, "route", fa.route,
				"authorization", r.Authorization, "err", err)
		}
	}()
}

// finish gives every authorization still without an outcome an uncertain one (reason: why the
// flow ended), then waits for the outcome writes in flight. Call it once the flow's exchanges
// are over.
func (fa *flowAudit) finish(reason string) {
	fa.mu.Lock()
	open := make(map[uint64]*audit.Record, len(fa.pending))
	for seq, r := range fa.pending {
		open[seq] = r
	}
	fa.mu.Unlock()
	for seq, a := range open {
		fa.Outcome(audit.OutcomeOf(a, seq, outcomeUncertain, reason))
	}
	fa.wg.Wait()
}

// write fills the flow's fields, appends and counts.
func (fa *flowAudit) write(ctx context.Context, r *audit.Record) (audit.Receipt, error) {
	fa.fill(r)
	if fa.ra.Store == nil {
		return audit.Receipt{}, errNoStore
	}
	start := time.Now()
	rc, err := fa.ra.Store.Append(ctx, r)
	fa.m.seconds.Observe(time.Since(start).Seconds())
	if err != nil {
		return rc, fmt.Errorf("audit %s: %w", r.Kind, err)
	}
	fa.m.records.WithLabelValues(r.Kind).Inc()
	return rc, nil
}

// fill sets the flow's part of r where the caller left it empty.
func (fa *flowAudit) fill(r *audit.Record) {
	b := &fa.base
	r.Flow = b.Flow
	if r.Client == "" {
		r.Client = b.Client
	}
	if r.Identity == nil {
		r.Identity = b.Identity
	}
	if r.Destination == "" {
		r.Destination = b.Destination
	}
	if r.Server == "" {
		r.Server = b.Server
	}
	if r.Level == 0 {
		r.Level = b.Level
	}
}

// Of is the audit options of a route's stage options (nil: not audited).
func Of(o stage.Options) *Options {
	ra, _ := stage.Get[*Options](o, Name)
	return ra
}
