package level2

import (
	"context"
	"strings"
	"time"

	"mcpintercept/exchange"
	"mcpintercept/mcp"
	"mcpintercept/policy"
)

// RequestHead starts the exchange's state and runs requestHeadSteps (chain.go) over the
// request's head, in order, until one ends the chain.
func (g *stage) RequestHead(_ context.Context, x *exchange.Exchange) exchange.Result {
	st := &xstate{start: time.Now(), path: pathOf(x.Req.Target)}
	x.Set(stateKey{}, st)
	for _, step := range requestHeadSteps {
		if res, done := step.run(g.c, x, st); done {
			return res
		}
	}
	return exchange.Continue
}

// notePeer is the head step that notes what the client accepts and which server it asks.
func notePeer(s *conn, x *exchange.Exchange, st *xstate) (exchange.Result, bool) {
	h := x.Req
	st.acceptSSE, st.acceptJSON = accepts(h)
	st.server = serverIdentity(s, h)
	if s.f.Tools != nil {
		st.tools = toolServer(s, h, st)
	}
	return exchange.Continue, false
}

// wantRequestBody is the head step that asks for the body. Responses must be readable: the
// server is asked for identity encoding (Level 2 may modify messages; this changes no MCP
// semantics). A server that compresses anyway is decoded.
func wantRequestBody(s *conn, x *exchange.Exchange, st *xstate) (exchange.Result, bool) {
	h := x.Req
	if _, ok := h.Get("Accept-Encoding"); ok {
		x.DelRequestHeader("Accept-Encoding")
	}
	if !h.NoBody {
		x.WantRequestBody(s.max)
	}
	return exchange.Continue, false
}

// RequestBody runs requestSteps (chain.go) over the client's body, in order, until one ends the
// chain.
func (g *stage) RequestBody(ctx context.Context, x *exchange.Exchange) exchange.Result {
	s := g.c
	st := stateOf(x)
	b := &st.body
	*b = requestBody{raw: x.RequestBody(), ctx: ctx}
	for _, step := range requestSteps {
		if res, done := step.run(s, x, st, b); done {
			if st.answered {
				auditDenials(s, x, st)
			}
			return res
		}
	}
	return exchange.Continue
}

// requestBody is what the request steps hand each other about one client→server body.
type requestBody struct {
	raw     []byte // the body as read (decoded from its Content-Encoding)
	trimmed []byte // raw without the lenient space around it (readRequest)
	msgs    []*mcp.Message
	batch   bool
	decs    []policy.Decision // one per message, from the policy step
	out     [][]byte          // the messages as forwarded, from the transform step
	ctx     context.Context   // the exchange's
}

// serverIdentity names the server of an exchange for the schema memory: the destination, the
// SNI and the Host the client asked for.
func serverIdentity(s *conn, h *exchange.Head) string {
	var b strings.Builder
	if c := s.f.Conn; c != nil {
		b.WriteString(c.OrigDst)
	}
	b.WriteByte('|')
	if c := s.f.Conn; c != nil && c.Hello {
		b.WriteString(c.SNI)
	}
	b.WriteByte('|')
	if v, ok := h.Get("Host"); ok {
		b.WriteString(strings.ToLower(v))
	}
	return b.String()
}

// pathOf is http.path, read as Level 1 reads it (mcp.PathOf).
func pathOf(target string) string { return mcp.PathOf(target) }

// accepts reads the request's Accept lines the way Level 1 does (mcp.Accepts).
func accepts(h *exchange.Head) (sse, json bool) {
	return mcp.Accepts(h.Headers, "text/event-stream", "text/*", "*/*"),
		mcp.Accepts(h.Headers, "application/json", "application/*", "*/*")
}
