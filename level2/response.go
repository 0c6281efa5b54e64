package level2

import (
	"context"
	"fmt"
	"time"

	"mcpintercept/exchange"
	"mcpintercept/mcp"
	"mcpintercept/policy"
	"mcpintercept/tracing"
)

func (g *stage) ResponseBody(_ context.Context, x *exchange.Exchange) exchange.Result {
	s := g.c
	st := stateOf(x)
	if st == nil {
		return exchange.Continue
	}
	body := x.ResponseBody()
	encoded := false
	if ce, ok := x.Resp.Get("Content-Encoding"); ok && !isIdentity(ce) {
		dec, err := DecodeBody(ce, body, s.maxBody())
		if err != nil {
			return refuseResponse(s, x, st, "response body does not decode as "+oneLine(ce)+": "+decodeProblem(err))
		}
		body, encoded = dec, true
	}
	ctv, _ := contentTypes(x.Resp)
	if enc := pythonEncoding(body); enc != "" {
		return refuseResponse(s, x, st, "response body in "+enc+" cannot be inspected (JSON-RPC bodies are UTF-8)")
	}
	if !ParseContentType(ctv).JSON && !namesJSON(ctv) && !looksJSON(body) {
		return exchange.Continue // not JSON by its type or its bytes: no client reads it as JSON-RPC
	}
	if blank(body) {
		// An empty answer (202 to a notification or a legacy POST, however typed) carries no
		// message: it passes as it came.
		return exchange.Continue
	}
	msgs, batch, err := mcp.Decode(trimLenient(body), mcp.DecodeOptions{MaxSize: int(s.maxBody()), AllowBatch: true})
	if err != nil {
		// The strict decoder refused what a lenient client would read (a duplicate key, a lone
		// surrogate): forwarding it would let the server past every response rule.
		return refuseResponse(s, x, st, "response refused: "+decodeProblem(err))
	}
	out, changed := responses(s, context.Background(), x, st, msgs, false)
	if changed {
		kept := compact(out)
		switch {
		case len(kept) == 0:
			// Every message was a server request policy blocks (dropped, the server answered):
			// the client's requests of this exchange get an error naming the appliance instead
			// of an answer the server never gave.
			x.SetResponseBody(unanswered(s, st, msgs))
		case batch:
			x.SetResponseBody(joinBatch(kept))
		default:
			x.SetResponseBody(kept[0])
		}
		if encoded {
			x.DelResponseHeader("Content-Encoding")
		}
	}
	return exchange.Continue
}

