package federation

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"mcpintercept/audit"
	"mcpintercept/mcp"
	"mcpintercept/policy"
	"mcpintercept/tracing"
)

// Version is the federation's own version as it names itself to clients and downstreams (set by
// the binary).
var Version = "devel"

// CodeUncertain is the JSON-RPC error code of uncertain-after-dispatch: the call went to the
// downstream and its final state is not known (outside JSON-RPC's reserved range, as every code
// of the appliance's own).
const CodeUncertain = -31007

// UncertainMessage is that error's message.
const UncertainMessage = "uncertain-after-dispatch"

// Appender is the durable audit store.
type Appender interface {
	Append(ctx context.Context, r *audit.Record) (audit.Receipt, error)
}

// Call is one client tools/call as the ingress decoded it.
type Call struct {
	ID        json.RawMessage // the client's id, echoed on the answer
	Name      string          // the aggregate name
	Arguments json.RawMessage // params.arguments as sent (nil: absent)
	Meta      json.RawMessage // params._meta as sent (nil: absent)
	Client    string          // the client's ip:port
	Vars      policy.Vars     // the client's facts for the rules (Downstream is filled here)
	Caller    policy.Caller
}

// Dispatcher is the only owner of downstream tools/call.
type Dispatcher struct {
	reg         *Registry
	store       Appender
	downstreams map[string]*Downstream
	resultBytes int64
	log         *slog.Logger
	metrics     *Metrics
	trace       *tracing.Tracer // nil: off

	// base is cancelled at shutdown: every call's context derives from it.
	base    context.Context
	cancel  context.CancelFunc
	cleanup sync.WaitGroup
	exch    atomic.Uint64
}

// NewDispatcher dispatches calls authorized against reg to downstreams, recording them in store.
func NewDispatcher(reg *Registry, store Appender, ds []*Downstream, resultBytes int64, m *Metrics, tr *tracing.Tracer, log *slog.Logger) *Dispatcher {
	d := &Dispatcher{reg: reg, store: store, downstreams: map[string]*Downstream{}, resultBytes: resultBytes, log: log, metrics: m, trace: tr}
	for _, x := range ds {
		d.downstreams[x.ID] = x
	}
	d.base, d.cancel = context.WithCancel(context.Background())
	return d
}

// Cancel cancels every active dispatch (shutdown).
func (d *Dispatcher) Cancel() { d.cancel() }

// WaitCleanup waits for the session cleanups still running.
func (d *Dispatcher) WaitCleanup() { d.cleanup.Wait() }

// maxStale bounds how often a call is prepared again because a generation was published between
// its preparation and its commit.
const maxStale = 3

// Call authorizes, records and dispatches c, and returns the JSON-RPC answer for the client.
func (d *Dispatcher) Call(ctx context.Context, c *Call) []byte {
	exch := d.exch.Add(1)
	for attempt := 0; ; attempt++ {
		p := d.reg.Prepare(c.Name)
		body, err := d.try(ctx, c, p, exch)
		if errors.Is(err, errStale) && attempt < maxStale {
			continue
		}
		if err != nil {
			switch {
			case errors.Is(err, ErrClosed):
				return mcp.DenialBody(c.ID, mcp.CodeDenied, "federation shutting down", "", "the appliance is shutting down", 0)
			case errors.Is(err, errStale):
				return mcp.DenialBody(c.ID, mcp.CodeDenied, "aggregate changing", "", "the aggregate changed during authorization; retry", 0)
			}
			d.log.Warn("federation: call refused: audit record not durable", "tool", c.Name, "err", err)
			d.metrics.call(downstreamOf(p), "audit_unavailable")
			return mcp.DenialBody(c.ID, mcp.CodeAuditUnavailable, "audit unavailable", "", "the authorization record could not be made durable; the call was not sent", 0)
		}
		return body
	}
}

func downstreamOf(p Prepared) string {
	if p.Tool == nil {
		return ""
	}
	return p.Tool.Downstream
}

