package level2

import (
	"mcpintercept/exchange"
	"mcpintercept/mcp"
	"mcpintercept/policy"
)

// checkArguments is the route's validate_arguments: tools/call arguments against the input
// schema the server listed.
func checkArguments(s *conn, x *exchange.Exchange, st *xstate, b *requestBody) (exchange.Result, bool) {
	if !s.f.ValidateArguments {
		return exchange.Continue, false
	}
	return validateArguments(s, x, st, b.msgs, b.batch)
}

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
		if m.Kind != mcp.KindRequest || m.Method != mcp.MethodToolsCall {
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
