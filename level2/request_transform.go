package level2

import (
	"strings"

	"mcpintercept/exchange"
	"mcpintercept/mcp"
	"mcpintercept/policy"
)

// transform applies what the allowed messages' decisions ask for (redaction, _meta).
func transform(s *conn, x *exchange.Exchange, st *xstate, b *requestBody) (exchange.Result, bool) {
	b.out = transformRequests(s, x, st, b.msgs, b.batch, b.decs)
	return exchange.Continue, false
}

// transformRequests applies what policy asked of allowed requests: client capabilities withheld
// (2026-07-28) and redactions. The body is re-framed when anything changed; the Mcp-Name and
// Mcp-Param-* headers follow the body.
func transformRequests(s *conn, x *exchange.Exchange, st *xstate, msgs []*mcp.Message, batch bool, decs []policy.Decision) [][]byte {
	var p *prober
	changed := false
	out := make([][]byte, len(msgs))
	for i, m := range msgs {
		out[i] = m.Raw
		r := st.reqs[i]
		if m.Kind == mcp.KindRequest && mcp.Version(st.version).Stateless() {
			if p == nil {
				p = newProber(s, x, st, ServerToClient)
			}
			if p != nil {
				if o, removed := withholdCapabilities(out[i], m, p); len(removed) > 0 {
					out[i], changed = o, true
					appendReason(r, "client capabilities withheld from the server: "+strings.Join(removed, ", "))
				}
			}
		}
		if o, ok := redact(s, out[i], decs[i], "params", r); ok {
			out[i], changed = o, true
			if !batch {
				if after, err := mcp.DecodeMessage(o, mcp.DecodeOptions{MaxSize: int(s.max)}); err == nil {
					syncMCPHeaders(x, m, after, decs[i].Redactions)
				}
			}
		}
	}
	if !changed {
		return out
	}
	if batch {
		x.SetRequestBody(joinBatch(out))
	} else {
		x.SetRequestBody(out[0])
	}
	if ce, ok := x.Req.Get("Content-Encoding"); ok && !isIdentity(ce) {
		// The new body is written decoded.
		x.DelRequestHeader("Content-Encoding")
	}
	return out
}