// try is one attempt at c against the prepared route p. Errors: errStale, ErrClosed, or the
// audit store's (nothing was sent).
func (d *Dispatcher) try(ctx context.Context, c *Call, p Prepared, exch uint64) ([]byte, error) {
	rec := &audit.Record{Kind: audit.KindAuthorization, Exchange: exch, Client: c.Client, Iss: c.Caller.Iss, Sub: c.Caller.Sub,
		Level: 2, Method: mcp.MethodToolsCall, Direction: "client_to_server", ID: string(c.ID), Tool: c.Name}
	if tp := traceparentIn(c.Meta); tp != "" {
		rec.Traceparent = tp
	}
	if len(c.Arguments) > 0 {
		h, err := audit.HashArguments(c.Arguments)
		if err != nil {
			return mcp.DenialBody(c.ID, mcp.CodeUnreadable, "arguments unreadable", "", err.Error(), 0), nil
		}
		rec.ArgsHash = h
	}
	var dec policy.Decision
	var ds *Downstream
	switch {
	case p.Tool == nil:
		rec.Decision, rec.Reason = audit.Deny, "no such tool in aggregate generation "+strconv.FormatUint(genN(p.Gen), 10)
	default:
		ds = d.downstreams[p.Tool.Downstream]
		rec.Server = p.Tool.Downstream
		rec.Destination = hostOf(ds.URL)
		dec = d.judge(c, p)
		rec.Rule, rec.Reason = dec.Rule, dec.Reason
		switch dec.Action {
		case policy.ActionAllow:
			rec.Decision = audit.Allow
		case policy.ActionRateLimited:
			rec.Decision = audit.RateLimited
		default:
			rec.Decision = audit.Deny
		}
	}
	span := d.startSpan(c, p, rec)
	rec.TraceID, rec.SpanID = span.TraceID(), span.SpanID()
	var receipt audit.Receipt
	err := d.reg.Commit(p, func() error {
		var err error
		receipt, err = d.store.Append(ctx, rec)
		return err
	})
	if err != nil {
		span.Decision("deny", "", "audit unavailable")
		span.End(time.Now())
		return nil, err
	}
	// outcome writes the call's outcome record, once, on every path from here: in the background
	// (the client's answer does not wait for it, as Level 2's does not), counted as the call's
	// terminal audit path, which shutdown waits for before the store closes.
	outcome := func(o, reason string, code int64) {
		or := audit.OutcomeOf(rec, receipt.Seq, o, reason)
		or.Client, or.Destination, or.ErrorCode = rec.Client, rec.Destination, code
		go func() {
			defer d.reg.Done()
			if _, err := d.store.Append(context.WithoutCancel(ctx), or); err != nil {
				d.log.Warn("federation: outcome record not durable", "tool", c.Name, "authorization", receipt.Seq, "err", err)
			}
		}()
	}
	if rec.Decision != audit.Allow {
		outcome("denied", rec.Reason, 0)
		span.Decision(string(rec.Decision), rec.Rule, rec.Reason)
		span.End(time.Now())
		d.metrics.call(downstreamOf(p), "denied")
		if p.Tool == nil {
			return mcp.EncodeError(c.ID, mcp.CodeInvalidParams, "Unknown tool: "+c.Name, mcp.Denial{Intermediary: mcp.Intermediary, Reason: rec.Reason}), nil
		}
		code := mcp.CodeDenied
		if dec.Action == policy.ActionRateLimited {
			code = mcp.CodeRateLimited
		}
		return mcp.DenialBody(c.ID, code, "denied by rule "+dec.Rule+": "+dec.Reason, dec.Rule, dec.Reason, dec.RetryAfter), nil
	}

	// The record is durable and the registry lock released: network I/O from here on.
	cctx, cancel := context.WithTimeout(d.base, ds.Timeout)
	defer cancel()
	stop := context.AfterFunc(ctx, cancel) // the client went away: the call is cancelled too
	defer stop()
	if tp, _, ok := span.Inject(); ok {
		cctx = withTraceparent(cctx, tp)
	}
	start := time.Now()
	d.metrics.dispatching(1)
	msg, raw, err := d.dispatch(cctx, ds, p.Tool, c, receipt.Seq)
	d.metrics.dispatching(-1)
	d.metrics.observe(ds.ID, time.Since(start))
	if err != nil {
		var ue *uncertainError
		reason := "transport"
		if errors.As(err, &ue) {
			reason = ue.reason
		}
		if errors.Is(d.base.Err(), context.Canceled) && reason != "timeout" {
			reason = "shutdown"
		}
		outcome("uncertain", reason, CodeUncertain)
		span.Status(CodeUncertain, 0, false)
		span.End(time.Now())
		d.metrics.call(ds.ID, "uncertain")
		d.log.Info("federation: call uncertain after dispatch", "tool", c.Name, "downstream", ds.ID, "reason", reason, "err", err)
		return mcp.EncodeError(c.ID, CodeUncertain, UncertainMessage, uncertainData{
			Intermediary: mcp.Intermediary, Downstream: ds.ID, Reason: reason,
			Detail: "the call was sent to the downstream and its outcome is unknown; it was not retried",
		}), nil
	}
	if msg.Kind == mcp.KindError {
		outcome("error", "", msg.Error.Code)
		span.Status(msg.Error.Code, 0, false)
		span.End(time.Now())
		d.metrics.call(ds.ID, "error")
		return relay(c.ID, "error", errorMember(msg, raw)), nil
	}
	outcome("result", "", 0)
	span.Status(0, 0, isToolError(msg.Result))
	span.End(time.Now())
	d.metrics.call(ds.ID, "result")
	return relay(c.ID, "result", msg.Result), nil
}

