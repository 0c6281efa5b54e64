package level2

import (
	"mcpintercept/exchange"
	"mcpintercept/mcp"
)

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