// responses records and judges server→client messages; it returns the messages' bytes, changed
// where policy replaced a response with an error, filtered a list, or redacted something. In a
// stream, a nil entry is a message to drop (a blocked server→client request, answered to the
// server on the client's behalf).
func responses(s *conn, ctx context.Context, x *exchange.Exchange, st *xstate, msgs []*mcp.Message, stream bool) ([][]byte, bool) {
	out := make([][]byte, len(msgs))
	changed := false
	for i, m := range msgs {
		out[i] = m.Raw
		switch m.Kind {
		case mcp.KindResponse, mcp.KindError:
			key := idKey(m)
			req := st.byID[key]
			if req != nil && st.session != "" {
				s.f.Sessions.TakePending(s.owner, st.session, key) // answered here
			}
			if req == nil {
				// Not answering a request of this exchange: one of the session's requests made on
				// another connection (the 2024-11-05 GET stream, a resumed stream), or a response
				// to nothing this client asked. A client matches a response to any request it
				// has outstanding, so one Level 2 cannot pair with its request is never passed
				// on: it would skip that request's response rules (list filtering, redaction).
				r := newRecord(s, x, st, m, ServerToClient)
				st.messages++
				defer s.emit(r)
				p, ok := s.f.Sessions.TakePending(s.owner, st.session, key)
				if !ok && len(m.ID) > 0 {
					r.Decision, r.Rule = policy.ActionDeny, "level2"
					r.Reason = "response dropped: it answers no outstanding request of this client"
					out[i], changed = nil, true
					continue
				}
				r.Method, r.Name, r.cursor = p.Method, p.Name, p.Cursor
				if p.span != nil {
					r.span, r.TraceID, r.SpanID = p.span, p.span.sp.TraceID(), p.span.sp.SpanID()
				}
				req = r
			}
			if req.span != nil {
				defer endResponseSpan(req, m) // once policy, surface control and redaction had their say
			}
			if o, bad := refuseResultMembers(s, m, req); bad {
				out[i], changed = o, true // judged by its request's method (result_members.go)
				continue
			}
			if st.initialize && m.Kind == mcp.KindResponse {
				if v := resultString(m.Result, "protocolVersion"); v != "" {
					st.version = v
					s.f.Sessions.SetVersion(s.owner, st.session, v)
				}
			}
			d := evaluate(s, x, st, m, req, ServerToClient, req, nil)
			if m.Kind == mcp.KindError && m.Error != nil {
				// The record gets the message as the client sees it: redacted first.
				req.Err = fmt.Sprintf("server error %d: %s", m.Error.Code, oneLine(redactText(m.Error.Message, d.Redactions)))
			}
			if d.Action != policy.ActionAllow && m.Kind == mcp.KindResponse {
				// Policy on a result: the client gets an error naming the appliance instead,
				// never a made-up result.
				out[i] = errorBody(m.ID, CodeDenied, "result withheld by "+Intermediary+" policy", d.Rule, d.Reason, 0)
				changed = true
				req.Decision, req.Rule, req.Reason = d.Action, d.Rule, "result withheld: "+d.Reason
				auditOutcome(s, req, "denied", 0, req.Reason)
				continue
			}
			if m.Kind == mcp.KindError && m.Error != nil {
				auditOutcome(s, req, "error", m.Error.Code, "")
			} else {
				auditOutcome(s, req, "result", 0, "")
			}
			if m.Kind != mcp.KindResponse {
				if o, ok := errorElicitations(s, x, st, m, req); ok {
					out[i], changed = o, true // a URL elicitation policy blocks (elicit_error.go)
					continue
				}
				if o, ok := redact(s, out[i], d, "error", req); ok {
					out[i], changed = o, true
				}
				continue
			}
			if o, ok := surface(s, x, st, m, req); ok {
				out[i], changed = o, true
			}
			if o, ok := redact(s, out[i], d, "result", req); ok {
				out[i], changed = o, true
			}
		default:
			// A server→client request (sampling, elicitation, roots, ping) or notification.
			r := newRecord(s, x, st, m, ServerToClient)
			st.messages++
			if m.Kind == mcp.KindNotification && m.Method == "notifications/tools/list_changed" {
				s.f.Sessions.toolSchemas().forget(st.schemaKey())
			}
			if m.Kind == mcp.KindNotification && s.f.Tools != nil && listChanged[m.Method] {
				// The next list is judged afresh (pins and quarantines stay).
				s.f.Tools.Forget(st.tools)
			}
			var extra func(*policy.Message)
			kind := ""
			if m.Kind == mcp.KindRequest {
				tool, ambiguous := streamTool(s, x, st)
				st.unknownTool = ambiguous
				extra = serverRequestInput(m.Method, m.Params, tool)
				if serverRequestKinds[m.Method] != "" {
					kind = kindOf(m.Method, m.Params)
					if tool != "" {
						r.Name = mcp.RedactURI(tool)
					}
				}
			}
			var sp *openSpan
			if m.Kind == mcp.KindRequest && s.f.Tracer != nil {
				sp = startSpan(s, st, r, m, ServerToClient, traceParent(m, func() tracing.Parent { return exchangeParent(x, st) }), r.Time)
			}
			d := evaluate(s, x, st, m, r, ServerToClient, nil, extra)
			st.unknownTool = false
			d = inCall(s, x, st, m, d) // a redact (or deny) rule on the call covers its stream
			if d.Action == policy.ActionAllow && m.Kind == mcp.KindRequest {
				if err := authorizeServerRequest(s, ctx, x, st, m, r); err != nil {
					d = policy.Decision{Action: policy.ActionDeny, Rule: "audit", Reason: "audit unavailable: " + oneLine(err.Error())}
				}
			}
			r.Decision, r.Rule, r.Reason = d.Action, d.Rule, d.Reason
			if kind != "" {
				r.Reason = kind + " request from the server: " + r.Reason
			}
			if sp != nil {
				if d.Action != policy.ActionAllow {
					sp.end(r, CodeDenied, 0, false, time.Now()) // dropped: the server got the appliance's error
				} else if len(m.ID) > 0 {
					s.spans.add(idKey(m), sp) // ended by the client's answer, or with the flow
				}
			}
			if d.Action != policy.ActionAllow {
				// In a stream, a JSON body or a batch alike: the client never gets a blocked
				// server message.
				out[i], changed = nil, true
				if m.Kind == mcp.KindRequest {
					if d.Rule != "audit" {
						auditServerDenial(s, x, st, m, r)
					}
					r.Reason += "; dropped, the server was answered with JSON-RPC error " + fmt.Sprint(CodeDenied)
					answerServer(s, ctx, x, st, m, r, d)
					continue
				}
				r.Reason += "; dropped"
			} else if o, ok := redact(s, out[i], d, "params", r); ok {
				out[i], changed = o, true
			}
			s.emit(r)
		}
	}
	return out, changed
}

// compact returns the non-nil entries of out (nil: a message dropped).
func compact(out [][]byte) [][]byte {
	kept := make([][]byte, 0, len(out))
	for _, o := range out {
		if o != nil {
			kept = append(kept, o)
		}
	}
	return kept
}
