package level2

import (
	"mcpintercept/exchange"
	"mcpintercept/mcp"
	"mcpintercept/policy"
)

// refuseResultMembers judges a result by the types of its request's method, which only the
// request names (so the decoder cannot: mcp.Message.CheckResult). A lone case variant of a
// member of that result type ("Tools", a tool's "NAME") is read as the member by a Go peer that
// decodes into its structs, while Level 2 reads members by their exact keys and would judge the
// result without it: the client gets an error naming the appliance instead, as for a response
// the decoder refuses. A custom method's result is the server's own and is not judged so.
func refuseResultMembers(s *conn, m *mcp.Message, req *Record) ([]byte, bool) {
	err := m.CheckResult(req.Method)
	if err == nil {
		return nil, false
	}
	why := "result refused: " + decodeProblem(err)
	req.Decision, req.Rule, req.Reason = policy.ActionDeny, "level2", why
	if req.Err == "" {
		req.Err = why
	}
	auditOutcome(s, req, "denied", 0, why)
	return mcp.DenialBody(m.ID, CodeUnreadable, "response refused by "+Intermediary, "level2", why, 0), true
}

// clientResultCaseVariant judges the results a client sends (answers to the server's sampling,
// elicitation and roots requests, which Level 2 does not pair with their request): a lone case
// variant of a member of one of those result types is refused, as the server decodes into them.
func clientResultCaseVariant(msgs []*mcp.Message) (string, bool) {
	for _, m := range msgs {
		if err := m.CheckClientResult(); err != nil {
			return decodeProblem(err), true
		}
	}
	return "", false
}

// checkResultMembers is the response step of refuseResultMembers.
func checkResultMembers(s *conn, x *exchange.Exchange, st *xstate, sm *serverMessage) bool {
	if o, bad := refuseResultMembers(s, sm.m, sm.rec); bad {
		sm.out, sm.changed = o, true
		return true
	}
	return false
}
