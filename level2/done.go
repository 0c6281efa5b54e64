package level2

import (
	"time"

	"mcpintercept/exchange"
	"mcpintercept/policy"
	flowstage "mcpintercept/stage"
)

// Done runs doneSteps (chain.go) once the exchange is over.
func (g *stage) Done(x *exchange.Exchange) {
	st := stateOf(x)
	if st == nil {
		return
	}
	for _, step := range doneSteps {
		step.run(g.c, x, st)
	}
	if st.messages > 0 {
		// The stages after this one (trace, record) leave the exchange to Level 2's records.
		flowstage.MarkRecorded(x)
	}
}

// writeRecords is the done step that writes the records of the exchange's client→server
// messages, with the outcome.
func writeRecords(s *conn, x *exchange.Exchange, st *xstate) {
	// A stage after Level 2 may still refuse the request once Level 2 allowed it (the
	// credentials route's, which adds the credential last and answers when it cannot get one):
	// its verdict is the records'. The credential is the one the request actually went with.
	late := !st.answered && x.Verdict.Decision != "" && x.Verdict.Decision != exchange.Allow
	cred := policy.CredentialFrom(x.Get(policy.CredentialKey{}))
	for i, r := range st.reqs {
		r.Credential = cred
		if late && r.Decision == policy.ActionAllow {
			r.Decision, r.Rule, r.Reason = policy.Action(x.Verdict.Decision), x.Verdict.Rule, x.Verdict.Reason
		}
		r.Status = x.Status
		r.Duration = x.Duration
		if i == 0 {
			r.BytesUp, r.BytesDown = x.BytesUp, x.BytesDown
		}
		if r.Err == "" && x.Err != "" {
			r.Err = x.Err
		}
		if r.Err == "" && x.Uninspected != "" {
			r.Err = x.Uninspected
		}
		s.emit(r)
	}
	st.reqs = nil
}

// EndFlow ends the spans still open on this connection (server→client requests the client
// never answered here); the engine calls it once the connection's exchanges are over.
func (g *stage) EndFlow(at time.Time) { g.c.spans.endAll(at) }
