package level2

import (
	"context"

	"mcpintercept/exchange"
	"mcpintercept/mcp"
	"mcpintercept/policy"
)

// ResponseBody reads a JSON response body (its encoding, type and bytes), decodes it strictly and
// judges its messages (judgeMessages); a body that changed is written back.
func (g *stage) ResponseBody(_ context.Context, x *exchange.Exchange) exchange.Result {
	s := g.c
	st := stateOf(x)
	if st == nil {
		return exchange.Continue
	}
	body := x.ResponseBody()
	encoded := false
	if ce, ok := x.Resp.Get("Content-Encoding"); ok && !isIdentity(ce) {
		dec, err := DecodeBody(ce, body, s.maxBody())
		if err != nil {
			return refuseResponse(s, x, st, "response body does not decode as "+oneLine(ce)+": "+decodeProblem(err))
		}
		body, encoded = dec, true
	}
	ctv, _ := contentTypes(x.Resp)
	if enc := pythonEncoding(body); enc != "" {
		return refuseResponse(s, x, st, "response body in "+enc+" cannot be inspected (JSON-RPC bodies are UTF-8)")
	}
	if !ParseContentType(ctv).JSON && !namesJSON(ctv) && !looksJSON(body) {
		return exchange.Continue // not JSON by its type or its bytes: no client reads it as JSON-RPC
	}
	if blank(body) {
		// An empty answer (202 to a notification or a legacy POST, however typed) carries no
		// message: it passes as it came.
		return exchange.Continue
	}
	msgs, batch, err := mcp.Decode(trimLenient(body), mcp.DecodeOptions{MaxSize: int(s.maxBody()), AllowBatch: true})
	if err != nil {
		// The strict decoder refused what a lenient client would read (a duplicate key, a lone
		// surrogate): forwarding it would let the server past every response rule.
		return refuseResponse(s, x, st, "response refused: "+decodeProblem(err))
	}
	out, changed := judgeMessages(s, context.Background(), x, st, msgs)
	if changed {
		kept := compact(out)
		switch {
		case len(kept) == 0:
			// Every message was a server request policy blocks (dropped, the server answered):
			// the client's requests of this exchange get an error naming the appliance instead
			// of an answer the server never gave.
			x.SetResponseBody(unanswered(s, st, msgs))
		case batch:
			x.SetResponseBody(joinBatch(kept))
		default:
			x.SetResponseBody(kept[0])
		}
		if encoded {
			x.DelResponseHeader("Content-Encoding")
		}
	}
	return exchange.Continue
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
	st.later = st.later[:0]
	sm := &st.msg
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
	for i := len(st.later) - 1; i >= 0; i-- {
		st.later[i].run(s)
	}
	clear(st.later)
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

// compact returns the non-nil entries of out (nil: a message dropped).
func compact(out [][]byte) [][]byte {
	kept := make([][]byte, 0, len(out))
	for _, o := range out {
		if o != nil {
			kept = append(kept, o)
		}
	}
	return kept
}
