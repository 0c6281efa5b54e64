package level2

import (
	"encoding/json"
	"fmt"

	"mcpintercept/exchange"
	"mcpintercept/mcp"
	"mcpintercept/policy"
)

// matchHeaders is SEP-2243: the headers are the client's claim, the body is the truth; a
// request whose MCP headers disagree with its body is refused with HTTP 400 and -32020.
func matchHeaders(s *conn, x *exchange.Exchange, st *xstate, b *requestBody) (exchange.Result, bool) {
	why := headerMismatch(x.Req, b.msgs, b.batch)
	if why == "" {
		return exchange.Continue, false
	}
	for _, r := range st.reqs {
		r.Decision, r.Rule, r.Reason = policy.ActionDeny, "header-mismatch", why
	}
	var id json.RawMessage
	if !b.batch && len(b.msgs) == 1 {
		id = b.msgs[0].ID
	}
	body := mcp.DenialBody(id, CodeHeaderMismatch, "header mismatch: "+why, "header-mismatch", why, 0)
	st.answered, st.answerCode = true, CodeHeaderMismatch
	x.Answer(400, []exchange.Header{{Name: "Content-Type", Value: "application/json"}}, body,
		exchange.Verdict{Decision: exchange.Deny, Status: 400, Rule: "header-mismatch", Reason: why})
	return exchange.Stop, true
}

// headerMismatch compares the MCP headers a request carries with its body; "" when they agree.
func headerMismatch(h *exchange.Head, msgs []*mcp.Message, batch bool) string {
	// A repeated MCP header is a claim with two values; servers disagree on which counts.
	for _, name := range []string{"Mcp-Method", "Mcp-Name", "MCP-Protocol-Version"} {
		n := 0
		for _, hd := range h.Headers {
			if exchange.EqualFold(hd.Name, name) {
				n++
			}
		}
		if n > 1 {
			return name + " header repeated"
		}
	}
	hm, hasM := h.Get("Mcp-Method")
	hn, hasN := h.Get("Mcp-Name")
	hv, hasV := h.Get("MCP-Protocol-Version")
	if !hasM && !hasN && !hasV {
		return ""
	}
	if batch || len(msgs) != 1 {
		if hasM || hasN {
			return "Mcp-Method/Mcp-Name on a batch"
		}
		return ""
	}
	m := msgs[0]
	if hasM && (m.Kind == mcp.KindRequest || m.Kind == mcp.KindNotification) && hm != m.Method {
		return fmt.Sprintf("Mcp-Method header %q does not match body method %q", hm, m.Method)
	}
	if hasN {
		name, err := mcp.DecodeHeaderValue(hn)
		if err != nil {
			// Worded as Level 1 refuses the same header: a framing error of the request.
			return "Mcp-Name header does not decode: " + (&exchange.MalformedError{Msg: err.Error()}).Error()
		}
		if name != m.Name() {
			return fmt.Sprintf("Mcp-Name header %q does not match body name %q", mcp.RedactURI(name), mcp.RedactURI(m.Name()))
		}
	}
	if hasV && m.Method != mcp.MethodInitialize {
		if pv := m.ProtocolVersion(); pv != "" && pv != hv {
			return fmt.Sprintf("MCP-Protocol-Version header %q does not match _meta protocolVersion %q", hv, pv)
		}
	}
	return ""
}
