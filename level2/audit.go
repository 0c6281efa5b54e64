package level2

import (
	"context"
	"encoding/json"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	"mcpintercept/audit"
	"mcpintercept/exchange"
	"mcpintercept/mcp"
	"mcpintercept/policy"
)

// CodeAuditUnavailable: the route is audited and the call's authorization record could not be
// made durable (disk full, I/O error, a write slower than audit.timeout). Nothing was forwarded.
const CodeAuditUnavailable = mcp.CodeAuditUnavailable

// Auditor is where an audited route's durable records go (the flow's audit writer, auditstage.Writer).
// Append returns once the record is durable, with an error only when the route fails closed and
// it is not; Outcome writes how a call ended, in the background; Arguments says whether records
// carry the redacted arguments besides their hash.
type Auditor interface {
	Append(ctx context.Context, r *audit.Record) (audit.Receipt, error)
	Outcome(r *audit.Record)
	Arguments() bool
}

// auditedMethods are the client→server calls that get an authorization record when allowed.
// Every denial gets one too, whatever its method, and so does every server→client request.
var auditedMethods = map[string]bool{mcp.MethodToolsCall: true, mcp.MethodPromptsGet: true, mcp.MethodResourcesRead: true}

// stageAudit is one connection's audit state in the Level 2 stage.
type stageAudit struct {
	n  atomic.Uint64 // exchanges numbered per connection, as the records name them
	mu sync.Mutex
	// server maps the id key of a server→client request forwarded to the client to its
	// authorization, until the client's response (on a later POST of this connection) ends it.
	server map[string]*audit.Record
}

// authorize is the request step that makes each allowed call's authorization record durable
// before anything is forwarded. A record that cannot be made durable refuses the whole body
// (-31004): a batch is one HTTP message, and forwarding part of it would change what was sent.
func authorize(s *conn, x *exchange.Exchange, st *xstate, b *requestBody) (exchange.Result, bool) {
	a := s.f.Audit
	if a == nil {
		return exchange.Continue, false
	}
	xn := s.audit.n.Add(1)
	for i, m := range b.msgs {
		if m.Kind == mcp.KindResponse || m.Kind == mcp.KindError {
			endServerRequest(s, m)
			continue
		}
		if m.Kind != mcp.KindRequest || !auditedMethods[m.Method] {
			continue
		}
		r := st.reqs[i]
		ar := auditRecord(s, x, st, m, r, xn, ClientToServer)
		ar.Kind, ar.Decision = audit.KindAuthorization, auditDecision(b.decs[i].Action)
		if a.Arguments() {
			ar.Arguments = forwardedArguments(m, b.out, i, s.max)
		}
		rc, err := a.Append(b.ctx, ar)
		if err != nil {
			return refuseAudit(s, x, st, b, r, err), true
		}
		if rc.Seq != 0 {
			r.auditSeq, r.audit = rc.Seq, ar
		}
	}
	return exchange.Continue, false
}

// refuseAudit answers the body with -31004; the calls of the same body already authorized end
// as denied, so that none waits for an outcome that cannot come.
func refuseAudit(s *conn, x *exchange.Exchange, st *xstate, b *requestBody, failed *Record, err error) exchange.Result {
	why := "audit unavailable: " + oneLine(err.Error())
	for _, r := range st.reqs {
		if r.auditSeq != 0 {
			auditOutcome(s, r, "denied", 0, why)
		}
	}
	failed.Decision, failed.Rule, failed.Reason = policy.ActionDeny, "audit", why
	d := policy.Decision{Action: policy.ActionDeny, Rule: "audit", Reason: why}
	return refuseWith(s, x, st, b.msgs, b.batch, failed, d, CodeAuditUnavailable, "audit unavailable at "+Intermediary)
}

