package level2

// The session steps of both sides: what the appliance keeps of a session across its connections.

import (
	"time"

	"mcpintercept/exchange"
	"mcpintercept/mcp"
	"mcpintercept/policy"
)

// rememberRequests keeps, in the appliance's session memory, what a response on another
// connection will need: the 2024-11-05 client's info, and every request still to be answered.
func rememberRequests(s *conn, x *exchange.Exchange, st *xstate, b *requestBody) (exchange.Result, bool) {
	if st.legacy && st.initialize && st.session != "" {
		// 2024-11-05: the session is the endpoint URL's, known now; no response will carry an
		// Mcp-Session-Id, so the client's info is kept for its GET stream here.
		s.f.Sessions.SetClientInfo(s.owner, st.session, st.clientInfo)
	}
	if st.session != "" {
		// The answer may come on another connection: the 2024-11-05 GET stream, or a stream of
		// the same session (a client matches a response to any of its outstanding requests).
		for i, r := range st.reqs {
			if r.Kind == mcp.KindRequest.String() {
				p := Pending{Method: r.Method, Name: r.Name, ID: r.ID, Cursor: r.cursor, span: r.span}
				if i < len(b.msgs) {
					// Its progress notifications may come on any stream (inCall).
					p.Progress = progressKey(b.msgs[i])
				}
				s.f.Sessions.AddPending(s.owner, st.session, r.key, p)
				r.pended = true
			}
		}
	}
	return exchange.Continue, false
}

// openSession is the head step that finds the exchange's session (Mcp-Session-Id, or the
// 2024-11-05 endpoint the client POSTs to) and its protocol version.
func openSession(s *conn, x *exchange.Exchange, st *xstate) (exchange.Result, bool) {
	h := x.Req
	if h.Count("Mcp-Session-Id") > 1 {
		// Servers disagree on which of two session ids counts (Go: the first; Node: both,
		// joined): the session, and so the client's identity, would be another for each.
		return refuseUnreadable(s, x, st, 400, "Mcp-Session-Id header repeated"), true
	}
	if v, ok := h.Get("Mcp-Session-Id"); ok && v != "" {
		st.session = hashKey(v)
	} else if s.f.Sessions.KnownEndpoint(s.owner, h.Target) || legacySession(h.Target) != "" {
		// 2024-11-05: a POST to an endpoint a GET stream announced (whatever the server calls
		// its session parameter: sessionId, the Go SDK's sessionid, …).
		st.session, st.legacy = legacyKey(h.Target), h.Method == "POST"
	}
	if v, ok := h.Get("MCP-Protocol-Version"); ok {
		st.version = v
	} else if v, _ := s.f.Sessions.Lookup(s.owner, st.session); v != "" {
		st.version = v
	}
	return exchange.Continue, false
}

// responseSession is the response head step that refuses a response naming two sessions, and
// takes the session an initialize response opens (with the client info of its request).
func responseSession(s *conn, x *exchange.Exchange, st *xstate) (exchange.Result, bool) {
	h := x.Resp
	if h.Count("Mcp-Session-Id") > 1 {
		// A client would take the first (Go) or both joined (fetch) as its session: Level 2
		// could not tell which session, and so which client, the stream's requests go to.
		s.emit(&Record{Time: time.Now(), Direction: ServerToClient, Decision: policy.ActionDeny, Rule: "level2",
			HTTPMethod: x.Req.Method, Path: st.path, Reason: "response refused: Mcp-Session-Id header repeated"})
		x.Abort("level2: Mcp-Session-Id header repeated in the response")
		return exchange.Stop, true
	}
	if st.initialize {
		if v, ok := h.Get("Mcp-Session-Id"); ok && v != "" {
			st.session = hashKey(v)
			s.f.Sessions.SetClientInfo(s.owner, st.session, st.clientInfo)
		}
	}
	return exchange.Continue, false
}

// learnVersion is the response step that takes the protocol version an initialize result
// settles, for the exchange and its session.
func learnVersion(s *conn, x *exchange.Exchange, st *xstate, sm *serverMessage) bool {
	if st.initialize && sm.m.Kind == mcp.KindResponse {
		if v := resultString(sm.m.Result, "protocolVersion"); v != "" {
			st.version = v
			s.f.Sessions.SetVersion(s.owner, st.session, v)
		}
	}
	return false
}
