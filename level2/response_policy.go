package level2

import (
	"fmt"

	"mcpintercept/exchange"
	"mcpintercept/mcp"
	"mcpintercept/policy"
)

// judgeResponse is the response step of policy on a response or error, judged as its request's
// method and name. A result policy refuses is replaced by an error naming the appliance, never
// a made-up result.
func judgeResponse(s *conn, x *exchange.Exchange, st *xstate, sm *serverMessage) bool {
	m, req := sm.m, sm.rec
	d := evaluate(s, x, st, m, req, ServerToClient, req, nil)
	sm.d = d
	if m.Kind == mcp.KindError && m.Error != nil {
		// The record gets the message as the client sees it: redacted first.
		req.Err = fmt.Sprintf("server error %d: %s", m.Error.Code, oneLine(redactText(m.Error.Message, d.Redactions)))
	}
	if d.Action != policy.ActionAllow && m.Kind == mcp.KindResponse {
		sm.out = mcp.DenialBody(m.ID, CodeDenied, "result withheld by "+Intermediary+" policy", d.Rule, d.Reason, 0)
		sm.changed = true
		req.Decision, req.Rule, req.Reason = d.Action, d.Rule, "result withheld: "+d.Reason
		auditOutcome(s, req, "denied", 0, req.Reason)
		return true
	}
	return false
}
