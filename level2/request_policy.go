package level2

import (
	"mcpintercept/exchange"
	"mcpintercept/policy"
)

// judgeRequests is policy, message by message: the first refusal refuses the body (a batch is
// one HTTP message; forwarding part of it would change what the client sent).
func judgeRequests(s *conn, x *exchange.Exchange, st *xstate, b *requestBody) (exchange.Result, bool) {
	var denied *Record
	var dec policy.Decision
	b.decs = make([]policy.Decision, len(b.msgs))
	for i, m := range b.msgs {
		r := st.reqs[i]
		d := evaluate(s, x, st, m, r, ClientToServer, nil, nil)
		b.decs[i] = d
		r.Decision, r.Rule, r.Reason = d.Action, d.Rule, d.Reason
		if d.Action != policy.ActionAllow && denied == nil {
			denied, dec = r, d
		}
	}
	if denied != nil {
		return refuse(s, x, st, b.msgs, b.batch, denied, dec), true
	}
	return exchange.Continue, false
}