// auditDenials makes a record of every client→server message the stage refused, durable before
// the refusal goes out. A refusal because the store itself failed is not recorded again.
func auditDenials(s *conn, x *exchange.Exchange, st *xstate) {
	a := s.f.Audit
	if a == nil {
		return
	}
	xn := s.audit.n.Add(1)
	for _, r := range st.reqs {
		if r.Decision == policy.ActionAllow || r.Rule == "audit" {
			continue
		}
		ar := auditRecord(s, x, st, nil, r, xn, ClientToServer)
		ar.Kind, ar.Decision, ar.Outcome, ar.Reason = audit.KindAuthorization, auditDecision(r.Decision), "denied", r.Reason
		// Best effort past this point: the request is refused whatever the store says.
		_, _ = a.Append(context.Background(), ar)
	}
}

// authorizeServerRequest makes the authorization of a server→client request durable before the
// client gets it; an error (fail closed) means the request must be dropped as denied.
func authorizeServerRequest(s *conn, ctx context.Context, x *exchange.Exchange, st *xstate, m *mcp.Message, r *Record) error {
	a := s.f.Audit
	if a == nil {
		return nil
	}
	ar := auditRecord(s, x, st, m, r, s.audit.n.Load(), ServerToClient)
	ar.Kind, ar.Decision = audit.KindAuthorization, audit.Allow
	rc, err := a.Append(ctx, ar)
	if err != nil || rc.Seq == 0 {
		return err
	}
	ar.Seq = rc.Seq
	s.audit.mu.Lock()
	if s.audit.server == nil {
		s.audit.server = map[string]*audit.Record{}
	}
	s.audit.server[r.key] = ar
	s.audit.mu.Unlock()
	return nil
}

// auditServerDenial records a server→client request the stage dropped.
func auditServerDenial(s *conn, x *exchange.Exchange, st *xstate, m *mcp.Message, r *Record) {
	a := s.f.Audit
	if a == nil {
		return
	}
	ar := auditRecord(s, x, st, m, r, s.audit.n.Load(), ServerToClient)
	ar.Kind, ar.Decision, ar.Outcome, ar.Reason = audit.KindAuthorization, auditDecision(r.Decision), "denied", r.Reason
	_, _ = a.Append(context.Background(), ar)
}

// endServerRequest writes the outcome of a server→client request the client now answers.
func endServerRequest(s *conn, m *mcp.Message) {
	if s.f.Audit == nil || len(m.ID) == 0 {
		return
	}
	key := idKey(m)
	s.audit.mu.Lock()
	ar := s.audit.server[key]
	delete(s.audit.server, key)
	s.audit.mu.Unlock()
	if ar == nil {
		return
	}
	o := audit.OutcomeOf(ar, ar.Seq, "result", "")
	if m.Kind == mcp.KindError && m.Error != nil {
		o.Outcome, o.ErrorCode = "error", m.Error.Code
	}
	s.f.Audit.Outcome(o)
}

// auditOutcome ends r's authorization (once) with outcome: "result", "error" (code), "denied"
// or "uncertain" (reason says why).
func auditOutcome(s *conn, r *Record, outcome string, code int64, reason string) {
	if r.auditSeq == 0 || s.f.Audit == nil {
		return
	}
	o := audit.OutcomeOf(r.audit, r.auditSeq, outcome, reason)
	o.ErrorCode = code
	r.auditSeq, r.audit = 0, nil
	s.f.Audit.Outcome(o)
}

// auditUnended gives the calls of a finished exchange that got no answer here an uncertain
// outcome when the exchange failed after dispatch (reset, timeout, an unreadable or oversized
// response, an error status). An exchange that ended well but carried no answer (202, an answer
// on another stream) leaves them open: the engine ends them when the flow ends.
func auditUnended(s *conn, x *exchange.Exchange, st *xstate) {
	for _, r := range st.reqs {
		if r.auditSeq == 0 {
			continue
		}
		why := r.Err
		if why == "" {
			why = x.Err
		}
		if why == "" {
			why = x.Uninspected
		}
		switch {
		case why != "":
			auditOutcome(s, r, "uncertain", 0, uncertainReason(why))
		case x.Status >= 300:
			auditOutcome(s, r, "uncertain", 0, "http status "+strconv.Itoa(x.Status))
		}
	}
}

