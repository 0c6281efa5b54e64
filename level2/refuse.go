package level2

import (
	"encoding/json"

	"mcpintercept/exchange"
	"mcpintercept/mcp"
	"mcpintercept/policy"
	"mcpintercept/tracing"
)

// refuse answers a denied request with a JSON-RPC error (HTTP 200, or an SSE event when the client
// accepts only a stream), naming the appliance, the rule and the reason. The server never sees it.
func refuse(s *conn, x *exchange.Exchange, st *xstate, msgs []*mcp.Message, batch bool, denied *Record, d policy.Decision) exchange.Result {
	code, msg := CodeDenied, "denied by "+Intermediary+" policy"
	if d.Action == policy.ActionRateLimited {
		code, msg = CodeRateLimited, "rate limited by "+Intermediary+" policy"
	}
	return refuseWith(s, x, st, msgs, batch, denied, d, code, msg)
}

// refuseWith answers like refuse, with the given JSON-RPC code and message.
func refuseWith(s *conn, x *exchange.Exchange, st *xstate, msgs []*mcp.Message, batch bool, denied *Record, d policy.Decision, code int, msg string) exchange.Result {
	for _, r := range st.reqs {
		if r != denied && r.Decision == policy.ActionAllow {
			r.Decision, r.Rule = denied.Decision, denied.Rule
			r.Reason = "batch refused: " + denied.Method + " " + denied.Name + " denied"
		}
	}
	var body []byte
	switch {
	case batch:
		body = batchErrorBody(msgs, code, msg, d.Rule, d.Reason, d.RetryAfter)
	case msgs[0].Kind == mcp.KindRequest:
		body = mcp.DenialBody(msgs[0].ID, code, msg, d.Rule, d.Reason, d.RetryAfter)
	default:
		// A notification or a response has no id to answer: refuse at the HTTP level, still
		// with a JSON-RPC body so that no client reads it as an old server.
		body = mcp.DenialBody(nil, code, msg, d.Rule, d.Reason, d.RetryAfter)
	}
	status := 200
	if st.legacy || (!batch && msgs[0].Kind != mcp.KindRequest) {
		// A 2024-11-05 client reads answers on its GET stream and only the POST's status here:
		// a 200 would leave it waiting for an answer that never comes on the stream.
		status = 403
	}
	hdrs := []exchange.Header{{Name: "Content-Type", Value: "application/json"}}
	if status == 200 && st.acceptSSE && !st.acceptJSON {
		hdrs[0].Value = "text/event-stream"
		body = sseEvent(body)
	}
	if d.RetryAfter > 0 {
		hdrs = append(hdrs, exchange.Header{Name: "Retry-After", Value: retryAfterHeader(d.RetryAfter)})
	}
	st.answered, st.answerCode = true, code
	x.Answer(status, hdrs, body, exchange.Verdict{Decision: exchange.Decision(d.Action), Status: status, Rule: d.Rule, Reason: d.Reason, RetryAfter: d.RetryAfter})
	return exchange.Stop
}

// refuseUnreadable answers a body Level 2 cannot inspect; it is never forwarded uninspected.
func refuseUnreadable(s *conn, x *exchange.Exchange, st *xstate, status int, why string) exchange.Result {
	why = redactTextAll(why, s.rules()) // a decoder's detail may quote a key or value a rule hides
	code := CodeUnreadable
	if status == 413 {
		code = CodeTooLarge
	}
	r := &Record{Time: st.start, Direction: ClientToServer, Decision: policy.ActionDeny, Rule: "level2", Reason: why,
		HTTPMethod: x.Req.Method, Path: st.path, Version: st.version,
		Caller: policy.CallerFrom(x.Get(policy.CallerKey{}))}
	if s.f.Tracer != nil {
		// No message to name: the span is the HTTP request's, its error the refusal's code.
		c := s.f.Trace
		c.HTTPMethod, c.Path, c.ProtocolVersion, c.SessionID = r.HTTPMethod, r.Path, st.version, st.session
		if sp := s.f.Tracer.Start(headerParent(x.Req), tracing.KindClient, c, st.start); sp != nil {
			r.span, r.TraceID, r.SpanID = &openSpan{sp: sp}, sp.TraceID(), sp.SpanID()
		}
	}
	st.reqs = append(st.reqs, r)
	st.messages++
	st.answered, st.answerCode = true, code
	x.Answer(status, []exchange.Header{{Name: "Content-Type", Value: "application/json"}},
		mcp.DenialBody(nil, code, "request refused by "+Intermediary, "level2", why, 0),
		exchange.Verdict{Decision: exchange.Deny, Status: status, Rule: "level2", Reason: why})
	return exchange.Stop
}

// refuseResponse replaces a response body Level 2 cannot read with a JSON-RPC error naming the
// appliance (never the server's bytes uninspected, never a made-up result).
func refuseResponse(s *conn, x *exchange.Exchange, st *xstate, why string) exchange.Result {
	why = redactTextAll(why, s.rules())
	unreadableResponse(s, x, st, why)
	st.respCode = CodeUnreadable
	var id json.RawMessage
	if len(st.reqs) == 1 && st.reqs[0].ID != "" {
		id = json.RawMessage(st.reqs[0].rawID)
	}
	x.SetResponseBody(mcp.DenialBody(id, CodeUnreadable, "response refused by "+Intermediary, "level2", why, 0))
	x.DelResponseHeader("Content-Encoding")
	x.SetResponseHeader("Content-Type", "application/json")
	return exchange.Continue
}

func unreadableResponse(s *conn, x *exchange.Exchange, st *xstate, why string) {
	for _, r := range st.reqs {
		if r.Err == "" {
			r.Err = why
		}
	}
}

// unanswered is the body for a JSON response whose every message was dropped: an error naming the
// appliance for each request of the exchange the body did not answer (a batch when several), or
// nothing when the exchange carried no request.
func unanswered(s *conn, st *xstate, msgs []*mcp.Message) []byte {
	answered := make(map[string]bool, len(msgs))
	for _, m := range msgs {
		if m.Kind == mcp.KindResponse || m.Kind == mcp.KindError {
			answered[idKey(m)] = true
		}
	}
	const why = "the server answered with a server request that policy blocks"
	st.respCode = CodeDenied
	var parts [][]byte
	for _, r := range st.reqs {
		if r.Kind != mcp.KindRequest.String() || answered[r.key] {
			continue
		}
		if r.Err == "" {
			r.Err = why
		}
		parts = append(parts, mcp.DenialBody(r.rawID, CodeDenied, "response refused by "+Intermediary+": "+why, "level2", why, 0))
	}
	switch len(parts) {
	case 0:
		return []byte{}
	case 1:
		return parts[0]
	}
	return joinBatch(parts)
}
