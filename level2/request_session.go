package level2

import (
	"mcpintercept/exchange"
	"mcpintercept/mcp"
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
