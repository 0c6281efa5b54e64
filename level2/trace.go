package level2

import (
	"encoding/json"
	"sync"
	"sync/atomic"
	"time"

	"mcpintercept/exchange"
	"mcpintercept/mcp"
	"mcpintercept/policy"
	"mcpintercept/tracing"
)

// Tracing at Level 2 (Flow.Tracer set): one span per JSON-RPC request, in either direction.
//
//   - A client→server request's span (KindClient) starts when its body has been read (the
//     exchange's start) and ends when its response or error is seen — on this exchange, or on
//     another stream of the session (the span travels in the session's Pending entry) — or when
//     the appliance answers it itself (a denial, a rate limit, a quarantine, a header mismatch,
//     invalid arguments, audit unavailable), or, when no answer comes, at the end of the
//     exchange (no session) or when the session forgets the pending request.
//   - A server→client request's span (KindServer: sampling, elicitation, roots, ping) starts when
//     it is read and ends when the client's response comes back on this connection, when policy
//     drops it, or when the connection ends. At most maxServerSpans are open per connection; the
//     oldest is ended past that.
//
// The parent is params._meta's traceparent (with its tracestate and baggage) when valid, else
// the request headers' (for a server request: the client request of the same exchange, when it
// has a span). Notifications get no span.
//
// With Flow.TraceInject, the request forwarded upstream names the appliance's span as its
// parent: the traceparent and tracestate headers are replaced, and when the client put a
// traceparent in params._meta it is replaced too (tracestate there as well when present), the
// body re-framed by the exchange (Content-Length). _meta is nothing the Mcp-* headers name, so
// they stay consistent. A batch is injected only when it holds one request: one header cannot
// name several parents.

// openSpan is a span that several holders may end (the exchange, the session's pending entry):
// the first End wins.
type openSpan struct {
	sp    *tracing.Span
	ended atomic.Bool
}

// end records the decision and the answer on the span and ends it, once.
func (o *openSpan) end(r *Record, code int64, httpStatus int, toolError bool, at time.Time) {
	if o == nil || !o.ended.CompareAndSwap(false, true) {
		return
	}
	if r != nil {
		o.sp.Decision(string(r.Decision), r.Rule, r.Reason)
	}
	o.sp.Status(code, httpStatus, toolError)
	o.sp.End(at)
}

// maxServerSpans bounds the open spans of server→client requests per connection.
const maxServerSpans = 256

// serverSpans are the open spans of server→client requests forwarded to the client, by id key.
type serverSpans struct {
	mu    sync.Mutex
	byKey map[string]*openSpan
	order []string
}

func (t *serverSpans) add(key string, o *openSpan) {
	var evicted *openSpan
	t.mu.Lock()
	if t.byKey == nil {
		t.byKey = map[string]*openSpan{}
	}
	if old := t.byKey[key]; old != nil {
		evicted = old
	} else {
		if len(t.order) >= maxServerSpans {
			evicted = t.byKey[t.order[0]]
			delete(t.byKey, t.order[0])
			t.order = t.order[1:]
		}
		t.order = append(t.order, key)
	}
	t.byKey[key] = o
	t.mu.Unlock()
	evicted.end(nil, 0, 0, false, time.Now())
}

func (t *serverSpans) take(key string) *openSpan {
	t.mu.Lock()
	defer t.mu.Unlock()
	o := t.byKey[key]
	if o == nil {
		return nil
	}
	delete(t.byKey, key)
	for i, k := range t.order {
		if k == key {
			t.order = append(t.order[:i], t.order[i+1:]...)
			break
		}
	}
	return o
}

// endAll ends every open span (the connection ended without the client's answer).
func (t *serverSpans) endAll(at time.Time) {
	t.mu.Lock()
	open := t.byKey
	t.byKey, t.order = nil, nil
	t.mu.Unlock()
	for _, o := range open {
		o.end(nil, 0, 0, false, at)
	}
}

// traceParent is the parent of m's span: params._meta's trace context when it carries a valid
// traceparent, else fallback (the request headers', or the exchange's client request's span).
func traceParent(m *mcp.Message, fallback func() tracing.Parent) tracing.Parent {
	if meta, ok := m.Param("_meta"); ok && mcp.IsObject(meta) {
		if tp, ok := mcp.StringMember(meta, "traceparent"); ok && mcp.ValidTraceparent(tp) {
			p := tracing.Parent{Traceparent: tp}
			p.Tracestate, _ = mcp.StringMember(meta, "tracestate")
			p.Baggage, _ = mcp.StringMember(meta, "baggage")
			return p
		}
	}
	return fallback()
}

