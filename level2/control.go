package level2

import (
	"net/url"
	"strings"

	"mcpintercept/exchange"
	"mcpintercept/mcp"
	"mcpintercept/policy"
)

// Request-side surface control: arguments checked against the tool's schema, capabilities policy
// would refuse withheld, redaction; then the body re-framed when any of them changed it.

// CodeInvalidParams is JSON-RPC's Invalid params, the answer to arguments that do not match the
// tool's input schema (error.data names the appliance: the server never saw the call).
const CodeInvalidParams = mcp.CodeInvalidParams

// ruleValidate names the check in records and error.data.
const ruleValidate = "validate_arguments"

// validateArguments refuses a body whose tools/call arguments do not match the input schema the
// server listed for the tool in this session (or, for a stateless server, to any client). A
// tool whose schema is not known, or cannot be compiled, is not checked; one whose schema is over
// a bound, or whose arguments would cost more than the work budget to check, is refused.
func validateArguments(s *conn, x *exchange.Exchange, st *xstate, msgs []*mcp.Message, batch bool) (exchange.Result, bool) {
	store := s.f.Sessions.toolSchemas()
	if store == nil {
		return exchange.Continue, false
	}
	for i, m := range msgs {
		if m.Kind != mcp.KindRequest || m.Method != "tools/call" {
			continue
		}
		ts := store.lookup(st.schemaKey(), m.Name())
		if ts == nil {
			continue
		}
		v := ts.validate(m.Arguments())
		if !v.checked {
			continue
		}
		r := st.reqs[i]
		why, told := refusalOf(r.Name, v)
		if why == "" {
			continue
		}
		r.Decision, r.Rule, r.Reason = policy.ActionDeny, ruleValidate, why
		d := policy.Decision{Action: policy.ActionDeny, Rule: ruleValidate, Reason: why}
		return refuseWith(s, x, st, msgs, batch, r, d, CodeInvalidParams, "invalid params (checked by "+Intermediary+"): "+told), true
	}
	return exchange.Continue, false
}

// refusalOf turns a verdict on a call of tool into the record's reason and what the client is
// told ("" when the call may go on). A schema over a bound and a validation over the work
// budget refuse the call as invalid arguments do: validate_arguments promises that no call
// reaches the server unchecked.
func refusalOf(tool string, v verdict) (why, told string) {
	switch {
	case v.schema != "":
		why = "input schema of tool " + tool + " refused: " + v.schema
		return why, why
	case v.budget != "":
		why = "arguments of " + tool + " refused: " + v.budget
		return why, why
	case v.problem != "":
		return "arguments of " + tool + " do not match its input schema: " + v.problem, v.problem
	}
	return "", ""
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
				if after, err := mcp.DecodeMessage(o, mcp.DecodeOptions{MaxSize: int(s.maxBody())}); err == nil {
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
