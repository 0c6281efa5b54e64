package level2

import (
	"mcpintercept/exchange"
	"mcpintercept/mcp"
)

// correlateRequest starts the record of every message, indexes the requests by id (for their
// responses) and takes the version and client info the messages carry.
func correlateRequest(s *conn, x *exchange.Exchange, st *xstate, b *requestBody) (exchange.Result, bool) {
	for _, m := range b.msgs {
		r := newRecord(s, x, st, m, ClientToServer)
		st.reqs = append(st.reqs, r)
		st.messages++
		if m.Kind == mcp.KindRequest {
			if st.byID == nil {
				st.byID = make(map[string]*Record, len(b.msgs))
			}
			k := idKey(m)
			if st.byID[k] != nil {
				// Two requests with one id: their responses could not be told apart, so a result
				// could be judged as the other request's.
				return refuseUnreadable(s, x, st, 400, "JSON-RPC body refused: duplicate request id "+r.ID+" in a batch"), true
			}
			st.byID[k] = r
		}
		if _, ok := m.Param("cursor"); ok {
			r.cursor = true
		}
		ci := clientInfoOf(m) // decoded once: the exchange's, the flow's
		if m.Method == mcp.MethodInitialize {
			st.initialize = true
			st.clientInfo = ci
		}
		if pv := m.ProtocolVersion(); pv != "" && m.Method != mcp.MethodInitialize {
			st.version = pv
		}
		if st.clientInfo == nil && m.Kind == mcp.KindRequest {
			// 2026-07-28 carries clientInfo in each request's _meta: keep it for what the
			// server asks of the client in this exchange (input requests, withheld capabilities).
			st.clientInfo = ci
		}
		s.ident.note(ci)
	}
	for _, r := range st.reqs {
		if r.Version == "" {
			r.Version = st.version
		}
	}
	return exchange.Continue, false
}
