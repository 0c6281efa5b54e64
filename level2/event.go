package level2

import (
	"net/url"
	"strings"
	"time"

	"mcpintercept/exchange"
	"mcpintercept/mcp"
	"mcpintercept/policy"
)

// The response steps of an SSE event (Event) that are its own: the JSON body has its own
// (response_body.go).

// checkFraming refuses a stream whose events peers would split differently, and passes an event
// without data.
func checkFraming(s *conn, x *exchange.Exchange, st *xstate, b *serverBody) (exchange.Result, bool) {
	ev := b.ev
	cr := st.eventCR
	st.eventCR = len(ev.Raw) > 0 && ev.Raw[len(ev.Raw)-1] == '\r'
	if bareCR(ev.Raw, cr) {
		// Peers split this stream into different events (the Go SDK ends lines at LF only): what
		// one of them dispatches cannot be judged for both.
		s.emit(&Record{Time: time.Now(), Direction: ServerToClient, Decision: policy.ActionDeny, Rule: "level2",
			HTTPMethod: x.Req.Method, Path: st.path, Reason: "event stream refused: a bare CR line end, which peers frame differently"})
		x.Abort("level2: an SSE line ended by a bare CR (peers frame it differently)")
		return exchange.Stop, true
	}
	if !ev.HasData {
		return exchange.Continue, true
	}
	b.data = []byte(ev.Data)
	return exchange.Continue, false
}

// openEndpoint is 2024-11-05: the stream announces where to POST; its session id ties the POSTs
// (other connections) to this stream. An endpoint event whose data is JSON is judged like any
// other: the Go SDK's legacy client decodes every event after the first. Only the first
// endpoint event of a GET stream opens a session: any other would let a server open sessions
// without bound (and evict the client's), and a later one is read differently by clients (the
// TypeScript SDK moves its POSTs there, the Go SDK ignores it), so it is dropped.
func openEndpoint(s *conn, x *exchange.Exchange, st *xstate, b *serverBody) (exchange.Result, bool) {
	ev := b.ev
	if ev.Type != "endpoint" || looksJSON(b.data) {
		return exchange.Continue, false
	}
	if x.Req.Method != "GET" {
		return exchange.Continue, true
	}
	if st.endpoint != "" {
		ev.Drop()
		s.emit(&Record{Time: time.Now(), Direction: ServerToClient, Decision: policy.ActionDeny, Rule: "level2",
			HTTPMethod: x.Req.Method, Path: st.path, Reason: "event dropped: a second endpoint event on the stream"})
		return exchange.Continue, true
	}
	if ep := endpointTarget(x.Req.Target, ev.Data); ep != "" {
		st.session, st.legacy, st.endpoint = legacyKey(ep), true, ep
		s.f.Sessions.Open(s.owner, st.session)
		if s.f.Tools != nil {
			// Its POSTs name this stream's server to tool integrity (toolServer).
			s.f.Sessions.setStreamPath(s.owner, st.session, x.Req.Target)
		}
	}
	return exchange.Continue, true
}

// decodeEvent decodes the event's data strictly when it is JSON. JSON the strict decoder refuses
// (a duplicate key, a lone surrogate) is what a lenient client would still read: the event is
// dropped, never forwarded past the response rules.
func decodeEvent(s *conn, x *exchange.Exchange, st *xstate, b *serverBody) (exchange.Result, bool) {
	if !looksJSON(b.data) {
		return exchange.Continue, true
	}
	msgs, batch, err := mcp.Decode(trimLenient(b.data), mcp.DecodeOptions{MaxSize: int(s.max), AllowBatch: true})
	if err != nil {
		b.ev.Drop()
		s.emit(&Record{Time: time.Now(), Direction: ServerToClient, Decision: policy.ActionDeny, Rule: "level2",
			HTTPMethod: x.Req.Method, Path: st.path, Reason: "event dropped: not strict JSON-RPC: " + decodeProblem(err)})
		return exchange.Continue, true
	}
	b.msgs, b.batch = msgs, batch
	return exchange.Continue, false
}

// writeEvent re-frames an event whose messages changed, or drops it when none is left (a
// blocked server→client request: the client never sees it, the server was answered on its
// behalf).
func writeEvent(s *conn, x *exchange.Exchange, st *xstate, b *serverBody) (exchange.Result, bool) {
	if !b.changed {
		return exchange.Continue, false
	}
	ev := b.ev
	kept := compact(b.out)
	switch {
	case len(kept) == 0:
		ev.Drop()
	case b.batch:
		ev.Replace(encodeEvent(ev, joinBatch(kept)))
	default:
		ev.Replace(encodeEvent(ev, kept[0]))
	}
	return exchange.Continue, false
}

// encodeEvent re-frames ev with data d, keeping its type and id.
func encodeEvent(ev *exchange.Event, d []byte) []byte {
	e := *ev
	e.Data = string(d)
	return exchange.EncodeEvent(e)
}

// endpointTarget is the request target (path and query) of a 2024-11-05 endpoint event's URL,
// resolved against the GET stream's target as the clients resolve it (the Go SDK's server sends
// "?sessionid=…", relative to the stream's path).
func endpointTarget(stream, data string) string {
	data = strings.TrimSpace(data)
	u, err := url.Parse(data)
	if err != nil || data == "" {
		return ""
	}
	if base, err := url.Parse(pathOf(stream)); err == nil {
		u = base.ResolveReference(u)
	}
	t := u.EscapedPath()
	if t == "" {
		t = "/"
	}
	if u.RawQuery != "" {
		t += "?" + u.RawQuery
	}
	return t
}
