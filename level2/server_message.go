package level2

import (
	"fmt"

	"mcpintercept/exchange"
	"mcpintercept/mcp"
	"mcpintercept/policy"
)

// The response steps of a server→client request (sampling, elicitation, roots, ping) or
// notification: its record, policy and what follows from it.

// recordServerMessage starts the message's record.
func recordServerMessage(s *conn, x *exchange.Exchange, st *xstate, sm *serverMessage) bool {
	sm.rec = newRecord(s, x, st, sm.m, ServerToClient)
	st.messages++
	return false
}

// forgetChangedLists: after a list_changed notification the next list is judged afresh: the
// tool schemas validate_arguments learnt are forgotten, and tool integrity's view of the list
// (pins and quarantines stay).
func forgetChangedLists(s *conn, x *exchange.Exchange, st *xstate, sm *serverMessage) bool {
	m := sm.m
	if m.Kind != mcp.KindNotification {
		return false
	}
	if m.Method == mcp.NotificationToolsListChanged {
		s.f.Sessions.toolSchemas().forget(st.schemaKey())
	}
	if s.f.Tools != nil && mcp.Methods[m.Method].ListChanged {
		s.f.Tools.Forget(st.tools)
	}
	return false
}

// judgeServerMessage is policy on the message, with what surface control adds, then as part of
// the calls it belongs to (inCall: a redact or deny rule on a call covers its stream).
func judgeServerMessage(s *conn, x *exchange.Exchange, st *xstate, sm *serverMessage) bool {
	d := evaluate(s, x, st, sm.m, sm.rec, ServerToClient, nil, sm.extra)
	st.unknownTool = false
	sm.d = inCall(s, x, st, sm.m, d)
	return false
}

// recordVerdict writes the message's decision on its record.
func recordVerdict(s *conn, x *exchange.Exchange, st *xstate, sm *serverMessage) bool {
	r, d := sm.rec, sm.d
	r.Decision, r.Rule, r.Reason = d.Action, d.Rule, d.Reason
	if sm.kind != "" {
		r.Reason = sm.kind + " request from the server: " + r.Reason
	}
	return false
}

// dropBlocked drops a message policy blocks: in a stream, a JSON body or a batch alike, the
// client never gets it. A blocked request is answered to the server on the client's behalf, and
// its record written once that answer went out (answerServer).
func dropBlocked(s *conn, x *exchange.Exchange, st *xstate, sm *serverMessage) bool {
	m, r, d := sm.m, sm.rec, sm.d
	if d.Action == policy.ActionAllow {
		return false
	}
	sm.out, sm.changed = nil, true
	if m.Kind == mcp.KindRequest {
		if d.Rule != "audit" {
			auditServerDenial(s, x, st, m, r)
		}
		r.Reason += "; dropped, the server was answered with JSON-RPC error " + fmt.Sprint(CodeDenied)
		answerServer(s, sm.ctx, x, st, m, r, d)
		return true
	}
	r.Reason += "; dropped"
	return false
}

// emitServerMessage writes the message's record.
func emitServerMessage(s *conn, x *exchange.Exchange, st *xstate, sm *serverMessage) bool {
	s.emit(sm.rec)
	return false
}
