package level2

import (
	"context"

	"mcpintercept/exchange"
)

// ResponseHead runs responseHeadSteps (chain.go) over the response's head, in order, until one
// ends the chain; nothing when Level 2 answered the request itself.
func (g *stage) ResponseHead(_ context.Context, x *exchange.Exchange) exchange.Result {
	st := stateOf(x)
	if st == nil || st.answered {
		return exchange.Continue
	}
	for _, step := range responseHeadSteps {
		if res, done := step.run(g.c, x, st); done {
			return res
		}
	}
	return exchange.Continue
}

// wantResponse is the response head step that decides how the body is read: as events, as one
// JSON body, or not at all.
func wantResponse(s *conn, x *exchange.Exchange, st *xstate) (exchange.Result, bool) {
	h := x.Resp
	sn := sniff(h, nil)
	ct := sn.ct
	switch {
	case h.NoBody:
	case !ct.SSE && sn.namesEventStream:
		// A client that looks for "event-stream" anywhere in the type would read this as a
		// stream Level 2 did not frame as one: refuse rather than forward it uninspected.
		x.Abort("level2: a response type naming event-stream that is not text/event-stream (" + oneLine(sn.ctv) + ")")
		return exchange.Stop, true
	case ct.SSE:
		if ce, ok := h.Get("Content-Encoding"); ok && !isIdentity(ce) {
			x.Abort("level2: an encoded event stream (" + ce + ") cannot be inspected")
			return exchange.Stop, true
		}
		x.WantEvents(int(s.max))
	case ct.JSON || ct.MediaType == "" || sn.namesJSON:
		// JSON, a JSON-like type (application/json-rpc) or none at all: clients parse those, so
		// Level 2 reads them too (a body that is not JSON then goes through as it came).
		o := exchange.OverflowClose
		if s.f.ForwardOversized {
			o = exchange.OverflowForward
		}
		x.WantResponseBody(s.max, o)
	}
	return exchange.Continue, false
}