// headerParent is the trace context of the request's headers.
func headerParent(h *exchange.Head) tracing.Parent {
	var p tracing.Parent
	if h == nil {
		return p
	}
	p.Traceparent, _ = h.Get("traceparent")
	p.Tracestate, _ = h.Get("tracestate")
	p.Baggage, _ = h.Get("baggage")
	return p
}

// traceCall is what m's span is about: the message's part, then the flow's (Flow.Trace).
func traceCall(s *conn, st *xstate, r *Record, m *mcp.Message, dir string) tracing.Call {
	c := s.f.Trace
	c.Method = m.Method
	switch m.Method {
	case mcp.MethodToolsCall:
		c.Tool = r.Name
	case mcp.MethodPromptsGet:
		c.Prompt = r.Name
	case mcp.MethodResourcesRead:
		c.ResourceURI = r.Name // RedactURI applied by newRecord
	}
	c.RequestID = r.ID
	c.ProtocolVersion = r.Version
	if c.ProtocolVersion == "" {
		c.ProtocolVersion = st.version
	}
	c.SessionID = st.session // hashed, never the raw Mcp-Session-Id
	c.Direction = dir
	return c
}

// startSpan starts r's span (m a request) and puts its ids on r.
func startSpan(s *conn, st *xstate, r *Record, m *mcp.Message, dir string, parent tracing.Parent, start time.Time) *openSpan {
	kind := tracing.KindClient
	if dir == ServerToClient {
		kind = tracing.KindServer
	}
	sp := s.f.Tracer.Start(parent, kind, traceCall(s, st, r, m, dir), start)
	if sp == nil {
		return nil
	}
	r.TraceID, r.SpanID = sp.TraceID(), sp.SpanID()
	return &openSpan{sp: sp}
}

// traceRequests is the request step that starts a span for every client→server request of the
// body, and ends the server→client requests' spans the client answers in it.
func traceRequests(s *conn, x *exchange.Exchange, st *xstate, b *requestBody) (exchange.Result, bool) {
	if s.f.Tracer == nil {
		return exchange.Continue, false
	}
	hp := func() tracing.Parent { return headerParent(x.Req) }
	for i, m := range b.msgs {
		switch m.Kind {
		case mcp.KindRequest:
			r := st.reqs[i]
			r.span = startSpan(s, st, r, m, ClientToServer, traceParent(m, hp), st.start)
		case mcp.KindResponse, mcp.KindError:
			if len(m.ID) == 0 {
				continue
			}
			if o := s.spans.take(idKey(m)); o != nil {
				code := int64(0)
				if m.Kind == mcp.KindError && m.Error != nil {
					code = m.Error.Code
				}
				o.end(nil, code, 0, false, time.Now())
			}
		}
	}
	return exchange.Continue, false
}

// injectTrace is Flow.TraceInject on an allowed body with one request: the upstream request
// names the request's span as its parent. out is the transform step's messages (nil entries
// unchanged); it returns them, the injected message replaced.
func injectTrace(s *conn, x *exchange.Exchange, st *xstate, b *requestBody) (exchange.Result, bool) {
	if !s.f.TraceInject || s.f.Tracer == nil {
		return exchange.Continue, false
	}
	at := -1
	for i, m := range b.msgs {
		if m.Kind != mcp.KindRequest {
			continue
		}
		if at >= 0 {
			return exchange.Continue, false // a batch of several requests: no one parent
		}
		at = i
	}
	if at < 0 || st.reqs[at].span == nil {
		return exchange.Continue, false
	}
	tp, ts, ok := st.reqs[at].span.sp.Inject()
	if !ok {
		return exchange.Continue, false
	}
	x.SetRequestHeader("traceparent", tp)
	if ts != "" {
		x.SetRequestHeader("tracestate", ts)
	} else {
		x.DelRequestHeader("tracestate")
	}
	msg := b.msgs[at].Raw
	if at < len(b.out) && b.out[at] != nil {
		msg = b.out[at]
	}
	nm, changed := injectMeta(msg, tp, ts)
	if !changed {
		return exchange.Continue, false
	}
	if len(b.out) != len(b.msgs) {
		b.out = make([][]byte, len(b.msgs))
		for i, m := range b.msgs {
			b.out[i] = m.Raw
		}
	}
	b.out[at] = nm
	if b.batch {
		x.SetRequestBody(joinBatch(b.out))
	} else {
		x.SetRequestBody(nm)
	}
	if ce, ok := x.Req.Get("Content-Encoding"); ok && !isIdentity(ce) {
		x.DelRequestHeader("Content-Encoding") // the new body is written decoded
	}
	return exchange.Continue, false
}

