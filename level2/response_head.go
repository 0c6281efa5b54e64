package level2

import (
	"context"
	"time"

	"mcpintercept/exchange"
	"mcpintercept/policy"
)

func (g *stage) ResponseHead(_ context.Context, x *exchange.Exchange) exchange.Result {
	s := g.c
	st := stateOf(x)
	if st == nil || st.answered {
		return exchange.Continue
	}
	h := x.Resp
	if h.Count("Mcp-Session-Id") > 1 {
		// A client would take the first (Go) or both joined (fetch) as its session: Level 2
		// could not tell which session, and so which client, the stream's requests go to.
		s.emit(&Record{Time: time.Now(), Direction: ServerToClient, Decision: policy.ActionDeny, Rule: "level2",
			HTTPMethod: x.Req.Method, Path: st.path, Reason: "response refused: Mcp-Session-Id header repeated"})
		x.Abort("level2: Mcp-Session-Id header repeated in the response")
		return exchange.Stop
	}
	if st.initialize {
		if v, ok := h.Get("Mcp-Session-Id"); ok && v != "" {
			st.session = hashKey(v)
			s.f.Sessions.SetClientInfo(s.owner, st.session, st.clientInfo)
		}
	}
	sn := sniff(h, nil)
	ct := sn.ct
	switch {
	case h.NoBody:
	case !ct.SSE && sn.namesEventStream:
		// A client that looks for "event-stream" anywhere in the type would read this as a
		// stream Level 2 did not frame as one: refuse rather than forward it uninspected.
		x.Abort("level2: a response type naming event-stream that is not text/event-stream (" + oneLine(sn.ctv) + ")")
		return exchange.Stop
	case ct.SSE:
		if ce, ok := h.Get("Content-Encoding"); ok && !isIdentity(ce) {
			x.Abort("level2: an encoded event stream (" + ce + ") cannot be inspected")
			return exchange.Stop
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
	return exchange.Continue
}
