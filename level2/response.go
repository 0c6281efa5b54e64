package level2

import (
	"context"

	"mcpintercept/exchange"
	"mcpintercept/mcp"
	"mcpintercept/policy"
)

// ResponseBody runs responseSteps (chain.go) over a JSON response body, in order, until one
// ends the chain.
func (g *stage) ResponseBody(_ context.Context, x *exchange.Exchange) exchange.Result {
	st := stateOf(x)
	if st == nil {
		return exchange.Continue
	}
	b := &g.c.resp.body
	*b = serverBody{ctx: context.Background(), data: x.ResponseBody()}
	return runServerBody(g.c, x, st, b, responseSteps)
}

// Event runs eventSteps (chain.go) over one SSE event of a response stream, in order, until one
// ends the chain.
func (g *stage) Event(ctx context.Context, x *exchange.Exchange, ev *exchange.Event) exchange.Result {
	st := stateOf(x)
	if st == nil {
		return exchange.Continue
	}
	b := &g.c.resp.body
	*b = serverBody{ctx: ctx, ev: ev}
	return runServerBody(g.c, x, st, b, eventSteps)
}

func runServerBody(s *conn, x *exchange.Exchange, st *xstate, b *serverBody, steps []bodyStep) exchange.Result {
	defer func() { *b = serverBody{} }()
	for _, step := range steps {
		if res, done := step.run(s, x, st, b); done {
			return res
		}
	}
	return exchange.Continue
}

// serverBody is what the response steps hand each other about one server→client body: a JSON
// response body, or one SSE event's data.
type serverBody struct {
	ctx     context.Context
	ev      *exchange.Event // the event (Event), nil for a JSON body
	data    []byte          // the body as read (decoded from its Content-Encoding)
	encoded bool            // the JSON body came with a Content-Encoding
	msgs    []*mcp.Message
	batch   bool
	out     [][]byte // the messages as the client gets them (nil: dropped), from judgeBody
	changed bool
}

// judgeBody is the response step that judges the body's messages (judgeMessages).
func judgeBody(s *conn, x *exchange.Exchange, st *xstate, b *serverBody) (exchange.Result, bool) {
	b.out, b.changed = judgeMessages(s, b.ctx, x, st, b.msgs)
	return exchange.Continue, false
}

// judgeMessages records and judges the server→client messages of one body or event: the
// response steps (chain.go) run over each, answerSteps for a response or error, serverSteps for
// a server request or notification, until one ends the message's chain. It returns the
// messages' bytes, changed where policy replaced a response with an error, filtered a list, or
// redacted something; a nil entry is a message to drop (in a stream: a blocked server→client
// request, answered to the server on the client's behalf).
func judgeMessages(s *conn, ctx context.Context, x *exchange.Exchange, st *xstate, msgs []*mcp.Message) ([][]byte, bool) {
	out := make([][]byte, len(msgs))
	changed := false
	s.resp.later = s.resp.later[:0]
	sm := &s.resp.msg
	for i, m := range msgs {
		*sm = serverMessage{ctx: ctx, m: m, out: m.Raw}
		steps := serverSteps
		if m.Kind == mcp.KindResponse || m.Kind == mcp.KindError {
			steps = answerSteps
		}
		for _, step := range steps {
			if step.run(s, x, st, sm) {
				break
			}
		}
		out[i] = sm.out
		changed = changed || sm.changed
	}
	*sm = serverMessage{}
	// What the steps left for the end of the body, last first.
	for i := len(s.resp.later) - 1; i >= 0; i-- {
		s.resp.later[i].run(s)
	}
	clear(s.resp.later)
	return out, changed
}

// serverMessage is what the response steps hand each other about one server→client message.
type serverMessage struct {
	ctx context.Context
	m   *mcp.Message
	// out is the message as the client gets it (nil: dropped); changed says out is not m.Raw.
	out     []byte
	changed bool
	// rec is the record the steps write: a response's or error's is the request it answers
	// (pairResponse), a server request's or notification's its own (recordServerMessage).
	rec *Record
	d   policy.Decision // the message's decision (judgeResponse, judgeServerMessage)
	// A server request's: what surface control adds to policy's input, its kind (sampling,
	// elicitation, roots) for the record, and its span.
	extra func(*policy.Message)
	kind  string
	span  *openSpan
}

// later is what a response step leaves for the end of the body, once every message's steps ran:
// the record of a response paired with another connection's request (emit), or the end of the
// span of the request a response answers (span, m), once policy, surface control and redaction
// had their say.
type later struct {
	emit *Record
	span *Record
	m    *mcp.Message
}

func (l later) run(s *conn) {
	if l.span != nil {
		endResponseSpan(l.span, l.m)
		return
	}
	s.emit(l.emit)
}
