package level2

import (
	"slices"

	"mcpintercept/exchange"
	"mcpintercept/mcp"
	"mcpintercept/policy"
)

// rules is the rule set that judges now, or nil (allow all).
func (s *conn) rules() Evaluator {
	if s.f.Rules == nil {
		return nil
	}
	return s.f.Rules()
}

// evaluate judges one message. For a response, req is the request it answers (its method and
// name are the response's as far as rules are concerned).
// extra adds facts of surface control (the tool a server request was made for, an elicitation's
// mode).
func evaluate(s *conn, x *exchange.Exchange, st *xstate, m *mcp.Message, r *Record, dir string, req *Record, extra func(*policy.Message)) policy.Decision {
	rs := s.rules()
	if rs == nil {
		return policy.Decision{Action: policy.ActionAllow}
	}
	// A server message no rule is written for cannot be denied; the costly members (arguments,
	// result, client info) are decoded only if some rule reads them (policy.Body, lazily).
	if dir == ServerToClient && !rs.Needs().ServerMessages {
		return policy.Decision{Action: policy.ActionAllow, Reason: policy.ReasonNoMatch}
	}
	v := &st.vars
	v.msg = policy.Message{Direction: dir, Kind: m.Kind.String(), Method: r.Method, Name: r.Name, ID: r.ID,
		Version: st.version, Session: st.session}
	v.body = messageBody{s: s, st: st, m: m, dir: dir}
	v.msg.Body = &v.body
	if m.Kind == mcp.KindError && m.Error != nil {
		v.rpcErr = policy.RPCError{Code: m.Error.Code, Message: m.Error.Message}
		v.msg.Error = &v.rpcErr
	}
	if extra != nil {
		extra(&v.msg)
	}
	if dir == ClientToServer && m.Kind == mcp.KindRequest && integrityCall(m.Method) {
		// Present on every call of a tool or prompt, empty on a route without tool_pins.
		v.tools = r.tv
		v.msg.Tools = &v.tools
	}
	if dir == ClientToServer && (m.Kind == mcp.KindRequest) && isRetry(m) {
		v.msg.Retry = true
	}
	v.http = policy.Request{Method: x.Req.Method, Path: st.path}
	if info := mcp.InfoOf(x); info != nil {
		v.http.Headers = policy.HeaderMap(info.Headers)
	}
	v.in = policy.Input{Vars: policy.Vars{Client: s.f.Client, Conn: s.f.Conn, HTTP: &v.http, MCP: &v.msg, Auth: policy.AuthFrom(x.Get(policy.AuthKey{}))},
		FailOpen: s.f.FailOpen, ServerMessage: dir == ServerToClient}
	if dir == ServerToClient && rs.Needs().ClientInfo {
		// The client this message goes to cannot be told: a rule on its info fails rather
		// than read a guess (or nothing, which would look like a client that sent none).
		if _, known := clientIdentity(s, st); !known {
			v.in.Vars.Unknown = unknownClient
		}
	}
	if dir == ServerToClient && st.unknownTool {
		v.in.Vars.Unknown = append(slices.Clip(v.in.Vars.Unknown), unknownTool...)
	}
	d := rs.Evaluate(&v.in)
	if d.Action == "" {
		d.Action = policy.ActionAllow
	}
	if d.Action == policy.ActionAllow && d.Reason == "" {
		d.Reason = policy.ReasonNoMatch
	}
	return d
}

// evalVars is the policy input of one evaluation, kept on the exchange and reused message after
// message: nothing of it is allocated per message. An exchange's evaluations run on one goroutine
// at a time (the request side, then the response side).
type evalVars struct {
	in     policy.Input
	http   policy.Request
	msg    policy.Message
	rpcErr policy.RPCError
	tools  policy.ToolIntegrity
	body   messageBody
}

// messageBody gives policy the members of m that cost a decode, when a rule reads them.
type messageBody struct {
	s   *conn
	st  *xstate
	m   *mcp.Message
	dir string
}

func (b *messageBody) Arguments() map[string]any {
	if b.m.Kind != mcp.KindRequest && b.m.Kind != mcp.KindNotification {
		return nil
	}
	return b.m.Arguments()
}

func (b *messageBody) Result() any {
	if b.m.Kind != mcp.KindResponse {
		return nil
	}
	return mcp.DecodeValue(b.m.Result)
}

// ClientInfo is the info of the client, only ever as the client sent it: a client message's own
// (initialize, _meta), else the client's identity for this exchange, session or flow. A
// server→client message's own _meta is never read: the server does not name the client.
func (b *messageBody) ClientInfo() map[string]any {
	if b.dir != ServerToClient && b.m.Kind != mcp.KindRequest && b.m.Kind != mcp.KindNotification {
		return nil
	}
	if b.dir != ServerToClient {
		if ci := b.m.ClientInfo(); ci != nil {
			return ci
		}
	}
	if b.s == nil {
		return b.st.clientInfo
	}
	ci, _ := clientIdentity(b.s, b.st)
	return ci
}