// uncertainReason names why a call's end is not known: a short class, then the detail.
func uncertainReason(why string) string {
	l := strings.ToLower(why)
	class := "error"
	switch {
	case strings.Contains(l, "timeout") || strings.Contains(l, "deadline"):
		class = "timeout"
	case strings.Contains(l, "reset") || strings.Contains(l, "eof") || strings.Contains(l, "broken pipe") || strings.Contains(l, "closed"):
		class = "reset"
	case strings.Contains(l, "max_body") || strings.Contains(l, "too large") || strings.Contains(l, "oversized"):
		class = "oversized"
	case strings.Contains(l, "refused") || strings.Contains(l, "decode") || strings.Contains(l, "json"):
		class = "malformed"
	}
	return class + ": " + oneLine(why)
}

// auditRecord is the record of m (nil: from r alone) as Level 2 judged it; the engine's writer
// fills in the flow's fields (client, identity, destination, server).
func auditRecord(s *conn, x *exchange.Exchange, st *xstate, m *mcp.Message, r *Record, xn uint64, dir string) *audit.Record {
	ar := &audit.Record{Exchange: xn, Level: 2, Method: r.Method, Direction: dir, ID: r.ID,
		Tool: r.Name, Rule: r.Rule, Iss: r.Caller.Iss, Sub: r.Caller.Sub, TraceID: r.TraceID, SpanID: r.SpanID}
	if ar.Method == "" {
		ar.Method = r.HTTPMethod + " " + r.Path
	}
	if tp, ok := x.Req.Get("traceparent"); ok && mcp.ValidTraceparent(tp) {
		ar.Traceparent = tp
	}
	if m == nil {
		return ar
	}
	if meta, ok := m.Param("_meta"); ok {
		if tp, ok := mcp.StringMember(meta, "traceparent"); ok && mcp.ValidTraceparent(tp) {
			ar.Traceparent = tp
		}
	}
	if args, ok := m.Param("arguments"); ok {
		if h, err := audit.HashArguments(args); err == nil {
			ar.ArgsHash = h
		}
	}
	return ar
}

// forwardedArguments are message i's arguments as forwarded: after redaction when the transform
// step rewrote the message.
func forwardedArguments(m *mcp.Message, out [][]byte, i int, maxBody int64) json.RawMessage {
	if i < len(out) && out[i] != nil && string(out[i]) != string(m.Raw) {
		if after, err := mcp.DecodeMessage(out[i], mcp.DecodeOptions{MaxSize: int(maxBody)}); err == nil {
			m = after
		}
	}
	args, ok := m.Param("arguments")
	if !ok {
		return nil
	}
	return json.RawMessage(args)
}

func auditDecision(a policy.Action) audit.Decision {
	switch a {
	case policy.ActionAllow:
		return audit.Allow
	case policy.ActionRateLimited:
		return audit.RateLimited
	}
	return audit.Deny
}

// auditAnswer is the response step that ends the authorization of the call a response or error
// answers (allowed: a result withheld ended it as denied).
func auditAnswer(s *conn, x *exchange.Exchange, st *xstate, sm *serverMessage) bool {
	if m := sm.m; m.Kind == mcp.KindError && m.Error != nil {
		auditOutcome(s, sm.rec, "error", m.Error.Code, "")
	} else {
		auditOutcome(s, sm.rec, "result", 0, "")
	}
	return false
}

// auditServerRequest is the response step that makes the authorization of an allowed
// server→client request durable before the client gets it; one that cannot be is denied.
func auditServerRequest(s *conn, x *exchange.Exchange, st *xstate, sm *serverMessage) bool {
	if sm.d.Action == policy.ActionAllow && sm.m.Kind == mcp.KindRequest {
		if err := authorizeServerRequest(s, sm.ctx, x, st, sm.m, sm.rec); err != nil {
			sm.d = policy.Decision{Action: policy.ActionDeny, Rule: "audit", Reason: "audit unavailable: " + oneLine(err.Error())}
		}
	}
	return false
}