type uncertainData struct {
	Intermediary string `json:"intermediary"`
	Downstream   string `json:"downstream"`
	Reason       string `json:"reason"`
	Detail       string `json:"detail"`
}

func genN(g *Generation) uint64 {
	if g == nil {
		return 0
	}
	return g.N
}

// judge evaluates the rules for c routed by p.
func (d *Dispatcher) judge(c *Call, p Prepared) policy.Decision {
	if p.Rules == nil {
		return policy.Decision{Action: policy.ActionAllow}
	}
	vars := c.Vars
	vars.Downstream = &policy.Downstream{ID: p.Tool.Downstream, Tool: p.Tool.Original}
	return p.Rules.Evaluate(&policy.Input{Vars: vars})
}

// dispatch sends the one tools/call (after the 2025 handshake for a downstream without
// 2026-07-28) and reads its terminal answer. The downstream id is the authorization's seq.
func (d *Dispatcher) dispatch(ctx context.Context, ds *Downstream, t *Tool, c *Call, seq uint64) (*mcp.Message, []byte, error) {
	id := strconv.FormatUint(seq, 10)
	params := map[string]any{"name": t.Original}
	if len(c.Arguments) > 0 {
		params["arguments"] = json.RawMessage(c.Arguments)
	}
	meta := forwardMeta(c, t)
	version, session := t.Version, ""
	if version == string(mcp.V20260728) {
		for k, v := range meta2026(nil) {
			meta[k] = v
		}
	} else {
		// A 2025 server keeps its state in a session the initialize opens: this invocation's own,
		// deleted once after the call (one bounded DELETE, which cannot change the result).
		v, s, err := ds.initialize(ctx, &budget{left: d.resultBytes})
		if err != nil {
			return nil, nil, asUncertain(err) // initialize deleted its session itself
		}
		version, session = v, s
		if session != "" {
			defer d.cleanupSession(ds, session, version) // once the call's answer is read
		}
	}
	params["_meta"] = meta
	resp, err := ds.post(ctx, rpcRequest{version: version, method: mcp.MethodToolsCall, name: t.Original, session: session,
		body: requestBody(id, mcp.MethodToolsCall, params)}, id, d.resultBytes)
	if resp != nil && resp.session != "" && resp.session != session {
		d.cleanupSession(ds, resp.session, version)
	}
	if err != nil {
		return nil, nil, asUncertain(err)
	}
	if rt, _ := mcp.StringMember(resp.msg.Result, "resultType"); resp.msg.Kind == mcp.KindResponse && rt != "" && rt != "complete" {
		return nil, nil, uncertain("input_required", "the downstream asked for input (resultType %s), which the federation cannot give", clip(rt))
	}
	return resp.msg, resp.body, nil
}

// asUncertain makes any failure after the request started an uncertain one.
func asUncertain(err error) error {
	var ue *uncertainError
	if errors.As(err, &ue) {
		return err
	}
	return uncertain("transport", "%v", err)
}

// cleanupDeadline bounds the one cleanup DELETE.
const cleanupDeadline = 5 * time.Second

// cleanupSession sends the invocation's one cleanup DELETE in the background (shutdown waits for
// it; its failure is logged, never the call's answer).
func (d *Dispatcher) cleanupSession(ds *Downstream, session, version string) {
	d.cleanup.Add(1)
	go func() {
		defer d.cleanup.Done()
		ctx, cancel := context.WithTimeout(d.base, min(cleanupDeadline, ds.Timeout))
		defer cancel()
		if err := ds.deleteSession(ctx, session, version); err != nil {
			d.log.Debug("federation: session cleanup", "downstream", ds.ID, "err", err)
			d.metrics.cleanup(ds.ID, false)
			return
		}
		d.metrics.cleanup(ds.ID, true)
	}()
}

// HopsKey is the _meta member the federation appends its hop to: an array, one entry per
// federation the call passed, oldest first; never rewritten, only appended to.
const HopsKey = "io.mcpintercept/hops"

