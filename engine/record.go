package engine

import (
	"mcpintercept/exchange"
	"mcpintercept/mcp"
	"mcpintercept/policy"
	"mcpintercept/stage"
	"mcpintercept/telemetry"
)

// Every record of the engine goes through its telemetry.Recorder, the one writer: a flow's
// record at its exit (outcome.go), an exchange's in recordStage.Done, a JSON-RPC message's through
// stage.Conn.Records (Level 2 writes them). The recorder counts the metrics that go with each kind and hands the
// record to its sinks (the flow log; audit and tracing plug in there).

// recorderOf is the recorder opt asks for: its own, or one that writes opt.Flows and counts in
// opt.Metrics.
func recorderOf(opt Options) *telemetry.Recorder {
	if opt.Records != nil {
		return opt.Records
	}
	var sink telemetry.Sink
	if opt.Flows != nil {
		sink = telemetry.SinkFunc(func(_ telemetry.Kind, r telemetry.FlowRecord) { opt.Flows.Write(r) })
	}
	return telemetry.NewRecorder(opt.Metrics, sink)
}

// recordStage writes the record of every exchange of one connection; at Level 2 the Level 2 stage
// writes its per-message records through the same writer (stage.Conn.Records). It runs last, so that its Done sees what
// every stage decided.
type recordStage struct {
	exchange.Base
	f        *flow
	route    *Route
	tls      Disposition
	level    int
	requests atomicInt
	w        telemetry.FlowRecorder // safe for Done and Level 2's records on two goroutines
	// base is the flow's part of every record (flow, client, destination, mechanism, SNI,
	// process), formatted once per connection rather than once per record.
	base telemetry.FlowRecord
}

func (e *Engine) newRecordStage(f *flow, route *Route, tlsMode Disposition) *recordStage {
	return &recordStage{f: f, route: route, tls: tlsMode, level: 1, base: f.record(),
		w: e.rec.ForFlow(f.orig.String(), f.client.Addr().String())}
}

// Done implements exchange.Stage.
func (r *recordStage) Done(x *exchange.Exchange) {
	r.requests.Add(1)
	if r.level >= 2 && stage.Recorded(x) {
		// Level 2 wrote one record per JSON-RPC message of this exchange; only the bytes are
		// left to count.
		r.w.Bytes(x.BytesUp, x.BytesDown)
		return
	}
	rec := r.base
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
	c := policy.CallerFrom(x.Get(policy.CallerKey{}))
	rec.Iss, rec.Sub = c.Iss, c.Sub
	cr := policy.CredentialFrom(x.Get(policy.CredentialKey{}))
	rec.Credential, rec.CredentialSource = cr.Added, cr.Source
	if sp := stage.SpanOf(x); sp != nil {
		rec.TraceID, rec.SpanID = sp.TraceID(), sp.SpanID()
	}
	// The series are bounded jointly by telemetry (the per-flow handle resolves the destination
	// and client once); no per-label first-come cap here, or a flood of made-up destinations
	// would fold configured ones into "other" before the reserve could keep them.
	r.w.Exchange(&rec, x.Duration)
}

func appendReason(rec *telemetry.FlowRecord, s string) {
	if rec.Reason != "" {
		rec.Reason += "; "
	}
	rec.Reason += s
}
