package level2

import (
	"time"

	"mcpintercept/exchange"
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
	for i, r := range st.reqs {
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
