package level2

import (
	"strconv"
	"time"

	"mcpintercept/exchange"
	"mcpintercept/mcp"
	"mcpintercept/policy"
)

// codeURLElicitationRequired is MCP's URLElicitationRequired error (2025-11-25): its
// data.elicitations are URL elicitations the client is to complete before it retries.
const codeURLElicitationRequired = -32042

// errorElicitations judges the URL elicitations a -32042 error carries in data.elicitations as
// the server→client elicitation/create requests they are: the Go SDK client runs its elicitation
// handler for each of them and then retries the call, so a rule on elicitation (mcp.mode "url")
// must see them as it sees one on a stream. Each is recorded; a blocked one turns the error into
// the appliance's (-31000), without the elicitations (the server cannot be answered for them:
// the client would have retried the call). It returns the new message when it changed.
func errorElicitations(s *conn, x *exchange.Exchange, st *xstate, m *mcp.Message, req *Record) ([]byte, bool) {
	if m.Error == nil || m.Error.Code != codeURLElicitationRequired || !mcp.IsObject(m.Error.Data) {
		return nil, false
	}
	arr, ok := mcp.Member(m.Error.Data, "elicitations")
	if !ok || len(arr) == 0 || arr[0] != '[' {
		return nil, false
	}
	const method = mcp.MethodElicitationCreate
	var blocked *policy.Decision
	for i, e := range mcp.Elements(arr) {
		params := arr[e[0]:e[1]]
		im := &mcp.Message{Kind: mcp.KindRequest, Method: method, Params: params}
		r := &Record{Time: time.Now(), Direction: ServerToClient, Kind: "request", ID: "elicitations[" + strconv.Itoa(i) + "]",
			Method: method, Name: mcp.RedactURI(req.Name), Version: st.version, HTTPMethod: x.Req.Method, Path: st.path}
		d := evaluate(s, x, st, im, r, ServerToClient, nil, serverRequestInput(method, params, req.Name))
		r.Decision, r.Rule = d.Action, d.Rule
		r.Reason = kindOf(method, params) + " request in error " + strconv.Itoa(codeURLElicitationRequired) + " of " + req.Method + ": " + d.Reason
		if d.Action != policy.ActionAllow && blocked == nil {
			blocked = &d
			r.Reason += "; the client gets an error instead of the elicitations"
		}
		st.messages++
		s.emit(r)
	}
	if blocked == nil {
		return nil, false
	}
	req.Decision, req.Rule = blocked.Action, blocked.Rule
	req.Reason = "URL elicitation in error " + strconv.Itoa(codeURLElicitationRequired) + " denied: " + blocked.Reason
	return mcp.DenialBody(m.ID, CodeDenied, "URL elicitation denied by "+Intermediary+" policy", blocked.Rule, blocked.Reason, 0), true
}

// checkErrorElicitations is the response step of errorElicitations, on an error.
func checkErrorElicitations(s *conn, x *exchange.Exchange, st *xstate, sm *serverMessage) bool {
	if sm.m.Kind == mcp.KindResponse {
		return false
	}
	if o, ok := errorElicitations(s, x, st, sm.m, sm.rec); ok {
		sm.out, sm.changed = o, true // a URL elicitation policy blocks
		return true
	}
	return false
}
