package level2

import (
	"context"
	"strings"
	"time"

	"mcpintercept/exchange"
	"mcpintercept/mcp"
	"mcpintercept/policy"
)

// RequestHead starts the exchange's state: its session, version and server, and what the
// client accepts. Then the request steps run over the body (RequestBody).
func (g *stage) RequestHead(_ context.Context, x *exchange.Exchange) exchange.Result {
	s := g.c
	h := x.Req
	st := &xstate{start: time.Now(), path: pathOf(h.Target)}
	x.Set(stateKey{}, st)
	if h.Count("Mcp-Session-Id") > 1 {
		// Servers disagree on which of two session ids counts (Go: the first; Node: both,
		// joined): the session, and so the client's identity, would be another for each.
		return refuseUnreadable(s, x, st, 400, "Mcp-Session-Id header repeated")
	}
	if v, ok := h.Get("Mcp-Session-Id"); ok && v != "" {
		st.session = hashKey(v)
	} else if s.f.Sessions.KnownEndpoint(s.owner, h.Target) || legacySession(h.Target) != "" {
		// 2024-11-05: a POST to an endpoint a GET stream announced (whatever the server calls
		// its session parameter: sessionId, the Go SDK's sessionid, …).
		st.session, st.legacy = legacyKey(h.Target), h.Method == "POST"
	}
	if v, ok := h.Get("MCP-Protocol-Version"); ok {
		st.version = v
	} else if v, _ := s.f.Sessions.Lookup(s.owner, st.session); v != "" {
		st.version = v
	}
	st.acceptSSE, st.acceptJSON = accepts(h)
	st.server = serverIdentity(s, h)
	if s.f.Tools != nil {
		st.tools = toolServer(s, h, st)
	}
	// Responses must be readable: ask the server for identity encoding (Level 2 may modify
	// messages; this changes no MCP semantics). A server that compresses anyway is decoded.
	if _, ok := h.Get("Accept-Encoding"); ok {
		x.DelRequestHeader("Accept-Encoding")
	}
	if !h.NoBody {
		x.WantRequestBody(s.max)
	}
	return exchange.Continue
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
