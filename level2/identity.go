package level2

import (
	"sync"

	"mcpintercept/mcp"
)

// Who a message goes to comes only from the client's own side (DESIGN: "Identity and authority
// come only from the client's own side"). The client's info is what the client itself sent: its
// initialize, its own requests' _meta. Level 2 keeps it per exchange (the client's request a
// server→client message answers), per session (registry, charged to the client) and per flow
// (this connection), and never takes it from a message in the server→client direction: a server
// that writes a clientInfo into its sampling request names nobody.

// unknownClient is what policy cannot establish when Level 2 cannot tell which client a
// server→client message goes to: a rule reading it fails (on_rule_error), never silently skips.
var unknownClient = []string{"mcp.client_info"}

// flowIdentity is the client info the client sent on this connection. Two different ones (two
// clients sharing one keep-alive connection) make it ambiguous: the flow then names nobody.
type flowIdentity struct {
	mu        sync.Mutex
	info      map[string]any
	ambiguous bool
}

// note records a clientInfo the client sent on this flow.
func (f *flowIdentity) note(info map[string]any) {
	if info == nil {
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	switch {
	case f.ambiguous:
	case f.info != nil && !sameInfo(f.info, info):
		f.info, f.ambiguous = nil, true
	default:
		f.info = info
	}
}

func (f *flowIdentity) get() map[string]any {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.info
}

// clientInfoOf is the identity the client's own message m carries (initialize clientInfo, or
// _meta clientInfo of its requests and notifications); nil for a response.
func clientInfoOf(m *mcp.Message) map[string]any {
	if m.Kind == mcp.KindRequest || m.Kind == mcp.KindNotification {
		return m.ClientInfo()
	}
	return nil
}

// clientIdentity is the info of the client a message of exchange st goes to (or comes from), as
// that client itself sent it: this exchange's requests, else its session's initialize, else this
// flow's. known is false when none of them names one client.
func clientIdentity(s *conn, st *xstate) (info map[string]any, known bool) {
	if st.clientInfo != nil {
		return st.clientInfo, true
	}
	if st.session != "" {
		if _, ci := s.f.Sessions.Lookup(s.owner, st.session); ci != nil {
			return ci, true
		}
	}
	if ci := s.ident.get(); ci != nil {
		return ci, true
	}
	return nil, false
}
