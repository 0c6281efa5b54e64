package level2

import (
	"mcpintercept/exchange"
	"mcpintercept/policy"
)

// pairResponse is the response step that finds the request a response or error answers: one of
// this exchange's, else one the session remembers from another connection.
func pairResponse(s *conn, x *exchange.Exchange, st *xstate, sm *serverMessage) bool {
	m := sm.m
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
		s.resp.later = append(s.resp.later, later{emit: r})
		p, ok := s.f.Sessions.TakePending(s.owner, st.session, key)
		if !ok && len(m.ID) > 0 {
			r.Decision, r.Rule = policy.ActionDeny, "level2"
			r.Reason = "response dropped: it answers no outstanding request of this client"
			sm.out, sm.changed = nil, true
			return true
		}
		r.Method, r.Name, r.cursor = p.Method, p.Name, p.Cursor
		if p.span != nil {
			r.span, r.TraceID, r.SpanID = p.span, p.span.sp.TraceID(), p.span.sp.SpanID()
		}
		req = r
	}
	if req.span != nil {
		s.resp.later = append(s.resp.later, later{span: req, m: m})
	}
	sm.rec = req
	return false
}
