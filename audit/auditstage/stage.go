package auditstage

import (
	"context"
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"

	"mcpintercept/audit"
	"mcpintercept/exchange"
	"mcpintercept/mcp"
	"mcpintercept/policy"
	"mcpintercept/stage"
)

// auditStage is Level 1's audit writer: every request the stages before it let through gets a
// durable authorization record before its first byte goes upstream (RequestHead runs before any
// byte is forwarded), and an outcome record when its response head arrives or the exchange ends
// without one. A request the stages before it refused gets one record, its denial.
//
// Level 1 records the HTTP method and path as the method, and the Mcp-Name header (the client's
// claim: Level 1 reads no body) as the tool. An outcome is "result" for a response status below
// 400 and "error" from 400 on, Reason "http <status>"; "uncertain" when no response head arrived,
// Reason "reset", "timeout", "malformed", "shutdown" or "closed".
type auditStage struct {
	exchange.Base
	fa    *flowAudit
	ctx   context.Context // the flow's: done when the drain deadline cut it
	idled func() bool     // the idle watch closed the flow
	n     atomic.Uint64   // exchange numbers, in the order the stage saw requests
}

// Factory is Level 1's audit stage, after the policy so that it records the decision: an allowed
// request's record is durable before its first byte goes upstream. Level 2 writes its own
// records, per JSON-RPC message, through the same Writer.
func (a *Auditing) Factory() stage.Factory {
	return stage.Factory{Name: Name, Levels: stage.OnlyLevel(1), New: func(c *stage.Conn) exchange.Stage {
		fa := a.flowAudit(c)
		if fa == nil {
			return nil
		}
		return &auditStage{fa: fa, ctx: c.Ctx, idled: c.Idled}
	}}
}

// auditKey keeps an exchange's auditState.
type auditKey struct{}

type auditState struct {
	auth    *audit.Record
	seq     uint64 // the authorization's Seq; 0 when it was not written (fail open)
	ended   bool   // its outcome is written
	refused bool   // refused because the record could not be written
}

// RequestHead implements exchange.Stage.
func (s *auditStage) RequestHead(ctx context.Context, x *exchange.Exchange) exchange.Result {
	st := &auditState{auth: s.authorization(x)}
	x.Set(auditKey{}, st)
	rc, err := s.fa.Append(ctx, st.auth)
	if err != nil {
		st.refused = true
		return refuseUnaudited(x, err)
	}
	st.seq = rc.Seq
	return exchange.Continue
}

// ResponseHead implements exchange.Stage.
func (s *auditStage) ResponseHead(_ context.Context, x *exchange.Exchange) exchange.Result {
	st, _ := x.Get(auditKey{}).(*auditState)
	if st == nil || st.seq == 0 || st.ended {
		return exchange.Continue
	}
	st.ended = true
	outcome := outcomeResult
	if x.Resp.Status >= 400 {
		outcome = outcomeError
	}
	s.fa.Outcome(audit.OutcomeOf(st.auth, st.seq, outcome, "http "+strconv.Itoa(x.Resp.Status)))
	return exchange.Continue
}

// Done implements exchange.Stage.
func (s *auditStage) Done(x *exchange.Exchange) {
	st, _ := x.Get(auditKey{}).(*auditState)
	switch {
	case st == nil:
		s.denial(x)
	case st.refused, st.seq == 0, st.ended:
	default:
		st.ended = true
		s.fa.Outcome(audit.OutcomeOf(st.auth, st.seq, outcomeUncertain, s.uncertainReason(x)))
	}
}

// denial records a request a stage before this one refused (policy, a guard): its authorization
// record is its only one, with Outcome "denied". A head that could not be read is no request and
// gets none.
func (s *auditStage) denial(x *exchange.Exchange) {
	if x.Req == nil || x.Verdict.Decision == "" || x.Verdict.Decision == exchange.Allow {
		return
	}
	r := s.authorization(x)
	r.Decision = audit.Deny
	if x.Verdict.Decision == exchange.RateLimited {
		r.Decision = audit.RateLimited
	}
	if r.Rule == "" {
		r.Rule = s.fa.route // Level 1's own guards refuse in the route's name
	}
	r.Outcome, r.Reason = outcomeDenied, x.Verdict.Reason
	s.fa.Outcome(r)
}

// authorization is the record of a request the stages let through.
func (s *auditStage) authorization(x *exchange.Exchange) *audit.Record {
	r := &audit.Record{Kind: auditAuthorization, Exchange: s.n.Add(1), Direction: "client_to_server",
		Decision: audit.Allow, Rule: x.Verdict.Rule}
	c := policy.CallerFrom(x.Get(policy.CallerKey{}))
	r.Iss, r.Sub = c.Iss, c.Sub
	if info := mcp.InfoOf(x); info != nil {
		r.Method, r.Tool = info.Method+" "+info.Path, info.MCPName
	} else {
		r.Method = x.Req.Method + " " + mcp.PathOf(x.Req.Target)
	}
	if s.fa.base.Server == "" {
		if h, ok := x.Req.Get("Host"); ok {
			r.Server = h
		}
	}
	if tp, ok := x.Req.Get("traceparent"); ok && mcp.ValidTraceparent(tp) {
		r.Traceparent = tp
	}
	if sp := stage.SpanOf(x); sp != nil {
		r.TraceID, r.SpanID = sp.TraceID(), sp.SpanID()
	}
	return r
}

// uncertainReason names why an exchange whose request went upstream ended with no response head.
func (s *auditStage) uncertainReason(x *exchange.Exchange) string {
	switch {
	case s.ctx.Err() != nil:
		return "shutdown"
	case s.idled != nil && s.idled():
		return "timeout"
	case strings.Contains(x.Err, "reset"):
		return "reset"
	case strings.Contains(x.Err, "malformed"):
		return "malformed"
	}
	return "closed"
}

// refuseUnaudited answers a request whose authorization record could not be made durable: HTTP
// 503 with a JSON-RPC error naming the appliance, so that an MCP client shows why; the request is
// never forwarded. The body carries no id: Level 1 reads no body to learn it.
func refuseUnaudited(x *exchange.Exchange, err error) exchange.Result {
	reason := "audit unavailable: " + err.Error()
	x.Answer(http.StatusServiceUnavailable, jsonHeaders, auditErrorBody(reason), exchange.Verdict{
		Decision: exchange.Deny, Status: http.StatusServiceUnavailable, Rule: "audit", Reason: reason})
	return exchange.Stop
}

var jsonHeaders = []exchange.Header{{Name: "Content-Type", Value: "application/json"}}

// auditErrorBody is the JSON-RPC error response of refuseUnaudited.
func auditErrorBody(reason string) []byte {
	type data struct {
		Intermediary string `json:"intermediary"`
		Rule         string `json:"rule"`
		Reason       string `json:"reason"`
	}
	type rpcError struct {
		Code    int    `json:"code"`
		Message string `json:"message"`
		Data    data   `json:"data"`
	}
	b, _ := json.Marshal(struct {
		JSONRPC string   `json:"jsonrpc"`
		ID      *int     `json:"id"`
		Error   rpcError `json:"error"`
	}{"2.0", nil, rpcError{mcp.CodeAuditUnavailable, "audit unavailable", data{mcp.Intermediary, "audit", reason}}})
	return b
}