// Hop is one entry of the hop trail (the draft's Hop Tracing: the intermediary's name, its mode,
// its version and a timestamp, appended, never overwritten): who forwarded the call, under which
// name, to which downstream, for which caller — the identity this hop established from the
// client's own side (its address, and the iss and sub of a verified token). For the next hop the
// trail is information, never authority: what a federation reads as its client is always the
// connection it accepted.
type Hop struct {
	By         string `json:"by"`
	Mode       string `json:"mode"`
	Version    string `json:"version"`
	Time       string `json:"time"`
	Name       string `json:"name"`
	Downstream string `json:"downstream"`
	Client     string `json:"client"`
	Iss        string `json:"iss,omitempty"`
	Sub        string `json:"sub,omitempty"`
}

// forwardMeta is the _meta the downstream gets: the client's members, progressToken left out
// (progress is not relayed), the hop trail with this hop appended.
func forwardMeta(c *Call, t *Tool) map[string]any {
	out := map[string]any{}
	var hops []json.RawMessage
	if len(c.Meta) > 0 && c.Meta[0] == '{' {
		var in map[string]json.RawMessage
		if json.Unmarshal(c.Meta, &in) == nil {
			for k, v := range in {
				switch {
				case k == "progressToken", strings.HasPrefix(k, "io.modelcontextprotocol/"):
					// Progress is not relayed; the protocol members are the federation's own
					// (it is the downstream's client), set for the downstream's version.
				case k == HopsKey:
					_ = json.Unmarshal(v, &hops) // not an array: dropped and restarted
				default:
					out[k] = v
				}
			}
		}
	}
	hop, _ := json.Marshal(Hop{By: mcp.Intermediary, Mode: "Federation", Version: Version,
		Time: time.Now().UTC().Format("2006-01-02T15:04:05.000Z07:00"), Name: c.Name, Downstream: t.Downstream, Client: c.Client, Iss: c.Caller.Iss, Sub: c.Caller.Sub})
	out[HopsKey] = append(hops, hop)
	return out
}

// relay is the client's answer: the downstream's result or error member under the client's id.
func relay(id json.RawMessage, member string, v []byte) []byte {
	var b bytes.Buffer
	b.Grow(len(v) + len(id) + 32)
	b.WriteString(`{"jsonrpc":"2.0","id":`)
	b.Write(id)
	b.WriteString(`,"` + member + `":`)
	b.Write(v)
	b.WriteString("}")
	return b.Bytes()
}

// errorMember is the raw error object of m.
func errorMember(m *mcp.Message, raw []byte) []byte {
	if v, ok := mcp.Member(m.Raw, "error"); ok {
		return v
	}
	b, _ := json.Marshal(m.Error)
	return b
}

func hostOf(u string) string {
	x, err := url.Parse(u)
	if err != nil {
		return ""
	}
	return x.Host
}

// traceparentIn is _meta.traceparent when valid.
func traceparentIn(meta json.RawMessage) string {
	if len(meta) == 0 || meta[0] != '{' {
		return ""
	}
	tp, ok := mcp.StringMember(meta, "traceparent")
	if !ok || !mcp.ValidTraceparent(tp) {
		return ""
	}
	return tp
}

type traceKey struct{}

func withTraceparent(ctx context.Context, tp string) context.Context {
	if tp == "" {
		return ctx
	}
	return context.WithValue(ctx, traceKey{}, tp)
}

func traceparentOf(ctx context.Context) string {
	s, _ := ctx.Value(traceKey{}).(string)
	return s
}

// startSpan begins the call's span (nil when tracing is off), the client's _meta trace context
// its parent.
func (d *Dispatcher) startSpan(c *Call, p Prepared, rec *audit.Record) *tracing.Span {
	if d.trace == nil {
		return nil
	}
	call := tracing.Call{Method: mcp.MethodToolsCall, Tool: c.Name, RequestID: mcp.Unquote(c.ID), ClientAddress: c.Client,
		Direction: "client_to_server", Route: "federation", ProtocolVersion: string(mcp.V20260728)}
	if p.Tool != nil {
		call.ServerAddress = p.Tool.Downstream
	}
	ts, _ := mcp.StringMember(c.Meta, "tracestate")
	return d.trace.Start(tracing.Parent{Traceparent: rec.Traceparent, Tracestate: ts}, tracing.KindClient, call, time.Now())
}

// isToolError reports a result with isError: true.
func isToolError(result []byte) bool {
	v, ok := mcp.Member(result, "isError")
	return ok && string(v) == "true"
}