// injectMeta replaces params._meta.traceparent of msg (a JSON-RPC request object) with tp, and
// params._meta.tracestate, when present, with ts; false when msg has no _meta.traceparent.
func injectMeta(msg []byte, tp, ts string) ([]byte, bool) {
	pa := mcp.MemberSpan(msg, "params")
	if !pa.Found {
		return nil, false
	}
	params := msg[pa.ValStart:pa.ValEnd]
	ma := mcp.MemberSpan(params, "_meta")
	if !ma.Found {
		return nil, false
	}
	meta := params[ma.ValStart:ma.ValEnd]
	ta := mcp.MemberSpan(meta, "traceparent")
	if !ta.Found {
		return nil, false
	}
	base := pa.ValStart + ma.ValStart
	edits := []edit{{start: base + ta.ValStart, end: base + ta.ValEnd, repl: jsonString(tp)}}
	if sa := mcp.MemberSpan(meta, "tracestate"); sa.Found && ts != "" {
		edits = append(edits, edit{start: base + sa.ValStart, end: base + sa.ValEnd, repl: jsonString(ts)})
	}
	return splice(msg, edits), true
}

func jsonString(s string) []byte {
	b, _ := json.Marshal(s)
	return b
}

// endRequestSpans ends the spans of the exchange's client→server requests still open when it is
// done: answered here by the appliance (the refusal's code), or forwarded with no answer on this
// exchange. A request a session remembers as pending keeps its span open for the stream that
// will answer it (Pending carries it), unless this exchange failed.
func endRequestSpans(s *conn, x *exchange.Exchange, st *xstate) {
	at := x.Start.Add(x.Duration)
	for _, r := range st.reqs {
		o := r.span
		if o == nil {
			continue
		}
		switch {
		case st.answered:
			o.end(r, int64(st.answerCode), 0, false, at)
		case r.pended && x.Err == "" && x.Status < 300:
			// The answer comes on another stream of the session.
		default:
			// No answer seen here, or the server's replaced by the appliance's error (respCode).
			o.end(r, int64(st.respCode), x.Status, false, at)
		}
	}
}

// endResponseSpan ends the span of req, which m (a response or error) answers.
func endResponseSpan(req *Record, m *mcp.Message) {
	o := req.span
	if o == nil {
		return
	}
	var code int64
	toolError := false
	switch {
	case m.Kind == mcp.KindError && m.Error != nil:
		code = m.Error.Code
	case req.Decision != "" && req.Decision != policy.ActionAllow:
		code = CodeDenied // the result withheld: the client got the appliance's error
	case req.Method == mcp.MethodToolsCall:
		if v, ok := mcp.Member(m.Result, "isError"); ok && string(v) == "true" {
			toolError = true
		}
	}
	o.end(req, code, 0, toolError, time.Now())
}

// exchangeParent is the parent of a server→client request that carries none in _meta: the span
// of the client request whose exchange it arrived on (the call it is made for), else that
// request's headers.
func exchangeParent(x *exchange.Exchange, st *xstate) tracing.Parent {
	for _, r := range st.reqs {
		if r.span == nil {
			continue
		}
		if tp, ts, ok := r.span.sp.Inject(); ok {
			return tracing.Parent{Traceparent: tp, Tracestate: ts}
		}
		break
	}
	return headerParent(x.Req)
}

// startServerSpan is the response step that starts a server→client request's span.
func startServerSpan(s *conn, x *exchange.Exchange, st *xstate, sm *serverMessage) bool {
	if sm.m.Kind == mcp.KindRequest && s.f.Tracer != nil {
		sm.span = startSpan(s, st, sm.rec, sm.m, ServerToClient, traceParent(sm.m, func() tracing.Parent { return exchangeParent(x, st) }), sm.rec.Time)
	}
	return false
}

// endServerSpan is the response step that ends a dropped server request's span (the server got
// the appliance's error), or keeps a forwarded one's until the client answers it or the flow
// ends.
func endServerSpan(s *conn, x *exchange.Exchange, st *xstate, sm *serverMessage) bool {
	sp := sm.span
	if sp == nil {
		return false
	}
	if sm.d.Action != policy.ActionAllow {
		sp.end(sm.rec, CodeDenied, 0, false, time.Now())
	} else if len(sm.m.ID) > 0 {
		s.spans.add(idKey(sm.m), sp)
	}
	return false
}
